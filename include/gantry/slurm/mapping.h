// Slurm's view of jobs and nodes translated into Gantry's engine types: a SlurmJob becomes the
// JobRequest the engine schedules, node names become the cluster's node indices (and back).
// The cluster is the one `gantry cluster import --from-slurm` wrote, so names, GPU types and
// teams match Slurm's.
//
//   GANTRY_ASSIGN_OR_RETURN(JobRequest r, ToJobRequest(slurm_job, cluster, epoch));
//   GANTRY_ASSIGN_OR_RETURN(std::vector<NodeIndex> where, NodeIndices(cluster, job.nodes));
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/status.h"
#include "gantry/common/time.h"
#include "gantry/slurm/slurm.h"
#include "gantry/workload/job_request.h"

namespace gantry::slurm {

// The engine's request for a Slurm job. id: Slurm's job id; team: the index of the job's
// account among cluster.teams() (the teams a driver gives Engine::Create); submit: seconds since
// `epoch_unix`; shape: `-N n --gres=gpu[:type]:g` is n nodes of g GPUs each, a job with GPUs
// but no per-node GRES (`--gpus=G`) is G GPUs anywhere; gpu_type_mask: the requested type, or
// any; time_limit: Slurm's (0 when unlimited). index, user and queue are left to the driver.
// NotFound for an account that is not a team or a GPU type the cluster lacks (import again);
// InvalidArgument for a job without GPUs (Gantry schedules GPU jobs).
Result<JobRequest> ToJobRequest(const SlurmJob& job, const Cluster& cluster, Time epoch_unix);

// The data a job declared in its batch script (`#GANTRY --dataset=URL`, `#GANTRY
// --checkpoint=URL`), which Gantry's job_submit.lua wrote into its AdminComment as
// "gantry-data dataset=URL ... checkpoint=URL".
struct DataDeclarations {
  std::vector<std::string> datasets;  // in the script's order, each once
  std::string checkpoint;             // empty: none declared
};
// Parses an AdminComment. One that is not Gantry's (an administrator's own words) declares
// nothing; InvalidArgument for a "gantry-data" line with a word that is not key=URL.
Result<DataDeclarations> ParseDataDeclarations(std::string_view admin_comment);

// Node names (as Slurm reports them) as the cluster's node indices; NotFound for a name the
// cluster does not have.
Result<std::vector<NodeIndex>> NodeIndices(const Cluster& cluster,
                                           const std::vector<std::string>& names);
// The inverse, for StartOnNodes.
std::vector<std::string> NodeNames(const Cluster& cluster, const std::vector<NodeIndex>& nodes);

}  // namespace gantry::slurm
