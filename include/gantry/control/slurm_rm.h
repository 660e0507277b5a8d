// The control loop's ResourceManager over a live Slurm (slurm::SlurmClient): Slurm's jobs in
// the Gantry-managed partitions as RmJobs, and a start as "pin the node list, release".
//
// How Slurm's states read (docs/control.md, "Slurm"):
//   pending with priority 0 (held by Gantry's job_submit.lua)  -> kHeld
//   pending, released (a node list pinned)                     -> kReleased, on those nodes
//   running, suspended, completing                             -> kRunning, on its nodes
//   completed, cancelled, failed, timeout, node_fail, preempted, out_of_memory -> kFinished
// Jobs without GPUs are not Gantry's and are left out.
//
// Nodes (sinfo): drain/draining/drained -> kDrained; down -> kDown; not responding without
// down -> kDrained (no new jobs; its jobs may still run, and Slurm sets the node down after
// SlurmdTimeout if it does not come back); idle/mixed/allocated -> kUp; anything else (power
// saving, rebooting) -> kDrained. Requeue is `scontrol requeuehold` (a running job comes back
// held), or `scontrol hold` for a job Slurm already put back in its queue.
//
// Thread-safe: it holds only its options; Cancel is called from the API's threads.
#pragma once

#include <string>
#include <vector>

#include "gantry/control/controller.h"
#include "gantry/slurm/slurm.h"

namespace gantry::control {

struct SlurmRmOptions {
  slurm::SlurmOptions slurm;
  // Partitions Gantry manages (their jobs are held on submission by job_submit.lua); empty:
  // every partition (only for clusters where every partition is managed).
  std::vector<std::string> partitions;
};

class SlurmResourceManager : public ResourceManager {
 public:
  explicit SlurmResourceManager(SlurmRmOptions options);
  Result<std::vector<RmJob>> Jobs() override;
  Result<std::vector<RmNode>> Nodes() override;
  Status Start(const std::string& id, const std::vector<NodeGpus>& placement) override;
  Status Requeue(const std::string& id) override;
  Status Cancel(const std::string& id) override;
  Status Signal(const std::string& id, const std::string& signal) override;

 private:
  SlurmRmOptions options_;
  slurm::SlurmClient client_;
};

// One Slurm job as the control loop sees it; nullopt-like NotFound for a job that is not
// Gantry's (no GPUs, or another partition).
Result<RmJob> ToRmJob(const slurm::SlurmJob& job);
// One Slurm node as the control loop sees it.
RmNode ToRmNode(const slurm::SlurmNode& node);
// A Slurm job id from Gantry's string id; InvalidArgument when it is not one.
Result<int64_t> SlurmJobId(const std::string& id);

}  // namespace gantry::control
