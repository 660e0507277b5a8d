// GPU fragmentation as FGD measures it (Weng et al., "Beware of Fragmentation: Scheduling
// GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC 2023), with one change
// the issue asks for: a task only counts GPUs it could actually use.
//
// A workload is summarised as a TaskMix: the kinds of task it holds (what one node must give a
// task, the GPU types it may use) and each kind's share of its tasks. For one node and one task
// kind m, the fragment F_n(m) is the free GPU capacity of n that m cannot use:
//   - 0 when n's GPU type is not one m may use (those GPUs are not m's to waste);
//   - a whole-GPU task needing d GPUs on a node: the partly used devices' free capacity when the
//     node has d fully free devices, else all its free capacity;
//   - a fractional task of r capacity units: the free capacity of every device with less than r.
// The node's fragmentation is the expectation over the mix, sum_m share_m * F_n(m); the
// cluster's is the sum over nodes. FGD places a task where this grows least (the "fgd" score,
// scores.cc, and the packing experiment, sim/packing.h). Plain values, no synchronisation.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/workload/job_request.h"

namespace gantry {

// One kind of task: what it needs of one node, and where it may run.
struct TaskClass {
  int gpus = 1;   // whole GPUs on one node (a gang's gpus_per_node; 1 for an "any" job)
  int milli = 0;  // a fractional task: thousandths of one GPU (1..999); then gpus is 1
  uint32_t types = kAnyGpuType;
  double share = 0;  // of the mix's tasks; the shares sum to 1
  bool operator==(const TaskClass&) const = default;
};

class TaskMix {
 public:
  // The kind of one job, and adds one task of it.
  static TaskClass ClassOf(const JobRequest& job);
  void Add(const JobRequest& job);
  // Index of the kind of `job` in classes(), or -1.
  int Find(const JobRequest& job) const;
  const std::vector<TaskClass>& classes() const { return classes_; }
  int64_t tasks() const { return tasks_; }
  bool empty() const { return tasks_ == 0; }

 private:
  std::vector<TaskClass> classes_;  // first-seen order; shares kept normalised
  std::vector<int64_t> counts_;
  int64_t tasks_ = 0;
};

// What task m needs of one device, in units of `capacity` per device (1000 for milli-sharing,
// k for a GPU cut into k fixed slices): a whole device, or its milli rounded up to slices.
int DeviceNeed(const TaskClass& m, int capacity);

// F_n(m) of a node whose devices have `device_free` units free of `capacity` each.
int64_t TaskFragment(std::span<const int> device_free, int capacity, GpuTypeIndex type,
                     const TaskClass& m);
// Expected fragmentation of that node over `mix`, in capacity units.
double NodeFragmentation(std::span<const int> device_free, int capacity, GpuTypeIndex type,
                         const TaskMix& mix);
// The same for a node of whole GPUs with `free` of them free (the engine's view, FreeIndex), in
// GPUs. A fractional kind is treated as needing one whole GPU, as the engine rounds it.
double WholeGpuFragmentation(int free, GpuTypeIndex type, const TaskMix& mix);

// Type contention, for the "scarcity" score: the share of the mix's GPU demand (share x GPUs
// per node) whose kinds may use `type` and are strictly narrower than `mask` (a subset of its
// types), i.e. the demand a job allowed `mask` competes with when it takes a GPU of `type`
// though it could go elsewhere. Masks are compared within `cluster_types` (the cluster's types),
// so "any" and a list of every type the cluster has are the same. 0 for a job of one allowed
// type; in [0, 1].
double TypeContention(const TaskMix& mix, GpuTypeIndex type, uint32_t mask, uint32_t cluster_types);

}  // namespace gantry
