// `gantry sim`: runs a trace on a cluster under one or more scheduling profiles and writes
// per-job CSVs, summary JSONs and one HTML report comparing the profiles.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "commands.h"
#include "gantry/cluster/cluster.h"
#include "gantry/common/progress.h"
#include "gantry/common/time.h"
#include "gantry/common/units.h"
#include "gantry/report/result.h"
#include "gantry/sched/profile.h"
#include "gantry/sched/sprio.h"
#include "gantry/sim/packing.h"
#include "gantry/sim/replay.h"
#include "gantry/sim/simulator.h"
#include "gantry/workload/trace.h"

namespace gantry::cli {
namespace {

// What each profile's directory OUT/<profile>/ holds (docs/formats/outputs.md); --sprio's file
// goes beside them and must not be one of them.
constexpr const char* kJobsCsv = "jobs.csv";
constexpr const char* kInterruptedCsv = "interrupted.csv";
constexpr const char* kSummaryJson = "summary.json";
constexpr const char* kProfileOutputs[] = {kJobsCsv, kInterruptedCsv, kSummaryJson};

struct SimArgs {
  std::string cluster;
  std::string trace;
  std::string format = "auto";
  std::string profiles = "fifo,slurm-like";
  std::string profiles_file;
  std::string out = "out/sim";
  uint64_t seed = 1;
  bool json = false;
  bool skip_bad = false;
  bool strict = false;
  bool check_invariants = false;
  bool list_profiles = false;
  bool no_report = false;
  std::string openb_nodes;
  std::string events;
  std::string failures;
  std::string checkpoint_model;
  int max_requeues = 5;
  std::string sprio_at;  // an instant, in seconds (or 90m, 36h, 2d) since the trace's t = 0
  std::string sprio;     // file name inside each profile's output directory
  bool packing = false;
  std::string packing_policies = "first-fit,best-fit,fgd";
  bool round_fractional = false;
  int mig_slices = 0;
  std::string explain;         // a job id: print its history of reasons and estimates
  std::string baseline;        // the report's baseline profile; empty: the first
  std::string cycle;           // SimOptions::cycle, a duration ("1s"); empty: none
  std::string launch_latency;  // SimOptions::launch_latency
  std::string end_latency;     // SimOptions::end_latency
};

// A start estimate or reason time for humans: t=SECONDS.
std::string At(Time t) { return "t=" + std::to_string(t); }

// --explain: the job's reasons and estimates over time, one line per change.
void PrintHistory(const SimResult& r, const Job& job) {
  std::printf("%s: job %s (%d GPUs, team %s), submitted %s\n", r.profile.c_str(), job.id.c_str(),
              job.gpus,
              job.team >= 0 && static_cast<size_t>(job.team) < r.teams.size()
                  ? r.teams[job.team].name.c_str()
                  : "?",
              At(job.submit).c_str());
  for (const ReasonChange& c : r.history) {
    if (c.job != job.index) continue;
    std::printf("  %-12s %-15s%s\n", At(c.t).c_str(), std::string(c.reason).c_str(),
                c.estimate >= 0 ? (" estimate " + At(c.estimate)).c_str() : "");
  }
  const JobOutcome& o = r.outcomes[job.index];
  if (o.first_estimate >= 0 && o.first_start >= 0) {
    std::printf("  first estimate %s, first start %s: off by %lld s\n",
                At(o.first_estimate).c_str(), At(o.first_start).c_str(),
                static_cast<long long>(std::llabs(o.first_start - o.first_estimate)));
  } else if (o.first_start < 0) {
    std::printf("  never started\n");
  }
}

nlohmann::ordered_json HistoryJson(const SimResult& r, const Job& job) {
  nlohmann::ordered_json h = nlohmann::ordered_json::array();
  for (const ReasonChange& c : r.history) {
    if (c.job != job.index) continue;
    nlohmann::ordered_json e;
    e["t"] = c.t;
    e["reason"] = std::string(c.reason);
    if (c.estimate >= 0) {
      e["estimate"] = c.estimate;
    } else {
      e["estimate"] = nullptr;
    }
    h.push_back(std::move(e));
  }
  nlohmann::ordered_json out;
  out["job"] = job.id;
  out["history"] = std::move(h);
  return out;
}

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

int Fail(const Status& s) { return ReportFailure("sim", s); }

// --packing: FGD's packing experiment (sim/packing.h) instead of a timed simulation.
int RunPackingExperiment(const SimArgs& a, const Cluster& cluster, const Workload& workload) {
  PackingOptions po;
  po.policies = SplitComma(a.packing_policies);
  po.round_fractional = a.round_fractional;
  po.mig_slices = a.mig_slices;
  po.check_invariants = a.check_invariants;
  auto r = RunPacking(cluster, workload, po);
  if (!r.ok()) return Fail(r.status());
  std::error_code ec;
  std::filesystem::create_directories(a.out, ec);
  if (ec) return Fail(IoError("cannot create output directory '" + a.out + "': " + ec.message()));
  Status s = WritePackingCsv(*r, a.out + "/packing.csv");
  if (s.ok() && !a.no_report) s = WritePackingSvg(*r, a.out + "/packing.svg");
  if (!s.ok()) return Fail(s);
  const std::string units =
      r->sliced_by_type     ? "shares in slices where a GPU type has mig_slices, else milli-GPUs"
      : r->capacity == 1000 ? "shares in milli-GPUs"
                            : std::to_string(r->capacity) + " slices per GPU";
  std::printf("%s: %zu tasks on %s (%lld GPUs, %s)\n", workload.source.c_str(),
              workload.jobs.size(), cluster.name().c_str(), static_cast<long long>(r->cluster_gpus),
              units.c_str());
  if (r->rounded > 0) {
    std::printf("%lld tasks of the trace ask for a share of a GPU: each is given a whole one\n",
                static_cast<long long>(r->rounded));
  }
  std::printf("%-12s %8s %8s %9s %10s %11s\n", "policy", "tasks", "failed", "arrived", "allocated",
              "fragmented");
  for (const PackingCurve& c : r->curves) {
    // The last point before arrived demand passes 90%, and the final one.
    const PackingPoint* at90 = &c.points.front();
    for (const PackingPoint& p : c.points) {
      if (p.arrived <= 0.9) at90 = &p;
    }
    for (const PackingPoint* p : {at90, &c.points.back()}) {
      std::printf("%-12s %8lld %8lld %8.1f%% %9.1f%% %10.1f%%\n", c.policy.c_str(),
                  static_cast<long long>(p->tasks), static_cast<long long>(p->failed),
                  100 * p->arrived, 100 * p->allocated, 100 * p->fragmented);
    }
  }
  std::printf("wrote %s/packing.csv%s\n", a.out.c_str(),
              a.no_report ? "" : (" and " + a.out + "/packing.svg").c_str());
  return kExitOk;
}

int RunSim(const SimArgs& a) {
  std::vector<Profile> extra;
  if (!a.profiles_file.empty()) {
    auto loaded = LoadProfilesFile(a.profiles_file);
    if (!loaded.ok()) return Fail(loaded.status());
    extra = std::move(loaded).value();
  }
  if (a.list_profiles) {
    for (const Profile& p : extra) std::printf("%-20s %s\n", p.name.c_str(), p.description.c_str());
    for (const Profile& p : BuiltinProfiles()) {
      std::printf("%-20s %s\n", p.name.c_str(), p.description.c_str());
    }
    return kExitOk;
  }
  if ((a.cluster.empty() && a.openb_nodes.empty()) || a.trace.empty()) {
    std::fprintf(stderr,
                 "gantry sim: --cluster and --trace are required (see gantry sim --help)\n");
    return kExitUsage;
  }
  if (!a.cluster.empty() && !a.openb_nodes.empty()) {
    std::fprintf(stderr,
                 "gantry sim: give the cluster once: --cluster (a spec, shorthand or openb node "
                 "list) or --openb-nodes\n");
    return kExitUsage;
  }
  // --sprio names a file inside each profile's directory: not a path out of it, and not one
  // of the outputs written there after it.
  if (!a.sprio.empty() &&
      (a.sprio.find('/') != std::string::npos || a.sprio == "." || a.sprio == ".." ||
       std::find(std::begin(kProfileOutputs), std::end(kProfileOutputs), a.sprio) !=
           std::end(kProfileOutputs))) {
    std::fprintf(stderr,
                 "gantry sim: --sprio takes a file name for inside OUT/<profile>/ other than "
                 "jobs.csv, interrupted.csv and summary.json (got '%s')\n",
                 a.sprio.c_str());
    return kExitUsage;
  }
  std::vector<Profile> profiles;
  for (const std::string& name : SplitComma(a.profiles)) {
    if (std::any_of(profiles.begin(), profiles.end(),
                    [&](const Profile& p) { return p.name == name; })) {
      // Both runs would write OUT/NAME and the summary would list the profile twice.
      std::fprintf(stderr, "gantry sim: --profile names '%s' twice\n", name.c_str());
      return kExitUsage;
    }
    if (name == kAsRecordedProfile) {
      // Not a profile: the trace's own history, replayed in the loop below.
      Profile recorded;
      recorded.name = name;
      profiles.push_back(std::move(recorded));
      continue;
    }
    auto p = FindProfile(name, extra);
    if (!p.ok()) return Fail(p.status());
    profiles.push_back(std::move(p).value());
  }
  if (profiles.empty()) return Fail(InvalidArgument("--profile names no profile"));
  if (!a.baseline.empty() && std::none_of(profiles.begin(), profiles.end(),
                                          [&](const Profile& p) { return p.name == a.baseline; })) {
    std::fprintf(stderr, "gantry sim: --baseline %s is not one of --profile %s\n",
                 a.baseline.c_str(), a.profiles.c_str());
    return kExitUsage;
  }

  auto cluster = LoadClusterOrNodeList(a.cluster.empty() ? a.openb_nodes : a.cluster);
  if (!cluster.ok()) return Fail(cluster.status());
  TraceFormat format;
  if (a.format == "auto") {
    auto f = DetectTraceFormat(a.trace);
    if (!f.ok()) return Fail(f.status());
    format = *f;
  } else {
    auto f = ParseTraceFormat(a.format);
    if (!f.ok()) return Fail(f.status());
    format = *f;
  }
  ImportOptions io;
  io.skip_bad_rows = a.skip_bad;
  io.time_limits.seed = a.seed;
  auto workload = ImportTrace(a.trace, format, io);
  if (!workload.ok()) return Fail(workload.status());
  ResolveOptions ro;
  ro.skip_bad_jobs = a.skip_bad;
  ro.keep_over_quota = !a.strict;
  auto teams = ResolveWorkload(*workload, *cluster, ro);
  if (!teams.ok()) return Fail(teams.status());
  if (a.packing) return RunPackingExperiment(a, *cluster, *workload);
  for (const Profile& p : profiles) {
    if (p.name != kAsRecordedProfile) continue;
    // Before anything runs: a trace without recorded starts fails at once.
    Status s = CheckRecordedStarts(*workload);
    if (!s.ok()) return Fail(s);
  }
  // The timed simulation shares GPUs by gpu_milli (the engine's SharedGpus); --round-fractional
  // gives each share a whole GPU instead. Either way the summary says which it did.
  int64_t shares = 0;
  for (Job& job : workload->jobs) {
    if (job.gpu_milli <= 0 || job.gpu_milli >= 1000) continue;
    ++shares;
    if (a.round_fractional) job.gpu_milli = 0;
  }
  if (!a.round_fractional) workload->stats.fractional_gpu_rounded = 0;
  std::vector<ClusterEvent> events;
  if (!a.events.empty()) {
    auto loaded = LoadClusterEvents(a.events);
    if (!loaded.ok()) return Fail(loaded.status());
    events = std::move(loaded).value();
    Status s = ResolveClusterEvents(*cluster, *workload, &events);
    if (!s.ok()) return Fail(s.WithContext(a.events));
  }
  FailureModel failures;
  if (!a.failures.empty()) {
    auto parsed = ParseFailureModel(a.failures);
    if (!parsed.ok()) return Fail(parsed.status());
    failures = *parsed;
  }
  CheckpointModel checkpoints;
  if (!a.checkpoint_model.empty()) {
    auto parsed = ParseCheckpointModel(a.checkpoint_model);
    if (!parsed.ok()) return Fail(parsed.status());
    checkpoints = *parsed;
  }

  const Job* explained = nullptr;
  if (!a.explain.empty()) {
    for (const Job& job : workload->jobs) {
      if (job.id == a.explain) explained = &job;
    }
    if (explained == nullptr) {
      return Fail(NotFound("--explain: no job '" + a.explain + "' in " + a.trace));
    }
  }

  std::error_code ec;
  std::filesystem::create_directories(a.out, ec);
  if (ec) return Fail(IoError("cannot create output directory '" + a.out + "': " + ec.message()));

  const bool tty = ProgressBar::StderrIsTerminal() && !a.json;
  std::vector<SimResult> results;
  results.reserve(profiles.size());
  for (const Profile& p : profiles) {
    ProgressBar bar(p.name, tty);
    SimOptions so;
    so.check_invariants = so.check_invariants || a.check_invariants;
    so.progress = [&bar](double f) { bar.UpdateFraction(f); };
    so.events = events;
    so.failures = failures;
    so.checkpoints = checkpoints;
    so.max_requeues = a.max_requeues;
    const std::tuple<const std::string*, const char*, Duration*> rhythm[] = {
        {&a.cycle, "--cycle", &so.cycle},
        {&a.launch_latency, "--launch-latency", &so.launch_latency},
        {&a.end_latency, "--end-latency", &so.end_latency}};
    for (const auto& [text, flag, into] : rhythm) {
      if (text->empty()) continue;
      auto seconds = ParseDurationSeconds(*text);
      if (!seconds.ok()) return Fail(seconds.status().WithContext(flag));
      *into = *seconds;
    }
    if (explained != nullptr) so.history_of.push_back(explained->index);
    std::vector<SprioRow> sprio_rows;
    if (!a.sprio_at.empty()) {
      auto at = ParseDurationSeconds(a.sprio_at);
      if (!at.ok()) return Fail(at.status().WithContext("--sprio-at"));
      so.sprio_at = *at;
      so.sprio = &sprio_rows;
    }
    auto r = p.name == kAsRecordedProfile ? ReplayRecorded(*cluster, *teams, *workload, so)
                                          : Simulate(*cluster, *teams, *workload, p, so);
    if (!r.ok()) return Fail(r.status().WithContext("profile '" + p.name + "'"));
    results.push_back(std::move(r).value());
    const std::string dir = a.out + "/" + p.name;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Fail(IoError("cannot create '" + dir + "': " + ec.message()));
    Status s = WriteJobsCsv(results.back(), dir + "/" + kJobsCsv);
    if (s.ok()) s = WriteInterruptedRunsCsv(results.back(), dir + "/" + kInterruptedCsv);
    if (s.ok() && so.sprio != nullptr && p.name != kAsRecordedProfile) {
      // Written beside the target and renamed into place, like the other outputs.
      const std::string path = dir + "/" + (a.sprio.empty() ? "sprio.txt" : a.sprio);
      const std::string tmp = path + ".tmp";
      std::ofstream f(tmp);
      WriteSprio(f, sprio_rows);
      f.close();
      if (!f) {
        s = IoError("cannot write '" + tmp + "'");
      } else {
        std::filesystem::rename(tmp, path, ec);
        if (ec) s = IoError("cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
      }
    }
    if (!s.ok()) return Fail(s);
  }
  // Every run against the recorded history, when it is among them; then the summaries.
  const SimResult* recorded = nullptr;
  for (const SimResult& r : results) {
    if (r.as_recorded) recorded = &r;
  }
  for (SimResult& r : results) {
    if (recorded != nullptr && !r.as_recorded) SetReplayError(r, *recorded);
    Status s = WriteSummaryJson(r, a.out + "/" + r.profile + "/" + kSummaryJson);
    if (!s.ok()) return Fail(s);
  }
  std::vector<const SimResult*> ptrs;
  for (const auto& r : results) ptrs.push_back(&r);
  const std::string report = a.out + "/report.html";
  if (!a.no_report) {
    HtmlReportOptions ro;
    ro.baseline = a.baseline;
    Status s = WriteHtmlReport(ptrs, report, ro);
    if (!s.ok()) return Fail(s);
  }
  if (a.json) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& r : results) {
      out.push_back(nlohmann::ordered_json::parse(SummaryToJson(r).dump()));
      if (explained != nullptr) out.back()["explain"] = HistoryJson(r, *explained);
    }
    std::cout << out.dump(2) << "\n";
  } else {
    std::printf("%s: %zu jobs on %s (%d GPUs)\n", workload->source.c_str(), workload->jobs.size(),
                cluster->name().c_str(), cluster->total_gpus());
    if (workload->stats.rows_skipped > 0) {
      std::printf("skipped %lld bad rows/jobs:",
                  static_cast<long long>(workload->stats.rows_skipped));
      for (const auto& [why, n] : workload->stats.skipped_by_reason) {
        std::printf(" %s=%lld", why.c_str(), static_cast<long long>(n));
      }
      std::printf("\n");
    }
    if (!workload->stats.gpu_types_not_in_cluster.empty()) {
      std::printf(
          "GPU types the trace lists but the cluster lacks (left out of those jobs' "
          "choices):");
      for (const auto& [type, n] : workload->stats.gpu_types_not_in_cluster) {
        std::printf(" %s (%lld jobs)", type.c_str(), static_cast<long long>(n));
      }
      std::printf("\n");
    }
    if (workload->stats.fractional_gpu_rounded > 0) {
      std::printf("%lld jobs asking for a fraction of a GPU were given a whole one\n",
                  static_cast<long long>(workload->stats.fractional_gpu_rounded));
    } else if (shares > 0) {
      std::printf(
          "%lld jobs asking for a fraction of a GPU shared GPUs (--round-fractional "
          "gives each a whole one)\n",
          static_cast<long long>(shares));
    }
    std::printf("%s", SummaryTable(ptrs).c_str());
    for (const auto& r : results) {
      const SimSummary& s = r.summary;
      if (r.as_recorded) continue;  // a replay estimates nothing
      std::printf(
          "%-20s start estimates: %lld jobs had one; |first estimate - start| median %s, "
          "p90 %s\n",
          r.profile.c_str(), static_cast<long long>(s.jobs_with_estimate),
          s.jobs_with_estimate > 0
              ? FormatDuration(static_cast<Duration>(s.estimate_error_p50)).c_str()
              : "-",
          s.jobs_with_estimate > 0
              ? FormatDuration(static_cast<Duration>(s.estimate_error_p90)).c_str()
              : "-");
    }
    if (recorded != nullptr) {
      const RecordedReplay& rr = recorded->recorded;
      if (rr.jobs_without_start + rr.jobs_start_before_submit > 0) {
        std::string examples;
        for (const std::string& id : rr.example_jobs)
          examples += (examples.empty() ? "" : ", ") + id;
        std::printf(
            "%s: %lld jobs have no recorded start and %lld one before their submit; not "
            "replayed (e.g. %s)\n",
            recorded->profile.c_str(), static_cast<long long>(rr.jobs_without_start),
            static_cast<long long>(rr.jobs_start_before_submit), examples.c_str());
      }
      if (rr.peak_busy_gpus > cluster->total_gpus()) {
        std::printf("%s: the recorded runs held up to %lld GPUs at once, more than the %d of %s\n",
                    recorded->profile.c_str(), static_cast<long long>(rr.peak_busy_gpus),
                    cluster->total_gpus(), cluster->name().c_str());
      }
    }
    for (const auto& r : results) {
      if (!r.summary.replay_error) continue;
      const ReplayError& e = *r.summary.replay_error;
      const auto d = [](double s) {
        return FormatDuration(static_cast<Duration>(std::llround(s)));
      };
      std::printf(
          "%-20s vs %s (%lld jobs): |wait diff| mean %s p50 %s p90 %s; |JCT diff| mean %s "
          "p50 %s p90 %s\n",
          r.profile.c_str(), e.against.c_str(), static_cast<long long>(e.jobs_compared),
          d(e.wait_abs_mean).c_str(), d(e.wait_abs_p50).c_str(), d(e.wait_abs_p90).c_str(),
          d(e.jct_abs_mean).c_str(), d(e.jct_abs_p50).c_str(), d(e.jct_abs_p90).c_str());
    }
    if (explained != nullptr) {
      for (const auto& r : results) PrintHistory(r, *explained);
    }
    for (const auto& r : results) {
      std::printf("%-20s simulated in %.2f s (%lld events, %.0f events/s)\n", r.profile.c_str(),
                  r.perf.wall_seconds, static_cast<long long>(r.perf.events),
                  r.perf.events_per_second);
    }
    const std::string sprio_name =
        a.sprio_at.empty() ? "" : "," + (a.sprio.empty() ? std::string("sprio.txt") : a.sprio);
    std::printf("wrote %s/<profile>/{jobs.csv,interrupted.csv,summary.json%s}%s\n", a.out.c_str(),
                sprio_name.c_str(), a.no_report ? "" : (" and " + report).c_str());
  }
  return kExitOk;
}

}  // namespace

void RegisterSimCommand(CLI::App& app) {
  auto args = std::make_shared<SimArgs>();
  CLI::App* sim = app.add_subcommand(
      "sim", "Simulate a trace on a cluster under scheduling profiles and compare them.");
  sim->footer(
      "Example:\n  gantry sim --cluster data/clusters/philly.yaml --trace data/philly-sample.csv "
      "--profile fifo,slurm-like --out out/demo\n  gantry sim --cluster "
      "data/clusters/philly-256.yaml --trace data/philly-sample.csv "
      "--events maintenance.csv --profile slurm-like\n  gantry sim --cluster "
      "data/clusters/philly-256.yaml --trace data/philly-sample.csv "
      "--failures mtbf=7d,repair=6h,health=0.3,spares=2 --checkpoint-model interval=30m,restart=5m"
      "\n\nOutputs: OUT/<profile>/jobs.csv (each job's last run), OUT/<profile>/interrupted.csv "
      "(runs a failure or preemption ended), OUT/<profile>/summary.json, OUT/report.html "
      "(docs/formats/outputs.md).\nExit codes: 0 ok, "
      "2 usage, 3 bad input (the message names file, line and field), 1 other failure.");
  sim->add_option("--cluster", args->cluster,
                  "Cluster spec file (YAML), shorthand such as dgx-h100:nodes=256, or an openb "
                  "node list CSV");
  sim->add_option("--trace", args->trace, "Trace file");
  sim->add_option("--format", args->format, "Trace format: auto, philly, openb, helios, sacct, swf")
      ->capture_default_str();
  sim->add_option("--profile", args->profiles,
                  "Comma-separated profiles to compare; as-recorded replays the trace's own "
                  "start times (sacct, helios, openb, swf) and measures every profile against it")
      ->capture_default_str();
  sim->add_option("--profiles", args->profiles_file, "Extra profiles file (YAML)");
  sim->add_option("--out", args->out, "Output directory")->capture_default_str();
  sim->add_option("--seed", args->seed, "Seed of the time-limit estimate model")
      ->capture_default_str();
  sim->add_option("--openb-nodes", args->openb_nodes,
                  "An openb node list (sn,cpu_milli,memory_mib,gpu,model) as the cluster; "
                  "--cluster accepts the same file");
  sim->add_option("--events", args->events,
                  "Node and job events to replay: CSV 'time,event,target' with drain, down, up "
                  "(node names) and cancel (job ids); docs/formats/traces.md#cluster-events");
  sim->add_option("--failures", args->failures,
                  "Seeded node failures: mtbf=30d[,repair=4h][,dist=exponential|weibull]"
                  "[,shape=0.7][,health=0.2][,spares=2][,seed=1]; docs/formats/traces.md#failures");
  sim->add_option("--checkpoint-model", args->checkpoint_model,
                  "What an interrupted job keeps, when the trace does not say: "
                  "interval=1h,restart=5m (the default) or none");
  sim->add_option("--max-requeues", args->max_requeues,
                  "Requeues after node failures before a job is held (Slurm's MaxBatchRequeue)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sim->add_option("--cycle", args->cycle,
                  "Decide only once per cycle, as gantryd does (its --interval; whole seconds: "
                  "1s, 1m): ends are seen at the next tick. Default: at every event");
  sim->add_option("--launch-latency", args->launch_latency,
                  "Seconds from a decision to the job running, as the resource manager records "
                  "its start (release and launch). Default: 0");
  sim->add_option("--end-latency", args->end_latency,
                  "Seconds from a job's end to the resource manager reporting it; the scheduler "
                  "sees the end at the first cycle after that. Default: 0");
  sim->add_option("--sprio-at", args->sprio_at,
                  "Write every job pending at this instant (seconds since the trace's start, or "
                  "90m/36h/2d) with its priority factors, as Slurm's sprio -l prints them");
  sim->add_option("--sprio", args->sprio,
                  "File name for --sprio-at, inside each profile's output directory")
      ->default_str("sprio.txt");
  sim->add_option("--explain", args->explain,
                  "Print this job's history of pending reasons and start estimates, per profile "
                  "(with --json: an \"explain\" object in each profile's summary)");
  sim->add_option("--baseline", args->baseline,
                  "The profile the report compares the others with (deltas table); default: "
                  "the first of --profile");
  sim->add_flag("--json", args->json, "Print the summaries as JSON on stdout (no progress bar)");
  sim->add_flag(
      "--skip-bad", args->skip_bad,
      "Skip and count malformed rows and jobs the cluster cannot run, instead of failing");
  sim->add_flag("--strict", args->strict,
                "A job larger than its team's quota is an error (default: it stays pending, "
                "reason Quota)");
  sim->add_flag("--check-invariants", args->check_invariants,
                "Check scheduling invariants after every event (slower)");
  sim->add_flag("--list-profiles", args->list_profiles, "List the available profiles and exit");
  sim->add_flag("--no-report", args->no_report, "Do not write the HTML report");
  sim->add_flag("--packing", args->packing,
                "FGD's packing experiment instead: tasks arrive in trace order and never leave "
                "until the arrived demand fills the cluster; writes OUT/packing.csv and "
                "OUT/packing.svg (allocated and fragmented share per policy)");
  sim->add_option("--packing-policies", args->packing_policies,
                  "Policies the packing experiment compares: first-fit, best-fit, fgd")
      ->capture_default_str();
  sim->add_flag("--round-fractional", args->round_fractional,
                "Give a job asking for a share of a GPU (openb gpu_milli) a whole one instead "
                "of sharing GPUs (timed simulation and packing)");
  sim->add_option("--mig-slices", args->mig_slices,
                  "Packing: cut every GPU into this many fixed slices (MIG-like); a share rounds "
                  "up to whole slices. 0: each GPU type's mig_slices from the cluster spec, "
                  "milli-GPUs where it has none")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  sim->callback([args]() {
    const int rc = RunSim(*args);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace gantry::cli
