// Trace importers and the checks that turn a raw trace into a workload a cluster can run.
//
// Each importer reads one public trace format (exact columns in docs/formats/traces.md) into a
// Workload. Bad rows are an error naming file, line and field, unless ImportOptions::skip_bad_rows
// is set, in which case they are skipped and counted in Workload::stats by reason. Nothing is
// silently clamped. Functions are thread-compatible (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/status.h"
#include "gantry/workload/job.h"

namespace gantry {

enum class TraceFormat { kPhilly, kOpenb, kHelios, kSacct, kSwf };

// "philly", "openb", "helios", "sacct", "swf"; or an error listing the valid names.
Result<TraceFormat> ParseTraceFormat(const std::string& name);
const char* TraceFormatName(TraceFormat format);
// Guesses the format from a file's header line; used when --format is "auto".
Result<TraceFormat> DetectTraceFormat(const std::string& path);

// How requested time limits are estimated for traces that lack them (documented in
// docs/formats/traces.md). Users overestimate: limit = run_time * f, where with probability
// `exact_fraction` f = 1, otherwise log(f) ~ |Normal(log_mean, log_sigma)|; the result is rounded
// up to a multiple of `round_to` seconds and capped at max(run_time, max_limit).
struct TimeLimitModel {
  double exact_fraction = 0.1;
  double log_mean = 1.0;  // median overestimate about e^1 = 2.7x
  double log_sigma = 0.8;
  Duration round_to = 900;  // users ask for quarter hours
  Duration max_limit = 14 * 86400;
  uint64_t seed = 1;
};

struct ImportOptions {
  bool skip_bad_rows = false;  // skip and count malformed rows instead of failing
  TimeLimitModel time_limits;  // applied to jobs whose trace gives no limit
  // openb only: requests of a fraction of a GPU (gpu_milli < 1000) are rounded up to one whole
  // GPU and counted in stats.fractional_gpu_rounded; when false they are bad rows.
  bool round_fractional_gpus = true;
};

Result<Workload> ImportTrace(const std::string& path, TraceFormat format,
                             const ImportOptions& options);
// Same, from text already in memory (fuzzing, tests); `source_name` is used in messages.
Result<Workload> ImportTraceText(const std::string& text, const std::string& source_name,
                                 TraceFormat format, const ImportOptions& options);

// Fills time_limit for jobs that have none, deterministically from the model's seed and each
// job's source line (its index when it has none), so the result depends neither on import order
// nor on which other rows were skipped.
void ApplyTimeLimitModel(Workload& workload, const TimeLimitModel& model);

struct ResolveOptions {
  bool skip_bad_jobs = false;  // skip and count jobs the cluster cannot run, instead of failing
  // Keep a job larger than its team's quota: it waits for ever with reason Quota (as Kueue
  // leaves such a workload pending) instead of being an error or skipped. `gantry sim` sets it
  // unless --strict.
  bool keep_over_quota = false;
};

// Checks a workload against a cluster and prepares it to run there: resolves GPU type names to
// masks (a job's list of types means "any of these": names the cluster lacks are left out and
// counted in stats.gpu_types_not_in_cluster; only a list with no type the cluster has is an
// error naming the job's line), rejects jobs larger than the cluster, than
// any node shape it has, or than their team's quota, and returns one Team per workload team
// (quota from the cluster spec, else its default). Skipped jobs are removed and counted in
// workload.stats; survivors are re-indexed in submit order.
Result<std::vector<Team>> ResolveWorkload(Workload& workload, const Cluster& cluster,
                                          const ResolveOptions& options);

// Builds a flat cluster from an openb node file (sn,cpu_milli,memory_mib,gpu,model): one node per
// row with `gpu` GPUs of type `model`; nodes without GPUs are left out.
Result<Cluster> ClusterFromOpenbNodes(const std::string& path);
// True when `path` is a file whose header is an openb node list's (starts with "sn," and names
// the gpu and model columns).
bool IsOpenbNodeFile(const std::string& path);
// What `--cluster` accepts: an openb node list, else a cluster spec file or shorthand
// (LoadCluster).
Result<Cluster> LoadClusterOrNodeList(const std::string& spec_or_path);

// Summary statistics for `gantry trace inspect`.
struct TraceStats {
  int64_t jobs = 0;
  double gpu_hours = 0;
  Time first_submit = 0, last_submit = 0;
  std::vector<std::pair<int, int64_t>> jobs_by_gpus;  // (gpus, job count), ascending gpus
  // Run-time percentiles (p10, p50, p90, p99, max) in seconds.
  std::vector<std::pair<std::string, Duration>> run_time_percentiles;
  std::vector<std::pair<std::string, double>> gpu_hours_by_team;  // descending
};
TraceStats ComputeTraceStats(const Workload& workload);

}  // namespace gantry
