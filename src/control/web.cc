#include "control/web.h"

#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "gantry/common/text.h"
#include "gantry/report/chart_library.h"

namespace gantry::control::web {

namespace {

using nlohmann::json;

// The page holds no inline script, so a job or team name that slipped past the escaping could
// still not run: scripts come only from gantryd itself. Vega compiles its expressions with
// Function(), hence 'unsafe-eval'; Vega-Embed adds a <style> element, hence the inline styles.
constexpr char kSecurityPolicy[] =
    "default-src 'none'; script-src 'self' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";

void Send(httplib::Response& res, std::string_view body, const char* type) {
  res.status = 200;
  res.set_header("Content-Security-Policy", kSecurityPolicy);
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_content(std::string(body), type);
}

constexpr std::string_view kPageHead = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>gantryd</title>
<link rel="stylesheet" href="/ui/style.css">
</head>
<body>
<header><h1>gantryd</h1><span id="status">loading</span></header>
<form id="login" hidden>
  <label>API token <input id="token-input" type="password" autocomplete="off" size="40"></label>
  <button type="submit">Show</button>
  <span class="hint">A team's token shows that team; the operator token shows every team.
  A bookmark may carry it as <code>/#token=...</code> (the fragment never reaches the server).</span>
</form>
<p id="error" class="error" hidden></p>
)html";

constexpr std::string_view kPageBody = R"html(
<section>
  <h2>Queue <span class="sub">pending jobs, in the order the plan expects them to start</span></h2>
  <table id="queue"><thead><tr><th>Job</th><th>Team</th><th>User</th><th>GPUs</th>
    <th>Reason</th><th>Estimated start</th><th>Why</th></tr></thead><tbody></tbody></table>
  <p id="queue-empty" class="muted" hidden>No pending jobs.</p>
  <p id="queue-more" class="muted" hidden></p>
</section>
<section>
  <h2>GPU occupancy by topology domain</h2>
  <div id="chart-occupancy" class="chart"></div>
</section>
<section>
  <h2>Team usage against quota <span class="sub">running GPUs; dashed: quota</span></h2>
  <div id="chart-usage" class="chart"></div>
  <table id="teams"><thead><tr><th>Team</th><th>Running GPUs</th><th>Quota</th>
    <th>Pending jobs</th><th>Pending GPUs</th></tr></thead><tbody></tbody></table>
</section>
<section>
  <h2>Recent decisions</h2>
  <table id="decisions"><thead><tr><th>Time (UTC)</th><th>Event</th><th>Job</th><th>Team</th>
    <th>GPUs</th><th>Detail</th></tr></thead><tbody></tbody></table>
  <p id="decisions-empty" class="muted" hidden>No decisions yet.</p>
</section>
)html";

constexpr std::string_view kStyle = R"css(
body { font: 14px/1.4 system-ui, sans-serif; margin: 1em 2em; color: #222; }
header { display: flex; align-items: baseline; gap: 1em; }
h1 { margin: 0; font-size: 1.4em; }
h2 { font-size: 1.1em; margin: 1.4em 0 0.4em; }
.sub, .muted, .hint, #status { color: #666; font-weight: normal; font-size: 0.9em; }
.error { color: #a00; background: #fee; padding: 0.4em 0.8em; border-radius: 4px; }
table { border-collapse: collapse; min-width: 40em; }
th, td { text-align: left; padding: 0.2em 0.8em 0.2em 0; border-bottom: 1px solid #eee; }
td.num, th.num { text-align: right; }
.chart { min-height: 2em; }
)css";

// Every value from the API is put into the page with textContent or as chart data, never as
// markup: job, user and team names are chosen by users.
constexpr std::string_view kScript = R"js(
'use strict';
(function () {
  var POLL_MS = 3000;
  var token = '';
  var timer = null;
  var updates = 0;
  var charts = {};

  function $(id) { return document.getElementById(id); }
  function show(el, on) { el.hidden = !on; }
  function fail(msg) { $('error').textContent = msg; show($('error'), true); }

  function utc(t) {
    if (t === null || t === undefined || t < 0) return '';
    return new Date(t * 1000).toISOString().replace('T', ' ').replace(/\.\d+Z$/, '');
  }
  function relative(t, now) {
    if (t === null || t === undefined) return 'not yet planned';
    var d = t - now;
    if (d <= 0) return utc(t) + ' (now)';
    var s = d < 120 ? d + ' s' : d < 7200 ? Math.round(d / 60) + ' min' :
        Math.round(d / 360) / 10 + ' h';
    return utc(t) + ' (in ' + s + ')';
  }
  function fill(table, rows) {
    var body = table.tBodies[0];
    while (body.firstChild) body.removeChild(body.firstChild);
    rows.forEach(function (cells) {
      var tr = document.createElement('tr');
      cells.forEach(function (c) {
        var td = document.createElement('td');
        if (typeof c === 'number') td.className = 'num';
        td.textContent = c === null || c === undefined ? '' : String(c);
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
  }

  function get(path) {
    return fetch(path, {headers: {'Authorization': 'Bearer ' + token}, cache: 'no-store'})
        .then(function (r) {
          if (r.status === 401) throw {auth: true};
          if (!r.ok) throw new Error(path + ': HTTP ' + r.status);
          return r.json();
        });
  }

  function chartsAvailable() { return typeof vegaEmbed === 'function'; }

  function draw(id, spec) {
    if (!chartsAvailable()) return Promise.resolve();
    var el = $(id);
    if (charts[id]) charts[id].finalize();
    return vegaEmbed(el, spec, {renderer: 'svg', actions: false}).then(function (r) {
      charts[id] = r;
      el.removeAttribute('data-chart-error');
    }, function (e) {
      el.setAttribute('data-chart-error', String(e && e.message || e));
      el.textContent = 'Chart failed to render: ' + (e && e.message || e);
    });
  }

  function occupancySpec(o) {
    var values = [];
    o.occupancy.forEach(function (d) {
      values.push({domain: d.domain, state: 'busy', gpus: d.busy});
      values.push({domain: d.domain, state: 'free', gpus: d.total - d.busy});
    });
    return {
      $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
      width: {step: 36}, height: 180,
      data: {values: values},
      mark: 'bar',
      encoding: {
        x: {field: 'domain', type: 'nominal', sort: null, title: 'Topology domain'},
        y: {field: 'gpus', type: 'quantitative', stack: true, title: 'GPUs'},
        color: {field: 'state', type: 'nominal', title: null,
                scale: {domain: ['busy', 'free'], range: ['#d95f02', '#d9d9d9']}},
        order: {field: 'state', sort: 'ascending'}
      }
    };
  }

  // Teams drawn: those that ran anything in the window (at most 10, by peak), so a site of
  // hundreds of teams still gets a readable chart; the table below lists all.
  function usageSpec(o) {
    var peak = {};
    o.history.forEach(function (s) {
      Object.keys(s.running).forEach(function (t) {
        peak[t] = Math.max(peak[t] || 0, s.running[t]);
      });
    });
    o.teams.forEach(function (t) { peak[t.team] = Math.max(peak[t.team] || 0, t.running); });
    var shown = Object.keys(peak).filter(function (t) { return peak[t] > 0; })
        .sort(function (a, b) { return peak[b] - peak[a] || (a < b ? -1 : 1); }).slice(0, 10);
    if (shown.length === 0) shown = o.teams.slice(0, 10).map(function (t) { return t.team; });
    var lines = [];
    o.history.forEach(function (s) {
      shown.forEach(function (t) {
        lines.push({time: s.time * 1000, team: t, gpus: s.running[t] || 0});
      });
    });
    var last = o.history.length ? o.history[o.history.length - 1].time : -1;
    if (o.time > last) {
      o.teams.forEach(function (t) {
        if (shown.indexOf(t.team) >= 0) lines.push({time: o.time * 1000, team: t.team, gpus: t.running});
      });
    }
    var quotas = o.teams.filter(function (t) {
      return t.quota !== null && shown.indexOf(t.team) >= 0;
    }).map(function (t) { return {team: t.team, quota: t.quota}; });
    var color = {field: 'team', type: 'nominal', title: 'Team', scale: {domain: shown}};
    var layers = [{
      data: {values: lines},
      mark: {type: 'line', point: true, interpolate: 'step-after'},
      encoding: {
        x: {field: 'time', type: 'temporal', title: 'Time', axis: {format: '%H:%M'}},
        y: {field: 'gpus', type: 'quantitative', title: 'Running GPUs'},
        color: color
      }
    }];
    if (quotas.length) {
      layers.push({
        data: {values: quotas},
        mark: {type: 'rule', strokeDash: [6, 4]},
        encoding: {y: {field: 'quota', type: 'quantitative'}, color: color}
      });
    }
    return {
      $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
      width: 560, height: 220, layer: layers
    };
  }

  function render(queue, o) {
    var now = o.time;
    fill($('queue'), queue.jobs.map(function (j) {
      return [j.id, j.team, j.user, j.gpus, j.reason, relative(j.estimated_start, now), j.explain];
    }));
    show($('queue-empty'), queue.jobs.length === 0);
    // /v1/queue answers its first page (1,000 jobs): say how many more there are.
    $('queue-more').textContent = 'Showing the first ' + queue.jobs.length + ' of ' +
        queue.total + ' pending jobs (gantry queue lists them all).';
    show($('queue-more'), queue.total > queue.jobs.length);
    fill($('teams'), o.teams.map(function (t) {
      return [t.team, t.running, t.quota === null ? 'none' : t.quota, t.pending_jobs,
              t.pending_gpus];
    }));
    fill($('decisions'), o.decisions.slice().reverse().map(function (d) {
      return [utc(d.time), d.kind, d.job, d.team, d.gpus, d.detail];
    }));
    show($('decisions-empty'), o.decisions.length === 0);
    $('status').textContent = 'at ' + utc(now) + ' UTC; ' + o.gpus.busy + ' of ' + o.gpus.total +
        ' GPUs busy; refreshed every ' + POLL_MS / 1000 + ' s';
    return Promise.all([draw('chart-occupancy', occupancySpec(o)),
                        draw('chart-usage', usageSpec(o))]);
  }

  function refresh() {
    return Promise.all([get('/v1/queue'), get('/v1/overview')]).then(function (r) {
      show($('error'), false);
      return render(r[0], r[1]).then(function () {
        updates += 1;
        document.body.setAttribute('data-updates', String(updates));
        if (chartsAvailable()) document.body.setAttribute('data-charts-rendered', '2');
      });
    }).catch(function (e) {
      if (e && e.auth) {
        stop();
        fail('gantryd does not know this token.');
        show($('login'), true);
        return;
      }
      fail('Cannot reach gantryd: ' + (e && e.message || e));
    });
  }
  function stop() { if (timer !== null) clearInterval(timer); timer = null; }
  function start(t) {
    token = t;
    try { sessionStorage.setItem('gantry-token', t); } catch (e) {}
    show($('login'), false);
    stop();
    refresh();
    timer = setInterval(refresh, POLL_MS);
  }

  if (!chartsAvailable()) {
    var why = document.body.getAttribute('data-assets-error') ||
        'the chart library (Vega) did not load';
    var el = $('assets-error');
    el.textContent = 'Charts are unavailable: ' + why;
    show(el, true);
  }
  $('login').addEventListener('submit', function (ev) {
    ev.preventDefault();
    var t = $('token-input').value.trim();
    if (t) start(t);
  });
  var m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  var initial = m ? decodeURIComponent(m[1]) : '';
  if (m) history.replaceState(null, '', location.pathname + location.search);
  if (!initial) { try { initial = sessionStorage.getItem('gantry-token') || ''; } catch (e) {} }
  if (initial) start(initial); else { $('status').textContent = 'no token'; show($('login'), true); }
})();
)js";

struct PageState {
  std::string html;
  std::vector<ChartLibraryFile> library;  // empty when missing
};

}  // namespace

json OverviewJson(const ControlSnapshot& snapshot, bool is_operator,
                  const std::string& caller_team) {
  const Overview& o = snapshot.overview;
  json occupancy = json::array();
  for (const DomainOccupancy& d : o.occupancy) {
    occupancy.push_back(
        {{"domain", d.domain}, {"level", d.level}, {"total", d.total_gpus}, {"busy", d.busy_gpus}});
  }
  std::vector<bool> visible(o.teams.size(), false);
  json teams = json::array();
  for (size_t t = 0; t < o.teams.size(); ++t) {
    const TeamUsage& u = o.teams[t];
    visible[t] = is_operator || u.team == caller_team;
    if (!visible[t]) continue;
    teams.push_back({{"team", u.team},
                     {"quota", u.quota_gpus == kNoQuota ? json(nullptr) : json(u.quota_gpus)},
                     {"running", u.running_gpus},
                     {"pending_gpus", u.pending_gpus},
                     {"pending_jobs", u.pending_jobs}});
  }
  json history = json::array();
  for (const auto& s : o.history) {
    json running = json::object();
    for (size_t t = 0; t < o.teams.size() && t < s->running_gpus.size(); ++t) {
      if (visible[t]) running[o.teams[t].team] = s->running_gpus[t];
    }
    history.push_back({{"time", s->time}, {"running", std::move(running)}});
  }
  json decisions = json::array();
  for (const Decision& d : o.decisions) {
    if (!is_operator && d.team != caller_team) continue;
    decisions.push_back({{"seq", d.seq},
                         {"time", d.time},
                         {"kind", d.kind},
                         {"job", d.job},
                         {"team", d.team},
                         {"gpus", d.gpus},
                         {"detail", d.detail}});
  }
  return {{"time", snapshot.time},
          {"cycles", snapshot.cycles},
          {"gpus", {{"total", snapshot.total_gpus}, {"busy", snapshot.busy_gpus}}},
          {"occupancy", std::move(occupancy)},
          {"teams", std::move(teams)},
          {"history_interval_s", kUsageSampleInterval},
          {"history_max_samples", kUsageHistorySamples},
          {"history", std::move(history)},
          {"decisions", std::move(decisions)}};
}

void RegisterPage(httplib::Server& server, const std::string& chart_library_dir) {
  auto state = std::make_shared<PageState>();
  Result<std::vector<ChartLibraryFile>> library = LoadChartLibrary(chart_library_dir);
  std::string html(kPageHead);
  if (library.ok()) {
    state->library = std::move(library).value();
    html += "<p id=\"assets-error\" class=\"error\" hidden></p>\n";
  } else {
    html += "<p id=\"assets-error\" class=\"error\">Charts are unavailable: " +
            EscapeMarkup(library.status().message()) + "</p>\n";
  }
  html += kPageBody;
  for (const ChartLibraryFile& f : state->library) {
    html += "<script src=\"/ui/assets/" + f.name + "\"></script>\n";
  }
  html += "<script src=\"/ui/app.js\"></script>\n</body>\n</html>\n";
  if (!library.ok()) {
    // The script reads the reason from here when it finds no chart library.
    const std::string attr =
        " data-assets-error=\"" + EscapeMarkup(library.status().message()) + "\"";
    html.insert(html.find("<body") + 5, attr);
  }
  state->html = std::move(html);

  auto page = [state](const httplib::Request&, httplib::Response& res) {
    Send(res, state->html, "text/html; charset=utf-8");
  };
  server.Get("/", page);
  server.Get("/ui", page);
  server.Get("/ui/app.js", [](const httplib::Request&, httplib::Response& res) {
    Send(res, kScript, "text/javascript; charset=utf-8");
  });
  server.Get("/ui/style.css", [](const httplib::Request&, httplib::Response& res) {
    Send(res, kStyle, "text/css; charset=utf-8");
  });
  server.Get(R"(/ui/assets/([A-Za-z0-9.-]+))",
             [state](const httplib::Request& req, httplib::Response& res) {
               for (const ChartLibraryFile& f : state->library) {
                 if (f.name == req.matches[1]) {
                   Send(res, f.content, "text/javascript; charset=utf-8");
                   res.set_header("Cache-Control", "max-age=3600");
                   return;
                 }
               }
               res.status = 404;  // the API's error handler writes the JSON error
             });
}

}  // namespace gantry::control::web
