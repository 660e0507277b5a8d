// Format dispatch, format detection, the time-limit estimate model and trace statistics.
#include "gantry/workload/trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include "gantry/common/rng.h"
#include "workload/trace_internal.h"

namespace gantry {

namespace ti = trace_internal;

namespace {

constexpr TraceFormat kFormats[] = {TraceFormat::kPhilly, TraceFormat::kOpenb, TraceFormat::kHelios,
                                    TraceFormat::kSacct, TraceFormat::kSwf};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// Reads up to `limit` bytes of a file (all of it by default).
Result<std::string> ReadFile(const std::string& path, size_t limit = SIZE_MAX) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) return NotFound(path + ": cannot open trace file");
  std::string text;
  char buf[1 << 16];
  while (text.size() < limit) {
    const size_t n = std::fread(buf, 1, std::min(sizeof buf, limit - text.size()), f.get());
    if (n == 0) break;
    text.append(buf, n);
  }
  if (std::ferror(f.get())) return IoError(path + ": read error");
  return text;
}

bool HasColumn(const std::vector<std::string_view>& header, std::string_view name) {
  for (std::string_view h : header) {
    if (ti::EqualsIgnoreCase(h, name)) return true;
  }
  return false;
}

bool IsNumber(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if ((c < '0' || c > '9') && c != '-' && c != '.') return false;
  }
  return true;
}

}  // namespace

namespace trace_internal {

Result<TraceFormat> DetectTraceFormatText(std::string_view text, const std::string& source) {
  LineReader lines(StripBom(text));
  std::string_view line;
  std::vector<std::string_view> f;
  while (lines.Next(&line)) {
    line = Trim(line);
    if (line.empty()) continue;
    if (line.front() == ';') return TraceFormat::kSwf;
    if (line.find('|') != std::string_view::npos) {
      SplitFields(line, '|', false, &f);
      if (HasColumn(f, "JobID")) return TraceFormat::kSacct;
    }
    SplitFields(line, ',', true, &f);
    if (HasColumn(f, "timestamp") && HasColumn(f, "num_gpus")) return TraceFormat::kPhilly;
    if (HasColumn(f, "gpu_milli") || (HasColumn(f, "num_gpu") && HasColumn(f, "creation_time"))) {
      return TraceFormat::kOpenb;
    }
    if (HasColumn(f, "gpu_num") && HasColumn(f, "vc")) return TraceFormat::kHelios;
    SplitWhitespace(line, &f);
    if (f.size() == 18 && std::all_of(f.begin(), f.end(), IsNumber)) return TraceFormat::kSwf;
    return InvalidArgument(source + ":" + std::to_string(lines.line_number()) +
                           ": cannot tell the trace format from this line (" + Quote(line) +
                           "); pass --format philly|openb|helios|sacct|swf");
  }
  return InvalidArgument(source + ": empty trace: cannot tell its format");
}

}  // namespace trace_internal

Result<TraceFormat> ParseTraceFormat(const std::string& name) {
  for (TraceFormat f : kFormats) {
    if (ti::EqualsIgnoreCase(name, TraceFormatName(f))) return f;
  }
  return InvalidArgument("unknown trace format '" + name +
                         "' (valid: philly, openb, helios, sacct, swf)");
}

const char* TraceFormatName(TraceFormat format) {
  switch (format) {
    case TraceFormat::kPhilly:
      return "philly";
    case TraceFormat::kOpenb:
      return "openb";
    case TraceFormat::kHelios:
      return "helios";
    case TraceFormat::kSacct:
      return "sacct";
    case TraceFormat::kSwf:
      return "swf";
  }
  return "unknown";
}

Result<TraceFormat> DetectTraceFormat(const std::string& path) {
  GANTRY_ASSIGN_OR_RETURN(std::string head, ReadFile(path, 1 << 16));
  return ti::DetectTraceFormatText(head, path);
}

Result<Workload> ImportTrace(const std::string& path, TraceFormat format,
                             const ImportOptions& options) {
  GANTRY_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ImportTraceText(text, path, format, options);
}

Result<Workload> ImportTraceText(const std::string& text_in, const std::string& source_name,
                                 TraceFormat format, const ImportOptions& options) {
  const std::string_view text = ti::StripBom(text_in);
  switch (format) {
    case TraceFormat::kPhilly:
      return ti::ImportPhilly(text, source_name, options);
    case TraceFormat::kOpenb:
      return ti::ImportOpenb(text, source_name, options);
    case TraceFormat::kHelios:
      return ti::ImportHelios(text, source_name, options);
    case TraceFormat::kSacct:
      return ti::ImportSacct(text, source_name, options);
    case TraceFormat::kSwf:
      return ti::ImportSwf(text, source_name, options);
  }
  return InvalidArgument("unknown trace format");
}

Duration ti::EstimateTimeLimit(const TimeLimitModel& model, Duration run_time, uint64_t key) {
  Rng rng(Mix(model.seed, key));
  double factor = 1.0;
  if (rng.Uniform() >= model.exact_fraction) {
    factor = std::exp(std::fabs(model.log_mean + model.log_sigma * rng.Normal()));
  }
  const double cap = static_cast<double>(std::max(run_time, model.max_limit));
  double limit = std::min(static_cast<double>(run_time) * factor, cap);
  limit = std::max(limit, 1.0);  // a zero limit would mean "unknown"
  if (model.round_to > 1) {
    const double r = static_cast<double>(model.round_to);
    limit = std::ceil(limit / r) * r;
    // Rounding up may pass the cap; the cap wins (it is at least the run time).
    limit = std::min(limit, cap);
  }
  auto result = static_cast<Duration>(std::ceil(limit));
  return std::max<Duration>({result, run_time, 1});
}

void ApplyTimeLimitModel(Workload& workload, const TimeLimitModel& model) {
  for (Job& job : workload.jobs) {
    if (job.time_limit > 0) continue;
    // Keyed by the job's line, not its index: skipping a bad row elsewhere must not change it.
    // Jobs built without a source line (synthetic workloads) are keyed by index instead.
    const uint64_t key = job.source_line > 0
                             ? static_cast<uint64_t>(job.source_line)
                             : (uint64_t{1} << 40) + static_cast<uint64_t>(job.index);
    job.time_limit = ti::EstimateTimeLimit(model, job.run_time, key);
    job.time_limit_estimated = true;
  }
}

TraceStats ComputeTraceStats(const Workload& workload) {
  TraceStats s;
  s.jobs = static_cast<int64_t>(workload.jobs.size());
  std::map<int, int64_t> by_gpus;
  std::vector<double> team_hours(workload.teams.size(), 0.0);
  std::vector<Duration> run_times;
  run_times.reserve(workload.jobs.size());
  bool first = true;
  for (const Job& j : workload.jobs) {
    const double hours = static_cast<double>(j.gpus) * static_cast<double>(j.run_time) / 3600.0;
    s.gpu_hours += hours;
    if (j.team >= 0 && j.team < static_cast<int32_t>(team_hours.size()))
      team_hours[j.team] += hours;
    ++by_gpus[j.gpus];
    run_times.push_back(j.run_time);
    s.first_submit = first ? j.submit : std::min(s.first_submit, j.submit);
    s.last_submit = first ? j.submit : std::max(s.last_submit, j.submit);
    first = false;
  }
  s.jobs_by_gpus.assign(by_gpus.begin(), by_gpus.end());
  if (!run_times.empty()) {
    std::sort(run_times.begin(), run_times.end());
    // Nearest-rank percentiles.
    const auto at = [&](double p) {
      const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(run_times.size())));
      return run_times[std::clamp<size_t>(rank, 1, run_times.size()) - 1];
    };
    s.run_time_percentiles = {{"p10", at(0.10)},
                              {"p50", at(0.50)},
                              {"p90", at(0.90)},
                              {"p99", at(0.99)},
                              {"max", run_times.back()}};
  }
  for (size_t t = 0; t < team_hours.size(); ++t) {
    s.gpu_hours_by_team.emplace_back(workload.teams[t], team_hours[t]);
  }
  std::stable_sort(s.gpu_hours_by_team.begin(), s.gpu_hours_by_team.end(),
                   [](const auto& a, const auto& b) {
                     return a.second != b.second ? a.second > b.second : a.first < b.first;
                   });
  return s;
}

}  // namespace gantry
