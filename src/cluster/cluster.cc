#include "gantry/cluster/cluster.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <unordered_set>

#include "gantry/common/time.h"

namespace gantry {
namespace {

bool EqualsIgnoreCase(const std::string& a, const std::string& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

double Cluster::BusyWatts(GpuTypeIndex t) const {
  const GpuType& type = gpu_types_[t];
  if (power_.capped_watts_factor == 1) return type.busy_watts;
  return std::max(type.idle_watts, type.busy_watts * power_.capped_watts_factor);
}

double Cluster::IdleWatts() const {
  double w = 0;
  for (const Node& n : nodes_) w += power_.node_watts + n.gpus * gpu_types_[n.gpu_type].idle_watts;
  return w;
}

double Cluster::IdleWatts(DomainIndex d) const {
  double w = 0;
  for (NodeIndex i = domains_[d].first_node; i < domains_[d].end_node; ++i) {
    const Node& n = nodes_[i];
    w += power_.node_watts + n.gpus * gpu_types_[n.gpu_type].idle_watts;
  }
  return w;
}

int Cluster::GpusOfTypes(uint32_t mask) const {
  int total = 0;
  for (const Node& n : nodes_) {
    if (mask & (1u << n.gpu_type)) total += n.gpus;
  }
  return total;
}

GpuTypeIndex Cluster::FindGpuType(const std::string& name) const {
  for (size_t i = 0; i < gpu_types_.size(); ++i) {
    if (EqualsIgnoreCase(gpu_types_[i].name, name)) return static_cast<GpuTypeIndex>(i);
  }
  return -1;
}

int Cluster::FindTeam(const std::string& name) const {
  for (size_t i = 0; i < teams_.size(); ++i) {
    if (teams_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::vector<DomainIndex> Cluster::DomainPath(NodeIndex node) const {
  std::vector<DomainIndex> path;
  for (DomainIndex d = nodes_[node].domain; d >= 0; d = domains_[d].parent) path.push_back(d);
  return path;
}

ClusterBuilder::ClusterBuilder(std::string name, std::vector<std::string> levels) {
  cluster_.name_ = std::move(name);
  cluster_.levels_ = std::move(levels);
}

Result<GpuTypeIndex> ClusterBuilder::AddGpuType(GpuType type) {
  if (type.name.empty()) return InvalidArgument("GPU type with an empty name");
  if (cluster_.FindGpuType(type.name) >= 0) {
    return InvalidArgument("GPU type '" + type.name + "' is defined twice");
  }
  if (cluster_.gpu_types_.size() >= kMaxGpuTypes) {
    return InvalidArgument("more than " + std::to_string(kMaxGpuTypes) + " GPU types");
  }
  cluster_.gpu_types_.push_back(std::move(type));
  return static_cast<GpuTypeIndex>(cluster_.gpu_types_.size() - 1);
}

Status ClusterBuilder::OpenDomain(std::string name, int level) {
  if (level < 0 || level >= static_cast<int>(cluster_.levels_.size())) {
    return InvalidArgument("domain '" + name + "': level " + std::to_string(level) +
                           " is not one of the " + std::to_string(cluster_.levels_.size()) +
                           " topology levels");
  }
  DomainIndex parent = open_.empty() ? -1 : open_.back();
  if (parent >= 0 && cluster_.domains_[parent].level <= level) {
    return InvalidArgument("domain '" + name + "' (level " + cluster_.levels_[level] +
                           ") cannot nest inside '" + cluster_.domains_[parent].name + "' (level " +
                           cluster_.levels_[cluster_.domains_[parent].level] + ")");
  }
  if (open_.empty() && !cluster_.nodes_.empty() && cluster_.domains_.empty()) {
    return InvalidArgument("domain '" + name +
                           "' opened after nodes were added outside any domain");
  }
  Domain d;
  d.name = std::move(name);
  d.level = level;
  d.parent = parent;
  d.first_node = static_cast<NodeIndex>(cluster_.nodes_.size());
  d.end_node = d.first_node;
  cluster_.domains_.push_back(std::move(d));
  open_.push_back(static_cast<DomainIndex>(cluster_.domains_.size() - 1));
  return Status::Ok();
}

Status ClusterBuilder::CloseDomain() {
  if (open_.empty()) return InvalidArgument("CloseDomain without an open domain");
  Domain& d = cluster_.domains_[open_.back()];
  d.end_node = static_cast<NodeIndex>(cluster_.nodes_.size());
  open_.pop_back();
  return Status::Ok();
}

Status ClusterBuilder::AddNode(Node node) {
  if (node.gpu_type < 0 || node.gpu_type >= static_cast<int>(cluster_.gpu_types_.size())) {
    return InvalidArgument("node '" + node.name + "': unknown GPU type index " +
                           std::to_string(node.gpu_type));
  }
  if (node.gpus < 0) return InvalidArgument("node '" + node.name + "': negative GPU count");
  if (open_.empty() && !cluster_.domains_.empty()) {
    return InvalidArgument("node '" + node.name +
                           "' is outside every domain of a cluster that has domains");
  }
  node.domain = open_.empty() ? -1 : open_.back();
  if (!open_.empty() && cluster_.domains_[open_.back()].level != 0) {
    return InvalidArgument("node '" + node.name +
                           "' must sit in a domain of the innermost level '" + cluster_.levels_[0] +
                           "'");
  }
  for (DomainIndex d : open_) cluster_.domains_[d].gpus += node.gpus;
  cluster_.total_gpus_ += node.gpus;
  cluster_.max_gpus_per_node_ = std::max(cluster_.max_gpus_per_node_, node.gpus);
  cluster_.nodes_.push_back(std::move(node));
  return Status::Ok();
}

Status ClusterBuilder::AddTeam(Team team) {
  if (cluster_.FindTeam(team.name) >= 0) {
    return InvalidArgument("team '" + team.name + "' is defined twice");
  }
  if (team.quota_gpus < kNoQuota) {
    return InvalidArgument("team '" + team.name + "': negative quota");
  }
  cluster_.teams_.push_back(std::move(team));
  return Status::Ok();
}

Status ClusterBuilder::AddAccount(Account account) {
  if (cluster_.FindTeam(account.team) < 0) {
    return InvalidArgument("account '" + account.team + "' is not a team");
  }
  if (cluster_.FindAccount(account.team) != nullptr) {
    return InvalidArgument("account '" + account.team + "' is defined twice");
  }
  cluster_.accounts_.push_back(std::move(account));
  return Status::Ok();
}

const Account* Cluster::FindAccount(const std::string& team) const {
  for (const Account& a : accounts_) {
    if (a.team == team) return &a;
  }
  return nullptr;
}

Status ClusterBuilder::AddQos(Qos qos) {
  for (const Qos& q : cluster_.qos_) {
    if (q.name == qos.name) return InvalidArgument("qos '" + qos.name + "' is defined twice");
    if (q.level == qos.level) {
      return InvalidArgument("qos '" + qos.name + "' has the level of qos '" + q.name + "' (" +
                             std::to_string(q.level) + ")");
    }
  }
  if (qos.usage_factor < 0) return InvalidArgument("qos '" + qos.name + "': negative usage_factor");
  if (qos.priority < 0) return InvalidArgument("qos '" + qos.name + "': negative priority");
  if (qos.grace_time < kQosGraceUnset || qos.grace_time >= kInfiniteTime) {
    return InvalidArgument("qos '" + qos.name + "': grace_time must be finite and not negative");
  }
  cluster_.qos_.push_back(std::move(qos));
  return Status::Ok();
}

const Qos* Cluster::FindQos(int level) const {
  for (const Qos& q : qos_) {
    if (q.level == level) return &q;
  }
  return nullptr;
}

int Cluster::QosLevel(std::string_view name, bool* unknown) const {
  auto same = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) ==
                    std::tolower(static_cast<unsigned char>(y));
           });
  };
  if (unknown != nullptr) *unknown = false;
  if (name.empty()) return 0;
  for (const Qos& q : qos_) {
    if (same(q.name, name)) return q.level;
  }
  if (unknown != nullptr) *unknown = !same(name, "normal");
  return 0;
}

Result<Cluster> ClusterBuilder::Build() && {
  if (!open_.empty()) {
    return InvalidArgument("domain '" + cluster_.domains_[open_.back()].name + "' is never closed");
  }
  if (cluster_.nodes_.empty())
    return InvalidArgument("cluster '" + cluster_.name_ + "' has no nodes");
  if (cluster_.gpu_types_.empty()) return InvalidArgument("cluster has no GPU types");
  std::unordered_set<std::string> names;
  for (const Node& n : cluster_.nodes_) {
    if (!names.insert(n.name).second)
      return InvalidArgument("node name '" + n.name + "' is used twice");
  }
  // The account tree: every parent is a team, and following parents always reaches the root.
  for (const Account& a : cluster_.accounts_) {
    const Account* at = &a;
    for (size_t steps = 0; at != nullptr && !at->parent.empty(); ++steps) {
      if (cluster_.FindTeam(at->parent) < 0) {
        return InvalidArgument("team '" + at->team + "': parent '" + at->parent +
                               "' is not a team");
      }
      if (steps >= cluster_.accounts_.size()) {
        return InvalidArgument("team '" + a.team + "': its parents form a cycle");
      }
      at = cluster_.FindAccount(at->parent);
    }
  }
  for (const Qos& q : cluster_.qos_) {
    for (const std::string& victim : q.preempt) {
      const bool known = std::any_of(cluster_.qos_.begin(), cluster_.qos_.end(),
                                     [&](const Qos& o) { return o.name == victim; });
      if (!known) {
        return InvalidArgument("qos '" + q.name + "': preempt names '" + victim +
                               "', which is not a qos");
      }
    }
  }
  GANTRY_RETURN_IF_ERROR(BuildPower());
  return std::move(cluster_);
}

// Resolves the domain and level caps into PowerSpec::domain_cap_watts and checks the model: a
// cap below what its part of the cluster draws with every GPU idle is broken from the start.
Status ClusterBuilder::BuildPower() {
  PowerSpec& p = cluster_.power_;
  const auto watts = [](double w) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g W", w);
    return std::string(buf);
  };
  if (!(p.capped_watts_factor > 0 && p.capped_watts_factor <= 1)) {
    return InvalidArgument("power: the capped clock's watts factor must be in (0, 1]");
  }
  if (!(p.capped_slowdown >= 1)) {
    return InvalidArgument("power: the capped clock's slowdown must be at least 1");
  }
  if (p.cap_watts < 0 || p.node_watts < 0) {
    return InvalidArgument("power: caps and node watts must not be negative");
  }
  p.domain_cap_watts.clear();
  std::vector<double> caps(cluster_.domains_.size(), 0);
  const auto cap = [&](DomainIndex d, double w) {
    caps[d] = caps[d] > 0 ? std::min(caps[d], w) : w;
  };
  for (const auto& [name, w] : domain_caps_) {
    if (w <= 0) return InvalidArgument("power: the cap of domain '" + name + "' must be above 0");
    bool found = false;
    for (size_t d = 0; d < caps.size(); ++d) {
      if (cluster_.domains_[d].name == name) {
        cap(static_cast<DomainIndex>(d), w);
        found = true;
      }
    }
    if (!found) return InvalidArgument("power: no domain is named '" + name + "'");
  }
  for (const auto& [level, w] : level_caps_) {
    if (w <= 0) return InvalidArgument("power: the cap of level '" + level + "' must be above 0");
    const auto it = std::find(cluster_.levels_.begin(), cluster_.levels_.end(), level);
    if (it == cluster_.levels_.end())
      return InvalidArgument("power: no level is named '" + level + "'");
    const int l = static_cast<int>(it - cluster_.levels_.begin());
    for (size_t d = 0; d < caps.size(); ++d) {
      if (cluster_.domains_[d].level == l) cap(static_cast<DomainIndex>(d), w);
    }
  }
  for (size_t d = 0; d < caps.size(); ++d) {
    if (caps[d] <= 0) continue;
    const double idle = cluster_.IdleWatts(static_cast<DomainIndex>(d));
    if (caps[d] < idle) {
      return InvalidArgument("power: the cap of domain '" + cluster_.domains_[d].name + "' (" +
                             watts(caps[d]) + ") is below what it draws idle (" + watts(idle) +
                             ")");
    }
    p.domain_cap_watts = caps;
  }
  if (p.cap_watts > 0 && p.cap_watts < cluster_.IdleWatts()) {
    return InvalidArgument("power: the cluster's cap (" + watts(p.cap_watts) +
                           ") is below what it draws idle (" + watts(cluster_.IdleWatts()) + ")");
  }
  return Status::Ok();
}

void WaterFill(double capacity, const std::vector<double>& cap, const std::vector<double>& w,
               std::vector<double>* out, std::vector<int>* order) {
  const size_t n = cap.size();
  out->assign(n, 0);
  order->clear();
  for (size_t t = 0; t < n; ++t) {
    if (cap[t] > 0) order->push_back(static_cast<int>(t));
  }
  // Teams saturate in order of cap/weight; each round gives everyone left the same level.
  std::sort(order->begin(), order->end(),
            [&](int a, int b) { return cap[a] / w[a] < cap[b] / w[b]; });
  double weight_left = 0;
  for (int t : *order) weight_left += w[t];
  double left = capacity;
  for (int t : *order) {
    const double level = left / weight_left;
    const double give = std::min(cap[t], level * w[t]);
    (*out)[t] = give;
    left -= give;
    weight_left -= w[t];
  }
}

}  // namespace gantry
