// Writes a cluster spec from what Slurm reports; see gantry/slurm/import.h.
#include "gantry/slurm/import.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gantry/cluster/cluster.h"

namespace gantry::slurm {
namespace {

// YAML double-quoted scalar: names from Slurm may look like numbers or hold ':'.
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Level names, innermost first; Slurm's switches have levels, not names.
std::string LevelName(int level) {
  static const char* kNames[] = {"leaf", "spine", "core"};
  return level < 3 ? kNames[level] : "level" + std::to_string(level);
}

}  // namespace

Result<SlurmSnapshot> ReadSnapshot(const SlurmClient& client, const ImportOptions& options) {
  SlurmSnapshot s;
  GANTRY_ASSIGN_OR_RETURN(s.cluster_name, client.ClusterName());
  GANTRY_ASSIGN_OR_RETURN(s.nodes, client.Nodes());
  GANTRY_ASSIGN_OR_RETURN(s.switches, client.Topology());
  if (options.teams) {
    GANTRY_ASSIGN_OR_RETURN(s.accounts, client.Accounts());
    GANTRY_ASSIGN_OR_RETURN(s.qos, client.QosList());
  }
  return s;
}

std::vector<int> QosLevels(const std::vector<SlurmQos>& qos) {
  std::vector<size_t> order(qos.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (qos[a].priority != qos[b].priority) return qos[a].priority < qos[b].priority;
    return qos[a].name < qos[b].name;
  });
  std::vector<int> levels(qos.size());
  for (size_t rank = 0; rank < order.size(); ++rank) levels[order[rank]] = static_cast<int>(rank);
  return levels;
}

Result<std::string> WriteClusterSpec(const SlurmSnapshot& snap, const ImportOptions& options) {
  if (snap.nodes.empty()) return InvalidArgument("Slurm reports no nodes");
  // Nodes by name, once each (sinfo may list a node once per partition).
  std::map<std::string, const SlurmNode*> by_name;
  std::vector<const SlurmNode*> nodes;
  for (const SlurmNode& n : snap.nodes) {
    if (by_name.emplace(n.name, &n).second) nodes.push_back(&n);
  }

  // GPU types in order of first appearance; untyped GRES becomes the type "gpu".
  std::vector<std::string> types;
  auto type_of = [](const SlurmNode& n) {
    return n.gpu_type.empty() ? std::string("gpu") : n.gpu_type;
  };
  for (const SlurmNode* n : nodes) {
    std::set<std::string> distinct;
    for (const GresGpus& g : n->gres_gpus) distinct.insert(g.type);
    if (distinct.size() > 1) {
      return InvalidArgument("node " + n->name +
                             " has GPUs of several types; a Gantry node has one GPU type");
    }
    if (n->gpus == 0) continue;
    if (std::find(types.begin(), types.end(), type_of(*n)) == types.end()) {
      types.push_back(type_of(*n));
    }
  }
  if (types.empty()) types.push_back("gpu");  // a CPU-only cluster still needs one type

  std::ostringstream y;
  const std::string name = options.name.empty() ? snap.cluster_name : options.name;
  y << "# Imported from the Slurm cluster " << snap.cluster_name
    << " by gantry cluster import --from-slurm (docs/formats/cluster.md).\n";
  y << "name: " << Quote(name) << "\n";

  y << "gpu_types:\n";
  for (const std::string& t : types) {
    const GpuType* known = nullptr;
    for (const GpuType& k : KnownGpuTypes()) {
      if (Lower(k.name) == Lower(t)) known = &k;
    }
    if (known != nullptr) {
      y << "  - {name: " << Quote(t) << ", memory_gb: " << known->memory_gb
        << ", idle_watts: " << known->idle_watts << ", busy_watts: " << known->busy_watts << "}\n";
    } else {
      y << "  - {name: " << Quote(t)
        << ", memory_gb: 0, idle_watts: 0, busy_watts: 0}  # unknown to Gantry: fill in\n";
    }
  }

  auto node_line = [&](const SlurmNode& n, const std::string& indent) {
    y << indent << "- {name: " << Quote(n.name)
      << ", gpu_type: " << Quote(n.gpus == 0 ? types[0] : type_of(n)) << ", gpus: " << n.gpus
      << ", cpus: " << n.cpus << ", memory_gb: " << n.memory_mb / 1024 << "}\n";
  };

  if (snap.switches.empty()) {
    y << "nodes:\n";
    for (const SlurmNode* n : nodes) node_line(*n, "  ");
  } else {
    std::map<std::string, const SlurmSwitch*> sw;
    std::set<std::string> children;
    for (const SlurmSwitch& s : snap.switches) {
      if (!sw.emplace(s.name, &s).second) {
        return InvalidArgument("topology: switch " + s.name + " is defined twice");
      }
      for (const std::string& c : s.switches) {
        if (!children.insert(c).second) {
          return InvalidArgument("topology: switch " + c +
                                 " is under two switches; Gantry's topology is a tree");
        }
      }
    }
    // A switch's level: 0 for leaf switches (they hold nodes), else one above its highest child.
    std::map<std::string, int> level;
    std::function<Result<int>(const std::string&, int)> level_of = [&](const std::string& s,
                                                                       int depth) -> Result<int> {
      if (depth > static_cast<int>(sw.size())) {
        return InvalidArgument("topology: switch " + s + " is inside a cycle");
      }
      auto it = sw.find(s);
      if (it == sw.end()) return InvalidArgument("topology: unknown switch " + s);
      if (auto l = level.find(s); l != level.end()) return l->second;
      int lv = 0;
      for (const std::string& c : it->second->switches) {
        GANTRY_ASSIGN_OR_RETURN(int cl, level_of(c, depth + 1));
        lv = std::max(lv, cl + 1);
      }
      level[s] = lv;
      return lv;
    };
    int max_level = 0;
    for (const SlurmSwitch& s : snap.switches) {
      GANTRY_ASSIGN_OR_RETURN(int lv, level_of(s.name, 0));
      max_level = std::max(max_level, lv);
    }
    y << "levels: [";
    for (int l = 0; l <= max_level; ++l) y << (l ? ", " : "") << LevelName(l);
    y << "]\n";
    y << "topology:\n";
    std::set<std::string> placed;
    std::function<Status(const SlurmSwitch&, const std::string&)> emit =
        [&](const SlurmSwitch& s, const std::string& indent) -> Status {
      y << indent << "- name: " << Quote(s.name) << "\n";
      y << indent << "  level: " << LevelName(level[s.name]) << "\n";
      if (!s.switches.empty()) {
        y << indent << "  children:\n";
        for (const std::string& c : s.switches) {
          GANTRY_RETURN_IF_ERROR(emit(*sw[c], indent + "    "));
        }
        return Status::Ok();
      }
      y << indent << "  nodes:\n";
      for (const std::string& n : s.nodes) {
        auto it = by_name.find(n);
        if (it == by_name.end()) {
          return InvalidArgument("topology: switch " + s.name + " names unknown node " + n);
        }
        if (!placed.insert(n).second) {
          return InvalidArgument("topology: node " + n +
                                 " is under two leaf switches; Gantry's topology is a tree");
        }
        node_line(*it->second, indent + "    ");
      }
      return Status::Ok();
    };
    for (const SlurmSwitch& s : snap.switches) {
      if (children.count(s.name) == 0) GANTRY_RETURN_IF_ERROR(emit(s, "  "));
    }
    // Nodes on no switch (Slurm allows it; they get no topology-aware placement there either).
    std::vector<const SlurmNode*> loose;
    for (const SlurmNode* n : nodes) {
      if (placed.count(n->name) == 0) loose.push_back(n);
    }
    if (!loose.empty()) {
      y << "  - name: \"no-switch\"  # nodes on no switch of topology.conf\n";
      y << "    level: leaf\n";
      y << "    nodes:\n";
      for (const SlurmNode* n : loose) node_line(*n, "      ");
    }
  }

  if (!snap.accounts.empty()) {
    y << "teams:  # Slurm accounts; quota_gpus from GrpTRES gres/gpu, shares from Fairshare\n";
    for (const SlurmAccount& a : snap.accounts) {
      y << "  - {name: " << Quote(a.name);
      if (a.gpu_limit >= 0) y << ", quota_gpus: " << a.gpu_limit;
      if (a.fairshare != 1) y << ", shares: " << a.fairshare;
      y << "}\n";
    }
  }
  if (!snap.qos.empty()) {
    y << "qos:  # Slurm's QOS (sacctmgr show qos); level: rank by Priority from 0 (ties by name)\n";
    const std::vector<int> levels = QosLevels(snap.qos);
    for (size_t i = 0; i < snap.qos.size(); ++i) {
      const SlurmQos& q = snap.qos[i];
      y << "  - {name: " << Quote(q.name) << ", level: " << levels[i]
        << ", priority: " << q.priority;
      if (q.usage_factor != 1.0) y << ", usage_factor: " << q.usage_factor;
      // GraceTime 0 is Slurm's default: left out, so the profile's grace_time still applies.
      if (q.grace_time > 0) y << ", grace_time: " << q.grace_time;
      if (!q.preempt.empty()) {
        y << ", preempt: [";
        for (size_t k = 0; k < q.preempt.size(); ++k) y << (k ? ", " : "") << Quote(q.preempt[k]);
        y << "]";
      }
      y << "}\n";
    }
  }
  return y.str();
}

}  // namespace gantry::slurm
