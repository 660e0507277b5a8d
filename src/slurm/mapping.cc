// Slurm jobs and node names in the engine's terms; see gantry/slurm/mapping.h.
#include "gantry/slurm/mapping.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

namespace gantry::slurm {

Result<JobRequest> ToJobRequest(const SlurmJob& job, const Cluster& cluster, Time epoch_unix) {
  JobRequest r;
  r.id = std::to_string(job.id);
  const int team = cluster.FindTeam(job.account);
  if (team < 0) {
    return NotFound("Slurm job " + r.id + ": account '" + job.account +
                    "' is not a team of cluster " + cluster.name());
  }
  r.team = team;
  r.submit = job.submit_time - epoch_unix;
  if (job.gpus_per_node > 0) {
    r.nodes = job.node_count > 0 ? job.node_count : 1;
    r.gpus_per_node = job.gpus_per_node;
    r.gpus = r.nodes * r.gpus_per_node;
  } else {
    r.gpus = job.gpus;  // --gpus=G: anywhere
  }
  if (r.gpus <= 0) return InvalidArgument("Slurm job " + r.id + " asks for no GPUs");
  if (!job.gpu_type.empty()) {
    const GpuTypeIndex t = cluster.FindGpuType(job.gpu_type);
    if (t < 0) {
      return NotFound("Slurm job " + r.id + ": GPU type '" + job.gpu_type + "' is not in cluster " +
                      cluster.name());
    }
    r.gpu_type_mask = 1u << t;
  }
  r.time_limit = job.time_limit_minutes > 0 ? Duration{job.time_limit_minutes} * 60 : 0;
  return r;
}

Result<DataDeclarations> ParseDataDeclarations(std::string_view admin_comment) {
  DataDeclarations out;
  constexpr std::string_view kTag = "gantry-data";
  if (admin_comment.substr(0, kTag.size()) != kTag ||
      (admin_comment.size() > kTag.size() && admin_comment[kTag.size()] != ' ')) {
    return out;
  }
  std::string_view rest = admin_comment.substr(kTag.size());
  while (!rest.empty()) {
    const size_t begin = rest.find_first_not_of(' ');
    if (begin == std::string_view::npos) break;
    rest.remove_prefix(begin);
    const size_t end = std::min(rest.find(' '), rest.size());
    const std::string_view word = rest.substr(0, end);
    rest.remove_prefix(end);
    const size_t eq = word.find('=');
    const std::string_view key = word.substr(0, eq);
    const std::string url(eq == std::string_view::npos ? "" : word.substr(eq + 1));
    if (url.empty() || (key != "dataset" && key != "checkpoint")) {
      return InvalidArgument("AdminComment '" + std::string(admin_comment) + "': cannot read '" +
                             std::string(word) + "' (dataset=URL or checkpoint=URL)");
    }
    if (key == "checkpoint") {
      out.checkpoint = url;
    } else if (std::find(out.datasets.begin(), out.datasets.end(), url) == out.datasets.end()) {
      out.datasets.push_back(url);
    }
  }
  return out;
}

Result<std::vector<NodeIndex>> NodeIndices(const Cluster& cluster,
                                           const std::vector<std::string>& names) {
  std::unordered_map<std::string, NodeIndex> index;
  for (size_t i = 0; i < cluster.nodes().size(); ++i) {
    index.emplace(cluster.nodes()[i].name, static_cast<NodeIndex>(i));
  }
  std::vector<NodeIndex> out;
  for (const std::string& n : names) {
    auto it = index.find(n);
    if (it == index.end()) {
      return NotFound("node '" + n + "' is not in cluster " + cluster.name());
    }
    out.push_back(it->second);
  }
  return out;
}

std::vector<std::string> NodeNames(const Cluster& cluster, const std::vector<NodeIndex>& nodes) {
  std::vector<std::string> out;
  for (NodeIndex n : nodes) out.push_back(cluster.nodes()[n].name);
  return out;
}

}  // namespace gantry::slurm
