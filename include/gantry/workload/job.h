// Jobs and workloads: what a trace says was asked for and what happened.
//
// A Workload owns its jobs and the name tables (users, teams, queues, GPU type sets) that jobs
// refer to by index, so a million jobs stay compact. Importers (trace.h) fill it; ResolveWorkload
// checks it against a Cluster. Plain values, no internal synchronisation.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/time.h"

namespace gantry {

using JobIndex = int32_t;

struct Job {
  JobIndex index = 0;  // position in Workload::jobs
  std::string id;      // the trace's own identifier (or the row number when it has none)
  int32_t user = 0;    // index into Workload::users
  int32_t team = 0;    // index into Workload::teams
  int32_t queue = 0;   // index into Workload::queues
  Time submit = 0;     // seconds since the workload's epoch
  int32_t gpus = 0;    // total GPUs, all-or-nothing
  // Gang shape: `nodes` nodes with `gpus_per_node` GPUs each. 0/0 means "any": the GPUs may be
  // spread over any nodes (placement still packs them onto as few as it can).
  int32_t gpus_per_node = 0;
  int32_t nodes = 0;
  int32_t gpu_type_set = -1;  // -1: any GPU type; else index into Workload::gpu_type_sets
  uint32_t gpu_type_mask = kAnyGpuType;  // resolved against a cluster by ResolveWorkload
  Duration time_limit = 0;               // requested wall-time limit; 0 until known
  bool time_limit_estimated = false;     // true when the estimate model supplied time_limit
  Duration run_time = 0;                 // how long it actually ran (the trace's truth)
  int32_t qos = 0;                       // priority/QoS level; higher is more important
  Duration checkpoint_interval = 0;      // 0: does not checkpoint
  Duration restart_cost = 0;  // seconds lost on each restart besides work since the last checkpoint
  int32_t source_line = 0;    // line in the trace file, for error messages
};

struct ImportStats {
  int64_t rows_read = 0;
  int64_t jobs = 0;
  int64_t rows_skipped = 0;
  std::map<std::string, int64_t> skipped_by_reason;  // reason -> count (only with skip_bad_rows)
  int64_t fractional_gpu_rounded = 0;  // openb: gpu_milli < 1000 rounded up to a whole GPU
  // GPU type names that jobs listed but the cluster lacks -> jobs naming them (ResolveWorkload
  // leaves them out of each job's "any of these" list).
  std::map<std::string, int64_t> gpu_types_not_in_cluster;
};

struct Workload {
  std::string source;   // file the jobs came from
  std::string format;   // importer name
  Time epoch_unix = 0;  // Unix time of t = 0, when the trace has wall-clock times
  std::vector<Job> jobs;
  std::vector<std::string> users;
  std::vector<std::string> teams;
  std::vector<std::string> queues;
  std::vector<std::vector<std::string>> gpu_type_sets;
  ImportStats stats;
};

// Interns names into one of a Workload's tables in O(1): index of `name`, appended if new.
class NameTable {
 public:
  explicit NameTable(std::vector<std::string>& table);
  int32_t Intern(const std::string& name);

 private:
  std::vector<std::string>& table_;
  std::unordered_map<std::string, int32_t> index_;
};

}  // namespace gantry
