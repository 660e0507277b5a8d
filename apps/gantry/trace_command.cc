// `gantry trace inspect`: imports a trace and prints what is in it (jobs, GPU-hours, sizes, run
// times, the heaviest teams), as text or JSON. Uses only the workload module.
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "gantry/workload/trace.h"

namespace gantry::cli {
namespace {

struct InspectOptions {
  std::string file;
  std::string format = "auto";
  bool skip_bad = false;
  bool json = false;
  int top = 10;
};

std::string UtcTime(Time unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return "?";
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string Fixed(double v, int digits = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

double Percent(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

// GPU-hours per job size; ComputeTraceStats gives only job counts per size.
std::map<int, double> GpuHoursBySize(const Workload& w) {
  std::map<int, double> hours;
  for (const Job& j : w.jobs) hours[j.gpus] += static_cast<double>(j.gpus) * j.run_time / 3600.0;
  return hours;
}

nlohmann::json ToJson(const Workload& w, const TraceStats& s, int top) {
  nlohmann::json j;
  j["source"] = w.source;
  j["format"] = w.format;
  j["epoch_unix"] = w.epoch_unix;
  j["jobs"] = s.jobs;
  j["gpu_hours"] = s.gpu_hours;
  j["first_submit"] = s.first_submit;
  j["last_submit"] = s.last_submit;
  j["span_seconds"] = s.last_submit - s.first_submit;
  j["rows_read"] = w.stats.rows_read;
  j["rows_skipped"] = w.stats.rows_skipped;
  j["skipped_by_reason"] = nlohmann::json::object();
  for (const auto& [reason, n] : w.stats.skipped_by_reason) j["skipped_by_reason"][reason] = n;
  // The reader keeps a share's gpu_milli: the engine shares GPUs between such jobs, and only
  // `gantry sim --round-fractional` rounds them. The old key stays for scripts that read it.
  j["fractional_gpu_requests"] = w.stats.fractional_gpu_rounded;
  j["fractional_gpu_rounded"] = w.stats.fractional_gpu_rounded;
  const std::map<int, double> hours = GpuHoursBySize(w);
  j["jobs_by_gpus"] = nlohmann::json::array();
  for (const auto& [gpus, n] : s.jobs_by_gpus) {
    j["jobs_by_gpus"].push_back({{"gpus", gpus}, {"jobs", n}, {"gpu_hours", hours.at(gpus)}});
  }
  j["run_time_percentiles"] = nlohmann::json::object();
  for (const auto& [name, v] : s.run_time_percentiles) j["run_time_percentiles"][name] = v;
  j["teams"] = nlohmann::json::array();
  j["team_count"] = w.teams.size();
  for (size_t i = 0; i < s.gpu_hours_by_team.size() && static_cast<int>(i) < top; ++i) {
    j["teams"].push_back(
        {{"team", s.gpu_hours_by_team[i].first}, {"gpu_hours", s.gpu_hours_by_team[i].second}});
  }
  return j;
}

void PrintText(const Workload& w, const TraceStats& s, int top, std::ostream& out) {
  out << "trace " << w.source << " (" << w.format << ")\n";
  out << "  jobs        " << s.jobs << " (" << w.teams.size() << " teams, " << w.users.size()
      << " users, " << w.queues.size() << " queues)\n";
  out << "  GPU-hours   " << Fixed(s.gpu_hours) << "\n";
  out << "  submits     over " << FormatDuration(s.last_submit - s.first_submit);
  if (w.epoch_unix != 0) out << ", from " << UtcTime(w.epoch_unix + s.first_submit);
  out << "\n";
  out << "  rows        " << w.stats.rows_read << " read, " << w.stats.rows_skipped << " skipped\n";
  for (const auto& [reason, n] : w.stats.skipped_by_reason) {
    out << "    " << reason << ": " << n << "\n";
  }
  if (w.stats.fractional_gpu_rounded > 0) {
    out << "  fractional GPU requests (gpu_milli < 1000): " << w.stats.fractional_gpu_rounded
        << "; gantry sim shares GPUs between them (--round-fractional gives each a whole GPU)\n";
  }
  if (s.jobs == 0) return;

  out << "\njobs by GPUs\n";
  char line[128];
  std::snprintf(line, sizeof line, "  %6s %9s %7s %12s %7s\n", "GPUs", "jobs", "%jobs", "GPU-hours",
                "%GPU-h");
  out << line;
  const std::map<int, double> hours = GpuHoursBySize(w);
  for (const auto& [gpus, n] : s.jobs_by_gpus) {
    const double h = hours.at(gpus);
    std::snprintf(line, sizeof line, "  %6d %9lld %6.1f%% %12.1f %6.1f%%\n", gpus,
                  static_cast<long long>(n), Percent(static_cast<double>(n), s.jobs), h,
                  Percent(h, s.gpu_hours));
    out << line;
  }

  out << "\nrun time\n ";
  for (const auto& [name, v] : s.run_time_percentiles)
    out << " " << name << " " << FormatDuration(v);
  out << "\n";

  out << "\ntop teams by GPU-hours\n";
  for (size_t i = 0; i < s.gpu_hours_by_team.size() && static_cast<int>(i) < top; ++i) {
    const auto& [team, h] = s.gpu_hours_by_team[i];
    std::snprintf(line, sizeof line, "  %-20s %12.1f %6.1f%%\n", team.c_str(), h,
                  Percent(h, s.gpu_hours));
    out << line;
  }
}

int RunInspect(const InspectOptions& o) {
  Result<TraceFormat> format =
      o.format == "auto" ? DetectTraceFormat(o.file) : ParseTraceFormat(o.format);
  if (!format.ok()) {
    std::cerr << "gantry trace inspect: " << format.status().message() << "\n";
    return kExitBadInput;
  }
  ImportOptions options;
  options.skip_bad_rows = o.skip_bad;
  Result<Workload> w = ImportTrace(o.file, *format, options);
  if (!w.ok()) {
    std::cerr << "gantry trace inspect: " << w.status().message() << "\n";
    if (!o.skip_bad && w.status().code() == StatusCode::kInvalidArgument) {
      std::cerr << "(pass --skip-bad to skip and count malformed rows)\n";
    }
    return kExitBadInput;
  }
  const TraceStats stats = ComputeTraceStats(*w);
  if (o.json) {
    std::cout << ToJson(*w, stats, o.top).dump(2) << "\n";
  } else {
    PrintText(*w, stats, o.top, std::cout);
  }
  std::cout.flush();
  return std::cout ? kExitOk : kExitFailure;
}

}  // namespace

void RegisterTraceCommands(CLI::App& app) {
  CLI::App* trace = app.add_subcommand("trace", "Import and inspect workload traces");
  trace->require_subcommand(1);
  auto options = std::make_shared<InspectOptions>();
  CLI::App* inspect = trace->add_subcommand(
      "inspect", "Summarise a trace: jobs, GPU-hours, job sizes, run times, top teams");
  inspect->add_option("FILE", options->file, "trace file")->required();
  inspect
      ->add_option("--format", options->format,
                   "auto (from the header), philly, openb, helios, sacct or swf")
      ->check(CLI::IsMember({"auto", "philly", "openb", "helios", "sacct", "swf"}))
      ->capture_default_str();
  inspect->add_flag("--skip-bad", options->skip_bad,
                    "skip malformed rows and count them by reason instead of failing");
  inspect->add_flag("--json", options->json, "print the summary as one JSON object (for scripts)");
  inspect->add_option("--top", options->top, "how many teams to list")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  inspect->footer(
      "Formats and their columns: docs/formats/traces.md\n"
      "Examples:\n  gantry trace inspect data/philly-sample.csv --format philly\n"
      "  gantry trace inspect jobs.swf --format swf --json");
  inspect->callback([options] {
    const int rc = RunInspect(*options);
    // CLI11's way to leave main() with a code; it prints nothing itself.
    if (rc != kExitOk) throw CLI::RuntimeError(rc);
  });
}

}  // namespace gantry::cli
