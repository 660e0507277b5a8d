#include "gantry/control/slurm_rm.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <utility>

#include "gantry/slurm/mapping.h"

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
  r.qos_name = job.qos;
  if (!job.gpu_type.empty()) r.gpu_types = {job.gpu_type};
  r.submit = job.submit_time;
  r.gpus = job.gpus;
  r.gpus_per_node = job.gpus_per_node;
  r.nodes = job.gpus_per_node > 0 ? std::max(job.node_count, 1) : 0;
  if (job.gpus_per_node > 0) r.gpus = r.gpus_per_node * r.nodes;
  r.time_limit = job.time_limit_minutes * 60;
  o.requeueable = job.requeue;
  // A malformed declaration cannot come from job_submit.lua (it refuses the job): one written
  // by hand is ignored rather than hiding the job from Gantry.
  if (Result<slurm::DataDeclarations> data = slurm::ParseDataDeclarations(job.admin_comment);
      data.ok()) {
    r.datasets = std::move(data->datasets);
    r.checkpoint = std::move(data->checkpoint);
  }
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
      o.stopping = job.state == slurm::JobState::kCompleting;
      break;
    default:
      o.state = ObservedState::kFinished;
      o.end_state = Lower(slurm::JobStateName(job.state));
      o.placement = PlacementOf(job, job.nodes);  // where it ran; none if it never did
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

RmNode ToRmNode(const slurm::SlurmNode& node) {
  RmNode o;
  o.name = node.name;
  o.rm_state = node.slurm_state;
  o.reason = node.reason;
  switch (node.state) {
    case slurm::NodeState::kIdle:
    case slurm::NodeState::kMixed:
    case slurm::NodeState::kAllocated:
      o.state = NodeState::kUp;
      break;
    case slurm::NodeState::kDown:
      // Not responding alone is not down yet: Slurm keeps its jobs until SlurmdTimeout.
      o.state = node.not_responding && Lower(node.slurm_state).rfind("down", 0) != 0
                    ? NodeState::kDrained
                    : NodeState::kDown;
      break;
    case slurm::NodeState::kDraining:
    case slurm::NodeState::kDrained:
    case slurm::NodeState::kUnknown:
      o.state = NodeState::kDrained;
      break;
  }
  return o;
}

Result<int64_t> SlurmJobId(const std::string& id) {
  try {
    size_t used = 0;
    const int64_t job = std::stoll(id, &used);
    if (used != id.size() || job <= 0) throw std::invalid_argument(id);
    return job;
  } catch (const std::exception&) {
    return InvalidArgument("'" + id + "' is not a Slurm job id");
  }
}

Result<std::vector<RmNode>> SlurmResourceManager::Nodes() {
  GANTRY_ASSIGN_OR_RETURN(std::vector<slurm::SlurmNode> nodes, client_.Nodes());
  std::vector<RmNode> out;
  out.reserve(nodes.size());
  // sinfo --json lists a node once per partition; the first report is kept.
  std::set<std::string> seen;
  for (const slurm::SlurmNode& n : nodes) {
    if (seen.insert(n.name).second) out.push_back(ToRmNode(n));
  }
  return out;
}

Status SlurmResourceManager::Requeue(const std::string& id) {
  GANTRY_ASSIGN_OR_RETURN(int64_t job, SlurmJobId(id));
  Status s = client_.RequeueHeld(job);
  // Refused when it is not running: Slurm requeued it already (pending again), so hold it.
  if (s.code() == StatusCode::kFailedPrecondition) return client_.Hold(job);
  // A job that may not be requeued is refused so even while pending (released, waiting for
  // its nodes): holding it then is the same thing. A running one passes the refusal on --
  // holding it would leave it running while Gantry books its GPUs as free.
  if (s.code() == StatusCode::kPermissionDenied) {
    Result<slurm::SlurmJob> now = client_.Job(job);
    if (now.ok() && now->state == slurm::JobState::kPending) return client_.Hold(job);
  }
  return s;
}

Status SlurmResourceManager::Cancel(const std::string& id) {
  GANTRY_ASSIGN_OR_RETURN(int64_t job, SlurmJobId(id));
  return client_.Cancel(job);
}

Status SlurmResourceManager::Signal(const std::string& id, const std::string& signal) {
  GANTRY_ASSIGN_OR_RETURN(int64_t job, SlurmJobId(id));
  return client_.Signal(job, signal);
}

Status SlurmResourceManager::Start(const std::string& id, const std::vector<NodeGpus>& placement) {
  GANTRY_ASSIGN_OR_RETURN(int64_t job, SlurmJobId(id));
  std::vector<std::string> nodes;
  for (const NodeGpus& s : placement) nodes.push_back(s.node);
  return client_.StartOnNodes(job, nodes);
}

}  // namespace gantry::control
