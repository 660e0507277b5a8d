// Results of a simulation run and how they are reported.
//
// What one simulation run produced: per-job outcomes, sampled time series, counters, and the
// summary computed from them; plus the writers for jobs.csv, summary.json and the HTML report.
//
// A SimResult refers to (does not own) the Workload, Cluster and teams it was produced from;
// they must outlive it. Everything in it except `perf` is deterministic for given inputs and seed.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/status.h"
#include "gantry/workload/job.h"

namespace gantry {

struct JobOutcome {
  Time start = -1;  // -1: never started (the run ended first)
  Time end = -1;
  int32_t nodes_spanned = 0;     // distinct nodes of the placement
  int32_t span_level = -1;       // innermost topology level holding the whole placement
                                 // (-1: one node; levels().size(): the whole cluster)
  bool backfilled = false;       // started out of priority order by backfill
  bool killed_at_limit = false;  // ran into its time limit (run_time > time_limit)
  bool cancelled = false;        // ended by a cancel event (start -1 if it never started)
  int32_t requeues = 0;          // runs a node going down ended; start/end are the last run's
  bool held = false;             // interrupted once more after max_requeues: held, not requeued
  int32_t preemptions = 0;       // runs ended by preemption (each requeued; not in requeues)
  double energy_kwh = 0;         // busy watts of its GPUs x run time, summed over all its runs
  // GPU-seconds of work its preempted runs lost (done since their last checkpoint).
  double preemption_lost_gpu_seconds = 0;
  // Why it waited: the last reason it had while pending before it (last) started, or why it
  // never started (the engine's ReasonName, a static string; empty if never pending).
  std::string_view reason;
  // The scheduler's first start estimate while it waited for its first start (-1: it never had
  // one), and that first start (-1: never started), for estimate accuracy.
  Time first_estimate = -1;
  Time first_start = -1;
};

// One entry of a job's reason history (gantry sim --explain): at `t` the job's reason became
// `reason` with start estimate `estimate` (-1: none). Submits, every change of reason or
// estimate while pending, starts and ends by the driver are recorded; nothing else.
struct ReasonChange {
  JobIndex job = -1;
  Time t = 0;
  std::string_view reason;  // ReasonName, a static string
  Time estimate = -1;
};

// A run that a node going down or a preemption ended, the job going back to the queue (or being
// held). JobOutcome keeps only a job's last run; these are the others, for share_fairness, which
// counts the GPUs a job held while it ran, whichever run it was.
struct InterruptedRun {
  JobIndex job = -1;
  Time start = 0;
  Time end = 0;
  bool operator==(const InterruptedRun&) const = default;
};

// The cluster's state at one instant; the simulator samples at evenly spaced times.
struct TimeSample {
  Time t = 0;
  int32_t busy_gpus = 0;
  int32_t pending_jobs = 0;
  int32_t running_jobs = 0;
  std::vector<int32_t> team_busy_gpus;  // indexed like SimResult::teams
  // Totals so far (SimResult's counters at this instant), for the preemption and failure charts.
  int64_t preemptions = 0;
  int64_t requeues = 0;
  int64_t node_failures = 0;
  double preemption_lost_gpu_seconds = 0;
  double lost_gpu_seconds = 0;
};

struct TeamSummary {
  std::string name;
  int quota_gpus = kNoQuota;
  int64_t jobs = 0;
  int64_t jobs_completed = 0;
  double gpu_hours = 0;          // GPU-hours used by the team's completed jobs
  double share_of_usage = 0;     // gpu_hours / all teams' gpu_hours
  double quota_gpu_hours = 0;    // quota * makespan; 0 without quota
  double quota_utilization = 0;  // gpu_hours / quota_gpu_hours; 0 without quota
  // While the cluster was contended (share_fairness's instants): the GPU-hours the team used and
  // those it was entitled to (weighted max-min fair share, capped by demand and quota), their
  // shares of all teams' used and entitled GPU-hours then, and used / entitled (0: never
  // entitled to anything).
  double contended_gpu_hours = 0;
  double entitled_gpu_hours = 0;
  double contended_share = 0;
  double entitled_share = 0;
  double entitlement_ratio = 0;
  double mean_wait_s = 0;
  double mean_slowdown = 0;  // mean bounded slowdown of the team's jobs
  double energy_kwh = 0;     // its jobs' energy (JobOutcome::energy_kwh), every run
};

// A capped topology domain's cap and the most it drew.
struct DomainPower {
  std::string domain;
  double cap_watts = 0;
  double peak_watts = 0;
};

// How far a run is from the as-recorded replay of the same trace (gantry/sim/replay.h), job by
// job, over the jobs that completed in both: the absolute difference of each job's wait (and
// JCT) in the run and in the recorded history; mean and nearest-rank p50 and p90, in seconds.
// The biases are the mean signed differences (run - recorded): above 0, the run waits longer
// than the site's own scheduler did.
struct ReplayError {
  std::string against = "as-recorded";
  int64_t jobs_compared = 0;
  // Jobs completed in exactly one of the two (e.g. never started in the run, or no recorded
  // start), left out of the comparison.
  int64_t jobs_not_compared = 0;
  double wait_abs_mean = 0, wait_abs_p50 = 0, wait_abs_p90 = 0, wait_bias = 0;
  double jct_abs_mean = 0, jct_abs_p50 = 0, jct_abs_p90 = 0, jct_bias = 0;
};

// What the as-recorded replay found in the trace besides the runs it replayed.
struct RecordedReplay {
  int64_t jobs_without_start = 0;         // the trace records no start: left unstarted
  int64_t jobs_start_before_submit = 0;   // recorded start before submit: not replayed either
  std::vector<std::string> example_jobs;  // the first few ids of both kinds, for the message
  // Most GPUs the recorded runs held at once; above the cluster's GPUs when the history ran on
  // more GPUs than the cluster given (its utilisation then exceeds 100%).
  int64_t peak_busy_gpus = 0;
};

struct SimSummary {
  std::string profile;
  int64_t jobs = 0;             // jobs simulated
  int64_t jobs_completed = 0;   // started and ended within the run
  int64_t jobs_unfinished = 0;  // jobs - jobs_completed: no end (never started, or still running)
  int64_t jobs_never_started = 0;  // of jobs_unfinished, those that never started
  int64_t jobs_skipped = 0;        // removed as bad input (only with --skip-bad)
  std::vector<std::pair<std::string, int64_t>> skipped_by_reason;
  int64_t jobs_killed_at_limit = 0;
  int64_t jobs_backfilled = 0;
  int64_t jobs_held = 0;         // interrupted more often than max_requeues; among the unfinished
  int64_t jobs_cancelled = 0;    // by cancel events; neither completed nor unfinished
  int64_t cluster_events = 0;    // node and job events replayed
  int64_t node_failures = 0;     // hard failures of the failure model
  int64_t health_events = 0;     // GPU health drains of the failure model
  int64_t spare_swaps = 0;       // hot spares brought in
  int64_t requeues = 0;          // runs ended by a node going down and queued again
  double lost_gpu_hours = 0;     // work those runs had done since their last checkpoint
  double restart_gpu_hours = 0;  // GPU-hours requeued runs spent restarting
  // Useful share of the allocated GPU time: 1 - (lost + restart) / busy GPU-hours.
  double goodput = 1;

  // Preemption (the kueue admission plugin): runs ended and queued again, distinct jobs
  // preempted, and the most times one job was.
  int64_t preemptions = 0;
  int64_t jobs_preempted = 0;
  int32_t max_preemptions_per_job = 0;
  // The profile's preemption plugin, and what preemption cost: work lost since the victims'
  // last checkpoints, and the restarts of their next runs (both also in lost/restart above).
  std::string preemption_plugin;
  double preemption_lost_gpu_hours = 0;
  double preemption_restart_gpu_hours = 0;
  Time makespan = 0;  // last end minus first submit
  double jct_mean = 0, jct_p50 = 0, jct_p95 = 0, jct_p99 = 0;
  double wait_mean = 0, wait_p50 = 0, wait_p95 = 0, wait_p99 = 0;
  double bounded_slowdown_mean = 0, bounded_slowdown_p95 = 0;  // threshold 10 s
  double gpu_utilization = 0;  // busy GPU-seconds / (GPUs * makespan)
  // Expected fragmented GPU-seconds / (GPUs * makespan), FGD's measure (fragmentation.h).
  double fragmented_gpu_share = 0;
  double jain_fairness = 0;  // Jain's index over per-team mean bounded slowdown
  // Jain's index of each team's GPUs against its entitlement (weighted max-min fair share,
  // capped by demand and quota), averaged over contended time; 1 if never contended.
  double share_fairness = 1;
  double contended_fraction = 0;  // share of the run during which teams wanted more than all GPUs
  // Fragmentation: job-hours spent waiting while the cluster had at least as many idle GPUs of
  // the job's allowed types as it asked for, and that as a fraction of all job-hours waited.
  double frag_wait_job_hours = 0;
  double total_wait_job_hours = 0;
  double frag_wait_fraction = 0;
  // Start estimate accuracy: over jobs that had an estimate before their first start and then
  // started, |first estimate - first start| (seconds), median and 90th percentile.
  int64_t jobs_with_estimate = 0;
  double estimate_error_p50 = 0, estimate_error_p90 = 0;
  std::vector<TeamSummary> teams;

  // Power (cluster spec `power:`): energy drawn from the first submit to the last event, the
  // part charged to jobs (their GPUs' busy watts), the rest (idle GPUs, node baseline), the
  // highest draw, the caps and the capped clock (a slowdown of 1: full clocks).
  double energy_kwh = 0;
  double job_energy_kwh = 0;
  double idle_energy_kwh = 0;
  double peak_watts = 0;
  double cap_watts = 0;  // 0: no cluster cap
  double capped_watts_factor = 1;
  double capped_slowdown = 1;
  std::vector<DomainPower> domain_power;

  // The profile is an oracle (it reads true run times: an upper bound, not a real policy), or
  // the as-recorded replay of the trace.
  bool oracle = false;
  bool as_recorded = false;
  // Against the as-recorded replay; set by SetReplayError (kept by Summarize), absent otherwise.
  std::optional<ReplayError> replay_error;
};

// Wall-clock measurements of the run; the only non-deterministic part of a result.
struct SimPerf {
  double wall_seconds = 0;
  int64_t events = 0;  // submits + finishes processed
  int64_t cycles = 0;  // scheduling cycles run
  double events_per_second = 0;
  int64_t peak_rss_kb = 0;
};

struct SimResult {
  std::string profile;
  const Workload* workload = nullptr;
  const Cluster* cluster = nullptr;
  std::vector<Team> teams;                       // indexed like Job::team
  std::vector<JobOutcome> outcomes;              // indexed like Workload::jobs
  std::vector<InterruptedRun> interrupted_runs;  // in the order they ended
  std::vector<TimeSample> samples;
  // The reason histories of the jobs SimOptions::history_of names, in time order.
  std::vector<ReasonChange> history;
  // Job-seconds waited while enough GPUs were free in total, and all job-seconds waited.
  double frag_wait_job_seconds = 0;
  double total_wait_job_seconds = 0;
  double busy_gpu_seconds = 0;
  // Expected fragmented GPUs (sched/fragmentation.h, over the workload's kinds of job) integrated
  // over time: idle GPUs the workload's jobs could not use where they are.
  double fragmented_gpu_seconds = 0;
  int64_t cluster_events = 0;
  int64_t node_failures = 0;  // hard failures drawn by the failure model
  int64_t health_events = 0;  // GPU health drains drawn by the failure model
  int64_t spare_swaps = 0;    // hot spares brought in for failed nodes
  int64_t requeues = 0;
  int64_t preemptions = 0;  // runs ended by preemption (requeued; lost work counted as above)
  // GPU-seconds of interrupted runs: useful work done since the last checkpoint (lost), and
  // time spent restarting (loading a checkpoint) before useful work resumed.
  double lost_gpu_seconds = 0;
  double restart_gpu_seconds = 0;
  // The cluster's draw integrated over the run (joules), its highest value, and the most each
  // capped domain drew.
  double energy_joules = 0;
  double peak_watts = 0;
  std::vector<DomainPower> domain_power;
  // The share of those two due to preemption (the rest: node failures and down events).
  double preemption_lost_gpu_seconds = 0;
  double preemption_restart_gpu_seconds = 0;
  std::string preemption_plugin;  // the profile's
  // An oracle profile: the engine could not run it without the trace's true run times
  // (RuntimeOracle, sched/registry.h), so no live cluster can. Reports mark it.
  bool oracle = false;
  // The live driver's rhythm it simulated (SimOptions::cycle, launch_latency; 0: none).
  Duration cycle = 0;
  Duration launch_latency = 0;
  Duration end_latency = 0;
  // The as-recorded replay (gantry/sim/replay.h) rather than a simulation, and what it found.
  bool as_recorded = false;
  RecordedReplay recorded;
  SimSummary summary;  // filled by Summarize()
  SimPerf perf;
};

// Computes result.summary from outcomes, samples and counters.
void Summarize(SimResult& result);
// Sets result.summary.replay_error: `result` against `recorded` (an as-recorded replay of the
// same workload; both summarized). Jobs are matched by index.
void SetReplayError(SimResult& result, const SimResult& recorded);

// summary.json's content (fields documented in docs/formats/outputs.md); ordered_json so that the
// key order is fixed and the text is byte-identical across runs.
nlohmann::ordered_json SummaryToJson(const SimResult& result);
// One row per job: id,team,user,gpus,nodes_spanned,span_level,submit,start,end,wait,jct,
// bounded_slowdown,backfilled,killed_at_limit,cancelled,requeues,preemptions,energy_kwh,
// preemption_lost_gpu_hours,reason,first_estimate (header documented in docs/formats/outputs.md).
Status WriteJobsCsv(const SimResult& result, const std::string& path);
// One row per run a failure or preemption ended (SimResult::interrupted_runs, in the order
// they ended): id,start,end. With jobs.csv (each job's last run) it gives every run, which
// analyses of use over time need (docs/formats/outputs.md).
Status WriteInterruptedRunsCsv(const SimResult& result, const std::string& path);
Status WriteSummaryJson(const SimResult& result, const std::string& path);
struct HtmlReportOptions {
  // The profile the others are compared with in the deltas table; empty: the first result.
  // InvalidArgument when no result has this profile.
  std::string baseline;
};
// A self-contained HTML page comparing the results side by side (Vega-Lite charts, inlined).
Status WriteHtmlReport(const std::vector<const SimResult*>& results, const std::string& path,
                       const HtmlReportOptions& options = {});
// Human-readable comparison table (one row per profile) for the terminal.
std::string SummaryTable(const std::vector<const SimResult*>& results);

}  // namespace gantry
