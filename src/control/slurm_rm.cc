#include "gantry/control/slurm_rm.h"

#include <algorithm>
#include <cctype>
#include <utility>

namespace gantry::control {

namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// GPUs on each node of a job: its per-node count, or its total spread as evenly as Slurm would
// place a --gpus=G job (the first nodes take the remainder).
std::vector<NodeGpus> PlacementOf(const slurm::SlurmJob& job,
                                  const std::vector<std::string>& nodes) {
  std::vector<NodeGpus> out;
  if (nodes.empty()) return out;
  const int n = static_cast<int>(nodes.size());
  for (int i = 0; i < n; ++i) {
    const int gpus =
        job.gpus_per_node > 0 ? job.gpus_per_node : job.gpus / n + (i < job.gpus % n ? 1 : 0);
    if (gpus > 0) out.push_back({nodes[static_cast<size_t>(i)], gpus});
  }
  return out;
}

}  // namespace

Result<RmJob> ToRmJob(const slurm::SlurmJob& job) {
  if (job.gpus <= 0) return NotFound("job " + std::to_string(job.id) + " asks no GPUs");
  RmJob o;
  JobRecord& r = o.request;
  r.id = std::to_string(job.id);
  r.user = job.user;
  r.team = job.account;
  r.queue = job.partition;
  if (!job.gpu_type.empty()) r.gpu_types = {job.gpu_type};
  r.submit = job.submit_time;
  r.gpus = job.gpus;
  r.gpus_per_node = job.gpus_per_node;
  r.nodes = job.gpus_per_node > 0 ? std::max(job.node_count, 1) : 0;
  if (job.gpus_per_node > 0) r.gpus = r.gpus_per_node * r.nodes;
  r.time_limit = job.time_limit_minutes * 60;
  switch (job.state) {
    case slurm::JobState::kPending:
      if (job.held) {
        o.state = ObservedState::kHeld;
      } else {
        o.state = ObservedState::kReleased;
        o.placement = PlacementOf(job, job.required_nodes);
      }
      break;
    case slurm::JobState::kRunning:
    case slurm::JobState::kSuspended:
    case slurm::JobState::kCompleting:
      o.state = ObservedState::kRunning;
      o.placement = PlacementOf(job, job.nodes);
      o.start = job.start_time > 0 ? job.start_time : -1;
      break;
    default:
      o.state = ObservedState::kFinished;
      o.end_state = Lower(slurm::JobStateName(job.state));
      break;
  }
  return o;
}

SlurmResourceManager::SlurmResourceManager(SlurmRmOptions options)
    : options_(std::move(options)), client_(options_.slurm) {}

Result<std::vector<RmJob>> SlurmResourceManager::Jobs() {
  GANTRY_ASSIGN_OR_RETURN(std::vector<slurm::SlurmJob> jobs, client_.Jobs());
  std::vector<RmJob> out;
  for (const slurm::SlurmJob& j : jobs) {
    if (!options_.partitions.empty() &&
        std::find(options_.partitions.begin(), options_.partitions.end(), j.partition) ==
            options_.partitions.end()) {
      continue;
    }
    Result<RmJob> o = ToRmJob(j);
    if (o.ok()) out.push_back(std::move(o).value());
  }
  return out;
}

Status SlurmResourceManager::Start(const std::string& id, const std::vector<NodeGpus>& placement) {
  int64_t job = 0;
  try {
    size_t used = 0;
    job = std::stoll(id, &used);
    if (used != id.size()) throw std::invalid_argument(id);
  } catch (const std::exception&) {
    return InvalidArgument("'" + id + "' is not a Slurm job id");
  }
  std::vector<std::string> nodes;
  for (const NodeGpus& s : placement) nodes.push_back(s.node);
  return client_.StartOnNodes(job, nodes);
}

}  // namespace gantry::control
