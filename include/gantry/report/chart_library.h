// The chart library Gantry's pages draw with: Vega, Vega-Lite and Vega-Embed, read at run time
// from a node_modules directory (web/package.json; scripts/setup runs `npm ci --prefix web`).
// The HTML report inlines these files; gantryd's web page serves them. Nothing is fetched from
// the network, so both work on a cluster without Internet access.
#pragma once

#include <string>
#include <vector>

#include "gantry/common/status.h"

namespace gantry {

struct ChartLibraryFile {
  std::string name;           // the file's own name, e.g. "vega.min.js"
  std::string relative_path;  // below the node_modules directory
  std::string content;
};

// The node_modules directory: $GANTRY_WEB_DIR when set and not empty; else, for an installed
// binary (`cmake --install`), PREFIX/share/gantry/web beside the running executable's
// PREFIX/bin when it holds the library; else the build's default (the source tree's
// web/node_modules), so a binary run from its build tree reads what scripts/setup installed.
std::string ChartLibraryDir();

// Where `cmake --install` puts the chart library, below the install prefix.
inline constexpr char kInstalledChartLibrary[] = "share/gantry/web";

// Reads Vega, Vega-Lite and Vega-Embed from `dir`, in the order a page must load them.
// FailedPrecondition naming the missing file and how to install it when one is missing or empty.
Result<std::vector<ChartLibraryFile>> LoadChartLibrary(const std::string& dir);

}  // namespace gantry
