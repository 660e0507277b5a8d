// The packing experiment of FGD (Weng et al., USENIX ATC 2023, section 6): tasks arrive in
// trace order and never leave; each is placed by a policy or counted as failed, until the GPU
// demand that has arrived reaches the cluster's capacity. As the arrived load rises it records
// the share of GPU capacity allocated and the share that is free but fragmented (fragmentation.h:
// capacity the workload's tasks could not use, as an expectation over the workload's mix).
//
// Unlike the engine it places GPU shares: a task with gpu_milli (openb) takes that many
// thousandths of one device, and several share a device up to 1000 milli; a whole-GPU task
// takes fully free devices. Optionally each GPU is cut into k fixed slices (MIG-like; a share
// rounds up to whole slices), or shares are rounded up to whole GPUs (counted and reported).
// Only requests matter: submit and run times are ignored, so a pod list without times will do.
// Deterministic; single-threaded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/status.h"
#include "gantry/workload/job.h"

namespace gantry {

struct PackingOptions {
  // Node choice, each a separate run: first-fit (lowest node index), best-fit (least capacity
  // left on the node), fgd (least growth of the node's expected fragmentation).
  std::vector<std::string> policies{"first-fit", "best-fit", "fgd"};
  bool round_fractional = false;  // give a GPU share a whole GPU instead
  // > 0: every GPU is this many fixed slices, whatever the cluster says; 0: each GPU type's own
  // GpuType::mig_slices, milli-GPUs where that is 0.
  int mig_slices = 0;
  double max_load = 1.0;          // stop once arrived demand reaches this share of capacity
  double step = 0.01;             // one point each time arrived load passes a multiple of this
  bool check_invariants = false;  // independent per-device bookkeeping after every task
};

struct PackingPoint {
  int64_t tasks = 0;      // arrived so far
  int64_t failed = 0;     // of them, placed nowhere
  double arrived = 0;     // GPUs requested so far / cluster GPUs
  double allocated = 0;   // GPU capacity allocated / cluster GPUs
  double fragmented = 0;  // expected fragmented capacity / cluster GPUs
};

struct PackingCurve {
  std::string policy;
  std::vector<PackingPoint> points;
};

struct PackingResult {
  std::vector<PackingCurve> curves;
  int64_t rounded = 0;          // GPU shares given a whole GPU (round_fractional)
  int64_t fractional = 0;       // tasks asking for a share of one GPU
  int capacity = 1000;          // units per GPU: 1000 milli, or the --mig-slices override
  bool sliced_by_type = false;  // some GPU types are cut into slices (GpuType::mig_slices)
  int64_t cluster_gpus = 0;
};

// `workload` must be resolved against `cluster` (ResolveWorkload). InvalidArgument for an
// unknown policy or bad options.
Result<PackingResult> RunPacking(const Cluster& cluster, const Workload& workload,
                                 const PackingOptions& options);

// policy,tasks,failed,arrived,allocated,fragmented (docs/formats/outputs.md#packing).
Status WritePackingCsv(const PackingResult& result, const std::string& path);
// A line chart: allocated (solid) and fragmented (dashed) against arrived load, per policy.
Status WritePackingSvg(const PackingResult& result, const std::string& path);

}  // namespace gantry
