// Jobs and workloads: what a trace says was asked for (JobRequest, job_request.h) and what
// happened (Job).
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
#include "gantry/workload/job_request.h"

namespace gantry {

// A trace's record of a job: the request, plus what the trace says happened. Only drivers that
// replay history (the simulator, importers, reports) include this header; the engine sees the
// JobRequest base alone.
struct Job : JobRequest {
  Duration run_time = 0;  // how long it actually ran (the trace's truth)
  // When it really started, in the same time base as submit, for traces that record it (sacct
  // Start, Helios start_time, openb scheduled_time, SWF submit + wait time); -1 when the trace
  // does not. Only the as-recorded replay (gantry/sim/replay.h) reads it.
  Time recorded_start = -1;
  bool time_limit_estimated = false;  // true when the estimate model supplied time_limit
  int32_t source_line = 0;            // line in the trace file, for error messages
  // Its QOS by name, for traces that name it (sacct): an index in Workload::qos_names; -1: none.
  // ResolveWorkload gives it the cluster spec's level when the spec lists QOS.
  int32_t qos_name = -1;
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
  // QOS names that jobs named but a cluster spec with QOS lacks -> jobs naming them (given level
  // 0 by ResolveWorkload; "normal" is not counted).
  std::map<std::string, int64_t> qos_not_in_cluster;
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
  std::vector<std::string> qos_names;
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
