// gantryd's web page (GET / and /ui) and the endpoint feeding it (GET /v1/overview): the queue
// with reasons and estimates, GPU occupancy per topology domain, team usage against quota over
// time and the recent decisions, drawn with the report's chart library (Vega-Lite), which
// gantryd serves from the node_modules directory (report/chart_library.h) under /ui/assets/.
// Private to the control module: ApiServer registers these routes.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>

#include "gantry/control/controller.h"

namespace gantry::control::web {

// The overview as `caller_team` (empty with `is_operator`) may see it: occupancy is
// cluster-wide; team usage, its history and the decisions are the caller's team's only, unless
// the caller is the operator.
nlohmann::json OverviewJson(const ControlSnapshot& snapshot, bool is_operator,
                            const std::string& caller_team);

// Registers GET /, /ui, /ui/app.js, /ui/style.css and
// /ui/assets/{vega,vega-lite,vega-embed}.min.js. The chart library is read from `chart_library_dir`
// once, here; when it is missing the page still shows its tables, and says why it has no charts and
// how to install them.
void RegisterPage(httplib::Server& server, const std::string& chart_library_dir);

}  // namespace gantry::control::web
