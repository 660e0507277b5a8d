// The control loop's ResourceManager over a live Slurm (slurm::SlurmClient): Slurm's jobs in
// the Gantry-managed partitions as RmJobs, and a start as "pin the node list, release".
//
// How Slurm's states read (docs/control.md, "Slurm"):
//   pending with priority 0 (held by Gantry's job_submit.lua)  -> kHeld
//   pending, released (a node list pinned)                     -> kReleased, on those nodes
//   running, suspended, completing                             -> kRunning, on its nodes
//   completed, cancelled, failed, timeout, node_fail, preempted, out_of_memory -> kFinished
// Jobs without GPUs are not Gantry's and are left out.
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
  Status Start(const std::string& id, const std::vector<NodeGpus>& placement) override;

 private:
  SlurmRmOptions options_;
  slurm::SlurmClient client_;
};

// One Slurm job as the control loop sees it; nullopt-like NotFound for a job that is not
// Gantry's (no GPUs, or another partition).
Result<RmJob> ToRmJob(const slurm::SlurmJob& job);

}  // namespace gantry::control
