// The self-contained HTML report: summary tables plus Vega-Lite charts, with Vega, Vega-Lite and
// Vega-Embed inlined so that the page works offline when opened from disk.

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/common/text.h"
#include "gantry/report/chart_library.h"
#include "gantry/report/result.h"
#include "report/report_internal.h"

namespace gantry {
namespace {

using nlohmann::ordered_json;
using report_internal::AppendFixed;
using report_internal::CompactDuration;
using report_internal::NearestRank;
using report_internal::Round6;

// CDFs are drawn from at most this many points per profile, so a million-job run still makes
// a page of a few hundred kilobytes of data.
constexpr size_t kMaxCdfPoints = 200;
// Teams drawn individually in the share charts; the rest are summed into "other" (more colours
// than this cannot be told apart).
constexpr size_t kMaxTeamsShown = 8;
constexpr int kChartWidth = 560;
constexpr int kChartHeight = 260;

// Inlined text must not close the <script> element early; "<\/script" means the same inside JS
// strings and JSON, and the minified libraries contain the sequence nowhere else.
std::string EscapeForScript(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/' && i + 8 <= text.size()) {
      std::string tag(text.substr(i + 2, 6));
      std::transform(tag.begin(), tag.end(), tag.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (tag == "script") {
        out += "<\\/";
        ++i;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

std::string Fixed(double v, int decimals) {
  std::string out;
  AppendFixed(out, v, decimals);
  return out;
}

std::string ProfileName(const SimResult& r) {
  return r.summary.profile.empty() ? r.profile : r.summary.profile;
}

// A profile's name in a table's row header, marked when it is an oracle or the recorded history,
// so that nobody reads an upper bound as a policy a cluster could run.
std::string ProfileCell(const SimResult& r) {
  std::string out = EscapeMarkup(ProfileName(r));
  if (r.oracle) {
    out +=
        " <span class=\"mark oracle\" title=\"reads the trace's true run times: an upper bound, "
        "not a policy a cluster can run\">oracle</span>";
  }
  if (r.as_recorded) {
    out +=
        " <span class=\"mark recorded\" title=\"the trace's own start times, replayed\">"
        "recorded</span>";
  }
  return out;
}

std::string TeamName(const SimResult& r, size_t team) {
  if (team < r.teams.size()) return r.teams[team].name;
  if (r.workload != nullptr && team < r.workload->teams.size()) return r.workload->teams[team];
  return "team " + std::to_string(team);
}

// Sorted values of finished jobs: JCT when `jct`, else wait.
std::vector<double> FinishedJobTimes(const SimResult& r, bool jct) {
  std::vector<double> v;
  if (r.workload == nullptr) return v;
  const size_t n = std::min(r.workload->jobs.size(), r.outcomes.size());
  v.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const JobOutcome& o = r.outcomes[i];
    if (o.start < 0 || o.end < 0) continue;
    const Time submit = r.workload->jobs[i].submit;
    v.push_back(static_cast<double>(jct ? o.end - submit : o.start - submit));
  }
  std::sort(v.begin(), v.end());
  return v;
}

// A log-scale duration axis with ticks at round human durations inside [lo, hi].
ordered_json DurationAxis(const std::string& title, double lo, double hi) {
  ordered_json axis;
  axis["title"] = title;
  static constexpr double kTicks[] = {1,     10,    60,    300,    600,    1800,    3600,    10800,
                                      21600, 43200, 86400, 172800, 604800, 2592000, 31536000};
  ordered_json values = ordered_json::array();
  for (double t : kTicks) {
    if (t >= lo && t <= hi) values.push_back(t);
  }
  if (values.size() >= 2) axis["values"] = std::move(values);
  axis["labelOverlap"] = true;  // drops crowded labels on wide ranges
  axis["labelExpr"] =
      "datum.value >= 86400 ? format(datum.value / 86400, '~g') + 'd' : "
      "datum.value >= 3600 ? format(datum.value / 3600, '~g') + 'h' : "
      "datum.value >= 60 ? format(datum.value / 60, '~g') + 'min' : "
      "format(datum.value, '~g') + 's'";
  return axis;
}

ordered_json ProfileColor(const std::vector<std::string>& profiles) {
  ordered_json color;
  color["field"] = "profile";
  color["type"] = "nominal";
  color["title"] = "Profile";
  color["scale"]["domain"] = profiles;
  color["legend"]["orient"] = "bottom";
  return color;
}

ordered_json BaseSpec(const std::string& title, const std::string& subtitle) {
  ordered_json spec;
  spec["$schema"] = "https://vega.github.io/schema/vega-lite/v5.json";
  spec["title"]["text"] = title;
  if (!subtitle.empty()) spec["title"]["subtitle"] = subtitle;
  spec["title"]["anchor"] = "start";
  spec["width"] = kChartWidth;
  spec["height"] = kChartHeight;
  return spec;
}

// CDF of job durations per profile: exact nearest-rank quantiles at evenly spaced probabilities.
ordered_json CdfChart(const std::vector<const SimResult*>& results,
                      const std::vector<std::string>& profiles, bool jct) {
  ordered_json rows = ordered_json::array();
  double lo = 0, hi = 0;
  bool any = false;
  for (const SimResult* r : results) {
    std::vector<double> v = FinishedJobTimes(*r, jct);
    if (v.empty()) continue;
    // A log axis cannot show 0; sub-second values are drawn at 1 s (stated in the subtitle).
    for (double& x : v) x = std::max(x, 1.0);
    const size_t k = std::min(v.size(), kMaxCdfPoints);
    const std::string name = ProfileName(*r);
    auto add = [&](double x, double p) {
      ordered_json row;
      row["profile"] = name;
      row["seconds"] = Round6(x);
      row["fraction"] = Round6(p);
      rows.push_back(std::move(row));
    };
    add(v.front(), 0);
    for (size_t i = 1; i <= k; ++i) {
      const double p = static_cast<double>(i) / static_cast<double>(k);
      add(NearestRank(v, p), p);
    }
    lo = any ? std::min(lo, v.front()) : v.front();
    hi = any ? std::max(hi, v.back()) : v.back();
    any = true;
  }
  ordered_json spec =
      BaseSpec(jct ? "Job completion time (CDF)" : "Queueing wait (CDF)",
               jct ? "submit to end, completed jobs; log scale"
                   : "submit to start, completed jobs; log scale, waits under 1 s drawn at 1 s");
  spec["data"]["values"] = std::move(rows);
  spec["mark"]["type"] = "line";
  spec["mark"]["interpolate"] = "step-after";
  spec["mark"]["strokeWidth"] = 2;
  spec["mark"]["clip"] = true;
  auto& enc = spec["encoding"];
  enc["x"]["field"] = "seconds";
  enc["x"]["type"] = "quantitative";
  enc["x"]["scale"]["type"] = "log";
  enc["x"]["axis"] =
      DurationAxis(jct ? "Job completion time (log scale)" : "Wait time (log scale)", lo, hi);
  enc["y"]["field"] = "fraction";
  enc["y"]["type"] = "quantitative";
  enc["y"]["scale"]["domain"] = {0, 1};
  enc["y"]["axis"]["title"] = "Fraction of completed jobs";
  enc["y"]["axis"]["format"] = "%";
  enc["color"] = ProfileColor(profiles);
  enc["tooltip"] =
      ordered_json::array({{{"field", "profile"}, {"type", "nominal"}},
                           {{"field", "seconds"}, {"type", "quantitative"}, {"title", "seconds"}},
                           {{"field", "fraction"}, {"type", "quantitative"}, {"format", ".1%"}}});
  return spec;
}

// The x axis of the charts over time: calendar dates when the trace has wall-clock times (every
// run's workload has the same epoch_unix, not 0), else hours or days since the trace's start.
struct TimeAxis {
  double divisor = 3600;
  std::string title = "Time since trace start (hours)";
  Time epoch_unix = 0;  // > 0: dates; t is then Unix milliseconds
  ordered_json Value(Time t) const {
    if (epoch_unix > 0) return (epoch_unix + t) * 1000;
    return Round6(static_cast<double>(t) / divisor);
  }
  // The x encoding of a chart over time.
  ordered_json Encoding() const {
    ordered_json x;
    x["field"] = "t";
    if (epoch_unix > 0) {
      // UTC throughout, so the page shows the trace's own clock in every browser's time zone.
      x["type"] = "temporal";
      x["scale"]["type"] = "utc";
      x["axis"]["labelExpr"] = "utcFormat(datum.value, '%Y-%m-%d %H:%M')";
      x["axis"]["labelOverlap"] = true;
    } else {
      x["type"] = "quantitative";
    }
    x["axis"]["title"] = title;
    return x;
  }
};

TimeAxis ChooseTimeAxis(const std::vector<const SimResult*>& results) {
  Time last = 0;
  for (const SimResult* r : results) {
    if (!r->samples.empty()) last = std::max(last, r->samples.back().t);
  }
  TimeAxis axis;
  const Time epoch =
      results.front()->workload != nullptr ? results.front()->workload->epoch_unix : 0;
  const bool same_epoch = std::all_of(results.begin(), results.end(), [&](const SimResult* r) {
    return r->workload != nullptr && r->workload->epoch_unix == epoch;
  });
  if (epoch > 0 && same_epoch) {
    axis.epoch_unix = epoch;
    axis.title = "Date (UTC, as the trace records it)";
  } else if (last > 3 * 86400) {
    axis.divisor = 86400;
    axis.title = "Time since trace start (days)";
  }
  return axis;
}

// A step line of `rows` ({t, value, ...}) over the time axis: what every time-series chart is.
ordered_json StepLineSpec(const std::string& title, const std::string& subtitle, ordered_json rows,
                          const TimeAxis& axis, const std::string& y_title) {
  ordered_json spec = BaseSpec(title, subtitle);
  spec["data"]["values"] = std::move(rows);
  spec["mark"]["type"] = "line";
  spec["mark"]["interpolate"] = "step-after";
  spec["mark"]["strokeWidth"] = 1.5;
  spec["mark"]["clip"] = true;
  auto& enc = spec["encoding"];
  enc["x"] = axis.Encoding();
  enc["y"]["field"] = "value";
  enc["y"]["type"] = "quantitative";
  enc["y"]["axis"]["title"] = y_title;
  return spec;
}

// One line per profile over the sampled time series; `value` maps a sample to the y value.
template <typename ValueFn>
ordered_json TimeSeriesChart(const std::vector<const SimResult*>& results,
                             const std::vector<std::string>& profiles, const TimeAxis& axis,
                             const std::string& title, const std::string& subtitle,
                             const std::string& y_title, bool percent, ValueFn value) {
  ordered_json rows = ordered_json::array();
  for (const SimResult* r : results) {
    const std::string name = ProfileName(*r);
    for (const TimeSample& s : r->samples) {
      ordered_json row;
      row["profile"] = name;
      row["t"] = axis.Value(s.t);
      row["value"] = Round6(value(*r, s));
      rows.push_back(std::move(row));
    }
  }
  ordered_json spec = StepLineSpec(title, subtitle, std::move(rows), axis, y_title);
  auto& enc = spec["encoding"];
  if (percent) enc["y"]["scale"]["domain"] = {0, 100};
  enc["color"] = ProfileColor(profiles);
  return spec;
}

// Teams ranked by busy GPU samples summed over every run, so that colours match across charts.
std::vector<size_t> TopTeams(const std::vector<const SimResult*>& results, size_t* team_count) {
  std::vector<double> busy;
  for (const SimResult* r : results) {
    for (const TimeSample& s : r->samples) {
      if (busy.size() < s.team_busy_gpus.size()) busy.resize(s.team_busy_gpus.size(), 0);
      for (size_t t = 0; t < s.team_busy_gpus.size(); ++t) busy[t] += s.team_busy_gpus[t];
    }
  }
  *team_count = busy.size();
  std::vector<size_t> order;
  for (size_t t = 0; t < busy.size(); ++t) {
    if (busy[t] > 0) order.push_back(t);
  }
  // Ties break by index so the choice is deterministic.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return busy[a] > busy[b]; });
  if (order.size() > kMaxTeamsShown) order.resize(kMaxTeamsShown);
  return order;
}

// Stacked area of each team's share of the busy GPUs over time, for one run.
ordered_json TeamShareChart(const SimResult& r, const std::vector<size_t>& top,
                            const std::vector<std::string>& team_domain, size_t team_count,
                            const TimeAxis& axis) {
  std::vector<int> slot(team_count, -1);
  for (size_t i = 0; i < top.size(); ++i) slot[top[i]] = static_cast<int>(i);
  const bool has_other = team_domain.size() > top.size();
  ordered_json rows = ordered_json::array();
  std::vector<double> share(team_domain.size());
  for (const TimeSample& s : r.samples) {
    std::fill(share.begin(), share.end(), 0.0);
    int64_t busy = 0;
    for (int32_t g : s.team_busy_gpus) busy += g;
    if (busy > 0) {
      for (size_t t = 0; t < s.team_busy_gpus.size(); ++t) {
        const double pct = 100.0 * s.team_busy_gpus[t] / static_cast<double>(busy);
        if (t < slot.size() && slot[t] >= 0) {
          share[static_cast<size_t>(slot[t])] += pct;
        } else if (has_other) {
          share.back() += pct;
        }
      }
    }
    const ordered_json t = axis.Value(s.t);
    for (size_t i = 0; i < team_domain.size(); ++i) {
      ordered_json row;
      row["t"] = t;
      row["team"] = team_domain[i];
      row["rank"] = static_cast<int>(i);
      row["share"] = Round6(share[i]);
      rows.push_back(std::move(row));
    }
  }
  ordered_json spec = BaseSpec("GPU share by team: " + ProfileName(r),
                               "each team's share of the busy GPUs (top " +
                                   std::to_string(kMaxTeamsShown) + " teams, rest as other)");
  spec["data"]["values"] = std::move(rows);
  spec["mark"]["type"] = "area";
  spec["mark"]["interpolate"] = "step-after";
  auto& enc = spec["encoding"];
  enc["x"] = axis.Encoding();
  enc["y"]["field"] = "share";
  enc["y"]["type"] = "quantitative";
  enc["y"]["stack"] = "zero";
  enc["y"]["scale"]["domain"] = {0, 100};
  enc["y"]["axis"]["title"] = "Share of busy GPUs (%)";
  enc["color"]["field"] = "team";
  enc["color"]["type"] = "nominal";
  enc["color"]["title"] = "Team";
  enc["color"]["scale"]["domain"] = team_domain;
  enc["color"]["sort"] = team_domain;
  enc["order"]["field"] = "rank";
  enc["order"]["type"] = "quantitative";
  return spec;
}

// Job sizes of the wait-by-size chart: GPUs in [lo, hi].
struct SizeBucket {
  int lo, hi;
  const char* label;
};
constexpr SizeBucket kSizeBuckets[] = {{1, 1, "1"},         {2, 4, "2-4"},
                                       {5, 8, "5-8"},       {9, 32, "9-32"},
                                       {33, 128, "33-128"}, {129, 1 << 30, "129+"}};

// The y axis of a linear duration scale, labelled in s/min/h/d.
ordered_json LinearDurationAxis(const std::string& title) {
  ordered_json axis;
  axis["title"] = title;
  axis["labelExpr"] =
      "datum.value >= 86400 ? format(datum.value / 86400, '.3~g') + 'd' : "
      "datum.value >= 3600 ? format(datum.value / 3600, '.3~g') + 'h' : "
      "datum.value >= 60 ? format(datum.value / 60, '.3~g') + 'min' : "
      "format(datum.value, '.3~g') + 's'";
  return axis;
}

// Mean wait of completed jobs by GPUs asked for, one bar per profile in each size bucket: where
// a policy makes large jobs pay for small ones' waits (or the other way round).
ordered_json WaitBySizeChart(const std::vector<const SimResult*>& results,
                             const std::vector<std::string>& profiles) {
  ordered_json rows = ordered_json::array();
  std::vector<bool> used(std::size(kSizeBuckets), false);
  for (const SimResult* r : results) {
    if (r->workload == nullptr) continue;
    std::vector<std::vector<double>> waits(std::size(kSizeBuckets));
    const size_t n = std::min(r->workload->jobs.size(), r->outcomes.size());
    for (size_t i = 0; i < n; ++i) {
      const JobOutcome& o = r->outcomes[i];
      const Job& job = r->workload->jobs[i];
      if (o.start < 0 || o.end < 0) continue;
      for (size_t b = 0; b < std::size(kSizeBuckets); ++b) {
        if (job.gpus >= kSizeBuckets[b].lo && job.gpus <= kSizeBuckets[b].hi) {
          waits[b].push_back(static_cast<double>(o.start - job.submit));
        }
      }
    }
    for (size_t b = 0; b < waits.size(); ++b) {
      std::vector<double>& w = waits[b];
      if (w.empty()) continue;
      used[b] = true;
      double sum = 0;
      for (double x : w) sum += x;
      std::sort(w.begin(), w.end());
      ordered_json row;
      row["profile"] = ProfileName(*r);
      row["size"] = kSizeBuckets[b].label;
      row["jobs"] = w.size();
      row["mean_wait"] = Round6(sum / static_cast<double>(w.size()));
      row["p90_wait"] = Round6(NearestRank(w, 0.9));
      rows.push_back(std::move(row));
    }
  }
  ordered_json sizes = ordered_json::array();
  for (size_t b = 0; b < used.size(); ++b) {
    if (used[b]) sizes.push_back(kSizeBuckets[b].label);
  }
  ordered_json spec = BaseSpec("Wait by job size",
                               "mean submit-to-start wait of completed jobs, by GPUs asked for");
  spec["data"]["values"] = std::move(rows);
  spec["mark"]["type"] = "bar";
  auto& enc = spec["encoding"];
  enc["x"]["field"] = "size";
  enc["x"]["type"] = "ordinal";
  enc["x"]["sort"] = sizes;
  enc["x"]["axis"]["title"] = "GPUs per job";
  enc["x"]["axis"]["labelAngle"] = 0;
  enc["xOffset"]["field"] = "profile";
  enc["xOffset"]["sort"] = profiles;
  enc["y"]["field"] = "mean_wait";
  enc["y"]["type"] = "quantitative";
  enc["y"]["axis"] = LinearDurationAxis("Mean wait");
  enc["color"] = ProfileColor(profiles);
  enc["tooltip"] = ordered_json::array(
      {{{"field", "profile"}, {"type", "nominal"}},
       {{"field", "size"}, {"type", "ordinal"}, {"title", "GPUs"}},
       {{"field", "jobs"}, {"type", "quantitative"}},
       {{"field", "mean_wait"}, {"type", "quantitative"}, {"title", "mean wait (s)"}},
       {{"field", "p90_wait"}, {"type", "quantitative"}, {"title", "p90 wait (s)"}}});
  return spec;
}

// Cumulative counts (or GPU-hours) over time, one line per profile and series: `series` are
// (name, value of a sample) pairs; only series some run has a non-zero total of are drawn.
struct Series {
  std::string name;
  double (*value)(const TimeSample&);
};

ordered_json CumulativeChart(const std::vector<const SimResult*>& results,
                             const std::vector<std::string>& profiles, const TimeAxis& axis,
                             const std::string& title, const std::string& subtitle,
                             const std::string& y_title, const std::vector<Series>& all_series) {
  std::vector<const Series*> series;
  for (const Series& s : all_series) {
    const bool any = std::any_of(results.begin(), results.end(), [&](const SimResult* r) {
      return !r->samples.empty() && s.value(r->samples.back()) > 0;
    });
    if (any) series.push_back(&s);
  }
  ordered_json rows = ordered_json::array();
  ordered_json names = ordered_json::array();
  for (const Series* s : series) names.push_back(s->name);
  for (const SimResult* r : results) {
    for (const Series* se : series) {
      for (const TimeSample& sample : r->samples) {
        ordered_json row;
        row["profile"] = ProfileName(*r);
        row["series"] = se->name;
        row["t"] = axis.Value(sample.t);
        row["value"] = Round6(se->value(sample));
        rows.push_back(std::move(row));
      }
    }
  }
  ordered_json spec = StepLineSpec(title, subtitle, std::move(rows), axis, y_title);
  auto& enc = spec["encoding"];
  enc["color"] = ProfileColor(profiles);
  enc["strokeDash"]["field"] = "series";
  enc["strokeDash"]["type"] = "nominal";
  enc["strokeDash"]["title"] = "Series";
  enc["strokeDash"]["scale"]["domain"] = std::move(names);
  enc["strokeDash"]["legend"]["orient"] = "bottom";
  return spec;
}

void AppendSummaryTable(std::string& html, const std::vector<const SimResult*>& results) {
  html +=
      "<table class=\"summary\"><thead><tr><th>Profile</th><th>Jobs</th><th>Completed</th>"
      "<th>Unfinished</th><th>Makespan</th><th>GPU util.</th><th>Wait mean</th><th>Wait p50</th>"
      "<th>Wait p95</th><th>Wait p99</th><th>JCT mean</th><th>JCT p50</th><th>JCT p95</th>"
      "<th>JCT p99</th><th>Bounded slowdown mean</th><th>Bounded slowdown p95</th>"
      "<th>Jain fairness</th><th>Frag. wait</th><th>Backfilled</th><th>Killed at limit</th>"
      "<th>Cancelled</th><th>Requeues</th><th>Lost "
      "GPU-h</th><th>Goodput</th></tr></thead><tbody>\n";
  for (const SimResult* r : results) {
    const SimSummary& s = r->summary;
    const std::vector<std::string> cells = {std::to_string(s.jobs),
                                            std::to_string(s.jobs_completed),
                                            std::to_string(s.jobs_unfinished),
                                            CompactDuration(static_cast<double>(s.makespan)),
                                            Fixed(100 * s.gpu_utilization, 1) + "%",
                                            CompactDuration(s.wait_mean),
                                            CompactDuration(s.wait_p50),
                                            CompactDuration(s.wait_p95),
                                            CompactDuration(s.wait_p99),
                                            CompactDuration(s.jct_mean),
                                            CompactDuration(s.jct_p50),
                                            CompactDuration(s.jct_p95),
                                            CompactDuration(s.jct_p99),
                                            Fixed(s.bounded_slowdown_mean, 2),
                                            Fixed(s.bounded_slowdown_p95, 2),
                                            Fixed(s.jain_fairness, 3),
                                            Fixed(100 * s.frag_wait_fraction, 1) + "%",
                                            std::to_string(s.jobs_backfilled),
                                            std::to_string(s.jobs_killed_at_limit),
                                            std::to_string(s.jobs_cancelled),
                                            std::to_string(s.requeues),
                                            Fixed(s.lost_gpu_hours, 1),
                                            Fixed(100 * s.goodput, 1) + "%"};
    html += "<tr><th>" + ProfileCell(*r) + "</th>";
    for (const std::string& c : cells) html += "<td>" + EscapeMarkup(c) + "</td>";
    html += "</tr>\n";
  }
  html += "</tbody></table>\n";
  if (std::any_of(results.begin(), results.end(), [](const SimResult* r) { return r->oracle; })) {
    html +=
        "<p class=\"note\">Profiles marked <span class=\"mark oracle\">oracle</span> read the "
        "trace's true run times, which no scheduler knows: their numbers are upper bounds for "
        "comparison, not results a cluster could get.</p>\n";
  }
}

// "+12.5%" / "-40.0%": duration `v` against `base`; the absolute difference when the base is 0.
std::string RelativeDelta(double v, double base) {
  if (base == 0) {
    if (v == 0) return "0";
    return (v > 0 ? "+" : "") + CompactDuration(v);
  }
  const double pct = 100 * (v - base) / base;
  return (pct > 0 ? "+" : "") + Fixed(pct, 1) + "%";
}

// Each profile against the baseline: mean and p99 JCT and wait, and utilisation (its delta in
// percentage points).
void AppendDeltasTable(std::string& html, const std::vector<const SimResult*>& results,
                       const SimResult& base) {
  const SimSummary& b = base.summary;
  html += "<p class=\"note\">Baseline: <b>" + EscapeMarkup(ProfileName(base)) +
          "</b>. Each cell: the value, then its change against the baseline's (durations in %, "
          "utilisation in percentage points).</p>\n";
  html +=
      "<table class=\"deltas\"><thead><tr><th>Profile</th><th>JCT mean</th><th>JCT p99</th>"
      "<th>Wait mean</th><th>Wait p99</th><th>GPU util.</th></tr></thead><tbody>\n";
  for (const SimResult* r : results) {
    const SimSummary& s = r->summary;
    const bool is_base = r == &base;
    const auto cell = [&](double v, double bv) {
      std::string c = "<td>" + EscapeMarkup(CompactDuration(v));
      if (!is_base) c += " <span class=\"delta\">" + EscapeMarkup(RelativeDelta(v, bv)) + "</span>";
      return c + "</td>";
    };
    html += "<tr" + std::string(is_base ? " class=\"baseline\"" : "") + "><th>" + ProfileCell(*r) +
            (is_base ? " (baseline)" : "") + "</th>";
    html += cell(s.jct_mean, b.jct_mean) + cell(s.jct_p99, b.jct_p99) +
            cell(s.wait_mean, b.wait_mean) + cell(s.wait_p99, b.wait_p99);
    html += "<td>" + Fixed(100 * s.gpu_utilization, 1) + "%";
    if (!is_base) {
      const double pp = 100 * (s.gpu_utilization - b.gpu_utilization);
      html +=
          " <span class=\"delta\">" + std::string(pp > 0 ? "+" : "") + Fixed(pp, 1) + " pp</span>";
    }
    html += "</td></tr>\n";
  }
  html += "</tbody></table>\n";
}

// Every profile's replay error against the as-recorded run (SetReplayError).
void AppendReplayErrorTable(std::string& html, const std::vector<const SimResult*>& results) {
  html +=
      "<p class=\"note\">How far each profile is from what the site's own scheduler did, job by "
      "job: |wait in the run - recorded wait| and the same for JCT, over jobs completed in both. "
      "Bias: the mean signed difference (above 0: the run waits longer than history).</p>\n"
      "<table class=\"replay\"><thead><tr><th>Profile</th><th>Against</th><th>Jobs "
      "compared</th><th>Not compared</th><th>|Wait diff| mean</th><th>p50</th><th>p90</th>"
      "<th>Wait bias</th><th>|JCT diff| mean</th><th>p50</th><th>p90</th><th>JCT bias</th>"
      "</tr></thead><tbody>\n";
  for (const SimResult* r : results) {
    if (!r->summary.replay_error) continue;
    const ReplayError& e = *r->summary.replay_error;
    html += "<tr><th>" + ProfileCell(*r) + "</th><td>" + EscapeMarkup(e.against) + "</td><td>" +
            std::to_string(e.jobs_compared) + "</td><td>" + std::to_string(e.jobs_not_compared) +
            "</td>";
    for (double v : {e.wait_abs_mean, e.wait_abs_p50, e.wait_abs_p90, e.wait_bias, e.jct_abs_mean,
                     e.jct_abs_p50, e.jct_abs_p90, e.jct_bias}) {
      html += "<td>" + EscapeMarkup(CompactDuration(v)) + "</td>";
    }
    html += "</tr>\n";
  }
  html += "</tbody></table>\n";
}

// Teams shown in the per-team table: the most GPU-hours over all runs first.
constexpr size_t kMaxTeamRows = 20;

// Per team and profile: GPU-hours used against quota, share of the contended GPUs against
// entitlement; and each profile's share fairness (Jain's index over those ratios).
void AppendTeamsTable(std::string& html, const std::vector<const SimResult*>& results) {
  html +=
      "<table class=\"fairness\"><thead><tr><th>Profile</th><th>Share fairness</th>"
      "<th>Contended</th><th>Jain (slowdown)</th></tr></thead><tbody>\n";
  for (const SimResult* r : results) {
    const SimSummary& s = r->summary;
    html += "<tr><th>" + ProfileCell(*r) + "</th><td>" + Fixed(s.share_fairness, 3) + "</td><td>" +
            Fixed(100 * s.contended_fraction, 1) + "%</td><td>" + Fixed(s.jain_fairness, 3) +
            "</td></tr>\n";
  }
  html += "</tbody></table>\n";
  size_t teams = 0;
  for (const SimResult* r : results) teams = std::max(teams, r->summary.teams.size());
  std::vector<double> hours(teams, 0);
  for (const SimResult* r : results) {
    for (size_t t = 0; t < r->summary.teams.size(); ++t) hours[t] += r->summary.teams[t].gpu_hours;
  }
  std::vector<size_t> order(teams);
  for (size_t t = 0; t < teams; ++t) order[t] = t;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return hours[a] > hours[b]; });
  const size_t shown = std::min(order.size(), kMaxTeamRows);
  html +=
      "<p class=\"note\">Quota GPU-h: the quota held for the whole makespan. Share and "
      "entitlement count only the time the cluster was contended (teams wanted more GPUs than it "
      "has): a team's share of the GPUs used then, and of the weighted max-min fair shares it was "
      "entitled to; used/entitled below 1: the team got less than its fair share.";
  if (shown < order.size()) {
    html += " The " + std::to_string(shown) + " teams with the most GPU-hours of " +
            std::to_string(order.size()) + "; all are in each summary.json.";
  }
  html += "</p>\n";
  html +=
      "<table class=\"teams\"><thead><tr><th>Team</th><th>Profile</th><th>Jobs</th>"
      "<th>Quota (GPUs)</th><th>GPU-h used</th><th>Quota GPU-h</th><th>Of quota</th>"
      "<th>Share (contended)</th><th>Entitled share</th><th>Used / entitled</th>"
      "<th>Mean wait</th></tr></thead><tbody>\n";
  for (size_t k = 0; k < shown; ++k) {
    const size_t t = order[k];
    for (const SimResult* r : results) {
      if (t >= r->summary.teams.size()) continue;
      const TeamSummary& ts = r->summary.teams[t];
      const bool quota = ts.quota_gpus != kNoQuota;
      html += "<tr><th>" + EscapeMarkup(ts.name) + "</th><td class=\"name\">" + ProfileCell(*r) +
              "</td><td>" + std::to_string(ts.jobs) + "</td><td>" +
              (quota ? std::to_string(ts.quota_gpus) : "-") + "</td><td>" + Fixed(ts.gpu_hours, 1) +
              "</td><td>" + (quota ? Fixed(ts.quota_gpu_hours, 1) : "-") + "</td><td>" +
              (quota ? Fixed(100 * ts.quota_utilization, 1) + "%" : "-") + "</td><td>" +
              Fixed(100 * ts.contended_share, 1) + "%</td><td>" +
              Fixed(100 * ts.entitled_share, 1) + "%</td><td>" +
              (ts.entitled_gpu_hours > 0 ? Fixed(ts.entitlement_ratio, 2) : "-") + "</td><td>" +
              EscapeMarkup(CompactDuration(ts.mean_wait_s)) + "</td></tr>\n";
    }
  }
  html += "</tbody></table>\n";
}

void AppendRunsTable(std::string& html, const std::vector<const SimResult*>& results) {
  html +=
      "<table class=\"runs\"><thead><tr><th>Profile</th><th>Cluster</th><th>GPUs</th>"
      "<th>Nodes</th><th>Trace</th><th>Format</th><th>Jobs</th><th>Skipped rows</th>"
      "</tr></thead><tbody>\n";
  for (const SimResult* r : results) {
    const Cluster* c = r->cluster;
    const Workload* w = r->workload;
    html += "<tr><th>" + ProfileCell(*r) + "</th><td>" +
            EscapeMarkup(c != nullptr ? c->name() : "-") + "</td><td>" +
            (c != nullptr ? std::to_string(c->total_gpus()) : "-") + "</td><td>" +
            (c != nullptr ? std::to_string(c->nodes().size()) : "-") + "</td><td>" +
            EscapeMarkup(w != nullptr ? w->source : "-") + "</td><td>" +
            EscapeMarkup(w != nullptr ? w->format : "-") + "</td><td>" +
            (w != nullptr ? std::to_string(w->jobs.size()) : "-") + "</td><td>" +
            std::to_string(r->summary.jobs_skipped) + "</td></tr>\n";
  }
  html += "</tbody></table>\n";
}

constexpr std::string_view kStyle = R"css(
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px;
       color: #222; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px 0; }
h2 { font-size: 17px; margin: 28px 0 8px 0; }
p.note { color: #555; font-size: 13px; margin: 4px 0; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 4px 8px; }
thead th { background: #f3f4f6; font-weight: 600; }
tbody th { text-align: left; font-weight: 600; }
td { text-align: right; font-variant-numeric: tabular-nums; }
table.runs td { text-align: left; }
td.name { text-align: left; }
.mark { font-size: 11px; font-weight: 600; padding: 0 4px; border-radius: 3px; }
.mark.oracle { background: #fde68a; color: #7c2d12; }
.mark.recorded { background: #dbeafe; color: #1e3a8a; }
.delta { color: #555; font-size: 12px; }
tr.baseline th, tr.baseline td { background: #f9fafb; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
.chart { min-width: 600px; min-height: 320px; border: 1px solid #eee; padding: 8px; }
[data-chart-error] { color: #b00020; }
)css";

// Renders every chart, then records completion (or the first error) on the page itself, where
// the browser test and a curious reader can both see it.
constexpr std::string_view kRenderScript = R"js(
(function () {
  var charts = JSON.parse(document.getElementById('gantry-charts').textContent);
  function fail(el, e) {
    var msg = (e && e.message) ? e.message : String(e);
    el.setAttribute('data-chart-error', msg);
    if (el !== document.body) el.textContent = 'Chart failed to render: ' + msg;
    document.body.setAttribute('data-chart-error', msg);
  }
  try {
    if (typeof vegaEmbed !== 'function') throw new Error('vega-embed did not load');
    Promise.all(charts.map(function (c) {
      var el = document.getElementById(c.id);
      return vegaEmbed(el, c.spec, {renderer: 'svg', actions: false})
          .catch(function (e) { fail(el, e); throw e; });
    })).then(function () {
      document.body.dataset.chartsRendered = String(charts.length);
    }, function (e) { fail(document.body, e); });
  } catch (e) {
    fail(document.body, e);
  }
})();
)js";

}  // namespace

Status WriteHtmlReport(const std::vector<const SimResult*>& all_results, const std::string& path,
                       const HtmlReportOptions& options) {
  std::vector<const SimResult*> results;
  for (const SimResult* r : all_results) {
    if (r != nullptr) results.push_back(r);
  }
  if (results.empty()) return InvalidArgument("WriteHtmlReport: no results to report");
  const SimResult* baseline = results.front();
  if (!options.baseline.empty()) {
    auto it = std::find_if(results.begin(), results.end(),
                           [&](const SimResult* r) { return ProfileName(*r) == options.baseline; });
    if (it == results.end()) {
      return InvalidArgument("HTML report: baseline profile '" + options.baseline +
                             "' is not among the results");
    }
    baseline = *it;
  }

  Result<std::vector<ChartLibraryFile>> library = LoadChartLibrary(ChartLibraryDir());
  if (!library.ok()) {
    return FailedPrecondition("HTML report: " + library.status().message());
  }
  const std::vector<ChartLibraryFile>& assets = *library;

  std::vector<std::string> profiles;
  for (const SimResult* r : results) profiles.push_back(ProfileName(*r));
  const TimeAxis time_axis = ChooseTimeAxis(results);

  ordered_json charts = ordered_json::array();
  auto add_chart = [&](ordered_json spec) {
    ordered_json c;
    c["id"] = "chart-" + std::to_string(charts.size());
    c["spec"] = std::move(spec);
    charts.push_back(std::move(c));
  };
  add_chart(CdfChart(results, profiles, /*jct=*/true));
  add_chart(CdfChart(results, profiles, /*jct=*/false));
  add_chart(TimeSeriesChart(results, profiles, time_axis, "GPU utilisation",
                            "busy GPUs / all GPUs, sampled", "Busy GPUs (%)", /*percent=*/true,
                            [](const SimResult& r, const TimeSample& s) {
                              const int total = r.cluster != nullptr ? r.cluster->total_gpus() : 0;
                              return total > 0 ? 100.0 * s.busy_gpus / total : 0.0;
                            }));
  add_chart(TimeSeriesChart(results, profiles, time_axis, "Queue length",
                            "jobs submitted and not yet started, sampled", "Pending jobs",
                            /*percent=*/false, [](const SimResult&, const TimeSample& s) {
                              return static_cast<double>(s.pending_jobs);
                            }));
  add_chart(WaitBySizeChart(results, profiles));
  const bool interrupted = std::any_of(results.begin(), results.end(), [](const SimResult* r) {
    const SimSummary& s = r->summary;
    return s.preemptions > 0 || s.requeues > 0 || s.node_failures > 0;
  });
  if (interrupted) {
    add_chart(CumulativeChart(
        results, profiles, time_axis, "Preemptions and failures",
        "cumulative: runs preempted, runs requeued after their node went down, node failures",
        "Count so far",
        {{"preemptions", [](const TimeSample& s) { return static_cast<double>(s.preemptions); }},
         {"requeues", [](const TimeSample& s) { return static_cast<double>(s.requeues); }},
         {"node failures",
          [](const TimeSample& s) { return static_cast<double>(s.node_failures); }}}));
    add_chart(CumulativeChart(
        results, profiles, time_axis, "Work lost",
        "cumulative GPU-hours of work done since the last checkpoint by interrupted runs",
        "GPU-hours lost so far",
        {{"to preemption",
          [](const TimeSample& s) { return s.preemption_lost_gpu_seconds / 3600.0; }},
         {"all interruptions", [](const TimeSample& s) { return s.lost_gpu_seconds / 3600.0; }}}));
  }
  size_t team_count = 0;
  const std::vector<size_t> top = TopTeams(results, &team_count);
  std::vector<std::string> team_domain;
  for (size_t t : top) team_domain.push_back(TeamName(*results.front(), t));
  if (team_count > top.size()) team_domain.push_back("other");
  for (const SimResult* r : results) {
    add_chart(TeamShareChart(*r, top, team_domain, team_count, time_axis));
  }

  std::string title = "Gantry report";
  if (results.front()->cluster != nullptr) title += ": " + results.front()->cluster->name();

  std::string html;
  size_t lib_bytes = 0;
  for (const ChartLibraryFile& a : assets) lib_bytes += a.content.size();
  html.reserve(lib_bytes + 256 * 1024);
  html += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>";
  html += EscapeMarkup(title);
  html += "</title>\n<style>";
  html += kStyle;
  html += "</style>\n";
  for (const ChartLibraryFile& a : assets) {
    html += "<script>/* ";
    html += a.relative_path;
    html += " */\n";
    html += EscapeForScript(a.content);
    html += "\n</script>\n";
  }
  html += "</head>\n<body>\n<h1>" + EscapeMarkup(title) + "</h1>\n";
  html += "<p class=\"note\">Simulation results of " + std::to_string(results.size()) +
          (results.size() == 1 ? " scheduling profile" : " scheduling profiles") +
          " on the same workload. Durations: s = seconds, min = minutes, h = hours, d = days. "
          "Percentiles are nearest-rank over completed jobs.</p>\n";
  html += "<h2>Runs</h2>\n";
  AppendRunsTable(html, results);
  html += "<h2>Summary</h2>\n";
  AppendSummaryTable(html, results);
  if (results.size() > 1) {
    html += "<h2 id=\"deltas\">Against the baseline</h2>\n";
    AppendDeltasTable(html, results, *baseline);
  }
  if (std::any_of(results.begin(), results.end(),
                  [](const SimResult* r) { return r->summary.replay_error.has_value(); })) {
    html += "<h2 id=\"replay-error\">Replay error</h2>\n";
    AppendReplayErrorTable(html, results);
  }
  html += "<h2 id=\"teams\">Teams</h2>\n";
  AppendTeamsTable(html, results);
  html += "<h2>Charts</h2>\n<div class=\"charts\">\n";
  for (const auto& c : charts) {
    html += "<div class=\"chart\" id=\"" + c["id"].get<std::string>() + "\"></div>\n";
  }
  html += "</div>\n<script type=\"application/json\" id=\"gantry-charts\">";
  html += EscapeForScript(charts.dump());
  html += "</script>\n<script>";
  html += kRenderScript;
  html += "</script>\n</body>\n</html>\n";
  return report_internal::WriteFileAtomically(path, html);
}

}  // namespace gantry
