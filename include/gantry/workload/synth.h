// Synthetic workloads shaped like the Philly trace, at any scale, for benchmarks and what-ifs.
//
// SynthesizeWorkload draws `jobs` jobs deterministically from a seed: sizes mostly 1 GPU, some
// 2/4/8, a few gangs of 16-256 GPUs as whole 8-GPU nodes; log-normal run times from a minute to a
// week; teams with Zipf-like shares; Poisson arrivals whose span is chosen so that the offered
// load, sum(gpus * run_time) / (cluster_gpus * span), equals the target. Time limits come from
// ApplyTimeLimitModel, keyed like a re-import of the CSV that WritePhillyCsv writes, so
// `gantry sim --format philly` on that file sees the same jobs and limits. Pure functions, no
// shared state (thread-compatible).
//
//   SynthOptions o;
//   o.jobs = 100000;
//   o.cluster_gpus = 100000;
//   Result<Workload> w = SynthesizeWorkload(o);
//   Status s = WritePhillyCsv(*w, "synth.csv");
#pragma once

#include <cstdint>
#include <string>

#include "gantry/common/status.h"
#include "gantry/workload/job.h"
#include "gantry/workload/trace.h"

namespace gantry {

struct SynthOptions {
  int64_t jobs = 10000;
  // GPUs of the cluster the load is meant for; must be > 0. Jobs never ask for more than this.
  int64_t cluster_gpus = 0;
  // Offered load: GPU-seconds asked / (cluster_gpus * arrival span). Default: 0.9.
  double load = 0.9;
  int teams = 20;  // Default: 20, named team00, team01, ...; team k's share is ~ 1/(k+1)
  uint64_t seed = 1;
  TimeLimitModel time_limits;  // its seed is replaced by `seed`
};

// The Unix time of t = 0 in synthetic workloads: 2017-01-01 00:00:00 UTC.
inline constexpr Time kSynthEpochUnix = 1483228800;

// Errors: InvalidArgument for jobs < 0, cluster_gpus <= 0, load <= 0 or teams <= 0.
Result<Workload> SynthesizeWorkload(const SynthOptions& options);

// Offered load of `w` on `cluster_gpus` GPUs: sum(gpus * run_time) / (cluster_gpus * span), span
// = last submit - first submit (at least 1 s).
double OfferedLoad(const Workload& w, int64_t cluster_gpus);

// Writes `w` as a Philly CSV (timestamp,duration,num_gpus,gpu_time,cluster; docs/formats/
// traces.md): timestamp = epoch_unix + submit, cluster = the job's team. Rows in job order, so the
// job at position i is on line i + 2.
Status WritePhillyCsv(const Workload& w, const std::string& path);

}  // namespace gantry
