// JobRequest: a job as a user asked for it (shape, GPU types, time limit, team, QoS, submit time,
// a stable string id), and nothing that only happens later.
//
// This is all the scheduling engine and its plugins ever see of a job: every seam of
// gantry/sched/ takes a JobRequest, and none of its headers or sources includes job.h, where the
// trace's record (Job, with the true run time) lives. A live driver builds JobRequests from user
// submissions; the simulator passes its Jobs, which extend JobRequest, so nothing is copied.
// What only a trace knows reaches oracle plugins through RuntimeOracle (sched/registry.h), an
// interface whose name says it is an oracle. Plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/time.h"

namespace gantry {

using JobIndex = int32_t;

struct JobRequest {
  JobIndex index = 0;  // position in the driver's job table (Workload::jobs in the simulator)
  std::string id;      // stable identifier (the trace's own, or the row number when it has none)
  int32_t user = 0;    // index into the driver's user table (Workload::users)
  int32_t team = 0;    // index into the teams given to Engine::Create (Workload::teams)
  int32_t queue = 0;   // index into the driver's queue table (Workload::queues)
  Time submit = 0;     // seconds since the driver's epoch
  int32_t gpus = 0;    // total GPUs, all-or-nothing
  // Gang shape: `nodes` nodes with `gpus_per_node` GPUs each. 0/0 means "any": the GPUs may be
  // spread over any nodes (placement still packs them onto as few as it can).
  int32_t gpus_per_node = 0;
  int32_t nodes = 0;
  // A share of one GPU in thousandths (1..999, with gpus = 1, from openb's gpu_milli); 0 for
  // whole GPUs. The engine shares a GPU between such jobs (sched/free_index.h, SharedGpus), as
  // the packing experiment (sim/packing.h) does; a driver that clears it gives the job a whole
  // GPU (gantry sim --round-fractional).
  int32_t gpu_milli = 0;
  int32_t gpu_type_set = -1;  // -1: any GPU type; else index into Workload::gpu_type_sets
  uint32_t gpu_type_mask = kAnyGpuType;  // resolved against a cluster by ResolveWorkload
  Duration time_limit = 0;               // requested wall-time limit; 0 until known
  int32_t qos = 0;                       // priority/QoS level; higher is more important
  // Declared by the user (or their framework): how often the job checkpoints, and what each
  // restart costs besides the work since the last checkpoint. 0: does not checkpoint.
  Duration checkpoint_interval = 0;
  Duration restart_cost = 0;
  // The datasets the job reads, as URLs (s3://bucket/prefix, a path): what a live driver stages
  // onto the job's nodes before it starts, and what the "data-locality" score
  // (sched/data_locality.h) looks up. Declared by the user; traces carry none (empty).
  std::vector<std::string> datasets;
  // Where the job's checkpoints live (a root, or ROOT/ckpt/JOB), empty when it declared none:
  // the score also prefers the nodes whose local tier holds its newest checkpoint.
  std::string checkpoint;
  // False when the job cannot be requeued (Slurm's --no-requeue, or JobRequeue=0): no preemption
  // ever picks it as a victim, since stopping it would end it rather than put it back in line.
  bool preemptible = true;
};

inline constexpr int kMilliPerGpu = 1000;

// Whole GPUs (a quota, a limit) in thousandths, as MilliGpus counts what jobs hold: in int64,
// since quotas go up to 2^30 GPUs.
inline constexpr int64_t GpusToMilli(int gpus) { return int64_t{gpus} * kMilliPerGpu; }

// A share of one GPU (gpu_milli 1..999), which the engine places on a shared GPU.
inline bool IsShare(const JobRequest& job) {
  return job.gpu_milli > 0 && job.gpu_milli < kMilliPerGpu;
}

// What a job holds while it runs, in thousandths of a GPU: gpu_milli for a share, 1000 per GPU
// otherwise. The one rule for what a job charges against its team's quota (the "quota" and
// "kueue" admission plugins, the engine's team usage, the invariant checker) and for its usage
// (GpusUsed). Integers, so that quota sums stay exact; int64 because quotas go up to 2^30 GPUs.
inline int64_t MilliGpus(const JobRequest& job) {
  return IsShare(job) ? job.gpu_milli : GpusToMilli(job.gpus);
}

// The GPUs a job's usage counts (utilization, fair share): MilliGpus / 1000, so whole GPUs for a
// whole-GPU job (exactly: the division of a multiple of 1000 by 1000 is exact).
inline double GpusUsed(const JobRequest& job) {
  return static_cast<double>(MilliGpus(job)) / kMilliPerGpu;
}

// Milli-GPUs as a person reads GPUs: "3" for 3000, "0.75" for 750, "2.5" for 2500.
inline std::string MilliGpusText(int64_t milli) {
  const bool negative = milli < 0;
  const uint64_t m = negative ? 0 - static_cast<uint64_t>(milli) : static_cast<uint64_t>(milli);
  std::string out = (negative ? "-" : "") + std::to_string(m / kMilliPerGpu);
  if (uint64_t frac = m % kMilliPerGpu; frac != 0) {
    std::string digits = std::to_string(frac);
    digits.insert(0, 3 - digits.size(), '0');
    while (digits.back() == '0') digits.pop_back();
    out += "." + digits;
  }
  return out;
}

}  // namespace gantry
