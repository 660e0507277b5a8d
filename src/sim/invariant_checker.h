// Private to sim/: an independent check of the engine's decisions, run after every event in
// test builds. It keeps its own per-node and per-team bookkeeping instead of trusting the
// engine's, so a bookkeeping bug in the engine shows up as a disagreement. Besides starts and
// finishes it follows what a live driver tells the engine: cancels, node drain/down/up (no new
// start on an unavailable node; Down must end exactly the jobs running there) and adopted jobs.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/status.h"
#include "gantry/sched/free_index.h"
#include "gantry/sched/plugin.h"
#include "gantry/workload/job.h"

namespace gantry {

// Independent bookkeeping of what is allocated, to check the engine's decisions.
class InvariantChecker {
 public:
  InvariantChecker(const Cluster& c, const std::vector<Team>& teams)
      : cluster_(c),
        teams_(teams),
        used_(c.nodes().size(), 0),
        team_used_(teams.size(), 0),
        unavailable_(c.nodes().size(), false) {}

  Status OnStart(const Job& job, Time now, const Placement& p) {
    return Book(job, now, p, /*check_quota=*/true, /*allow_unavailable=*/false);
  }

  // A job the driver found running at restart: the same checks, except quotas (what runs,
  // runs) and that a drained node may hold it.
  Status OnAdopt(const Job& job, Time start, const Placement& p) {
    return Book(job, start, p, /*check_quota=*/false, /*allow_unavailable=*/true);
  }

  Status OnCancelRunning(const Job& job, const Placement& p) {
    OnFinish(job, p);
    return Status::Ok();
  }

  void OnDrain(NodeIndex n) { unavailable_[n] = true; }
  void OnUp(NodeIndex n) { unavailable_[n] = false; }
  // The engine said Down(n) ended `interrupted`: that must be exactly the jobs running on n.
  Status OnDown(NodeIndex n, const std::vector<const Job*>& interrupted,
                const std::vector<Placement>& placements) {
    unavailable_[n] = true;
    std::vector<std::pair<JobIndex, std::string>> expected, got;
    for (const auto& [index, run] : running_) {
      if (std::find(run.nodes.begin(), run.nodes.end(), n) != run.nodes.end()) {
        expected.emplace_back(index, run.id);
      }
    }
    for (size_t i = 0; i < interrupted.size(); ++i) {
      got.emplace_back(interrupted[i]->index, interrupted[i]->id);
      OnFinish(*interrupted[i], placements[i]);
    }
    std::sort(got.begin(), got.end());
    if (expected != got) {
      std::string e, g;
      for (const auto& x : expected) e += " " + x.second;
      for (const auto& x : got) g += " " + x.second;
      return Internal("node " + cluster_.nodes()[n].name + " went down: jobs running there:" + e +
                      "; the engine ended:" + g);
    }
    return Status::Ok();
  }

  // Every node: the engine's free GPUs equal ours (0 on a drained or down node).
  Status CheckAllFree(const FreeIndex& free) const {
    for (NodeIndex n = 0; n < static_cast<NodeIndex>(used_.size()); ++n) {
      GANTRY_RETURN_IF_ERROR(CheckFree({{n, 1}}, free));
    }
    return Status::Ok();
  }

 private:
  Status Book(const Job& job, Time now, const Placement& p, bool check_quota,
              bool allow_unavailable) {
    const std::string who = "job " + job.id + " at t=" + std::to_string(now) + ": ";
    if (now < job.submit)
      return Internal(who + "started before its submit time " + std::to_string(job.submit));
    int total = 0;
    std::vector<NodeIndex> seen;
    for (const Slot& s : p) {
      if (s.node < 0 || s.node >= static_cast<NodeIndex>(cluster_.nodes().size()) || s.gpus <= 0) {
        return Internal(who + "bad slot");
      }
      const Node& node = cluster_.nodes()[s.node];
      if (unavailable_[s.node] && !allow_unavailable) {
        return Internal(who + "started on node " + node.name + ", which is drained or down");
      }
      if (!((job.gpu_type_mask >> node.gpu_type) & 1u)) {
        return Internal(who + "placed on node " + node.name + " of a GPU type it did not allow");
      }
      if (used_[s.node] + s.gpus > node.gpus) {
        return Internal(who + "node " + node.name +
                        " double-booked: " + std::to_string(used_[s.node]) + " + " +
                        std::to_string(s.gpus) + " > " + std::to_string(node.gpus));
      }
      used_[s.node] += s.gpus;
      total += s.gpus;
      seen.push_back(s.node);
    }
    std::sort(seen.begin(), seen.end());
    if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) {
      return Internal(who + "placement names a node twice");
    }
    if (total != job.gpus) {
      return Internal(who + "gang not whole: got " + std::to_string(total) + " of " +
                      std::to_string(job.gpus) + " GPUs");
    }
    if (job.nodes > 0 && job.gpus_per_node > 0) {
      if (static_cast<int>(p.size()) != job.nodes)
        return Internal(who + "wrong node count for its shape");
      for (const Slot& s : p) {
        if (s.gpus != job.gpus_per_node) return Internal(who + "wrong GPUs per node for its shape");
      }
    }
    team_used_[job.team] += job.gpus;
    running_[job.index] = {job.id, seen};
    const int q = teams_[job.team].quota_gpus;
    if (check_quota && q != kNoQuota && team_used_[job.team] > q) {
      return Internal(who + "team " + teams_[job.team].name + " over quota: " +
                      std::to_string(team_used_[job.team]) + " > " + std::to_string(q));
    }
    return Status::Ok();
  }

 public:
  // After all of a cycle's starts: the engine's free GPUs on the nodes of `p` must match ours.
  Status CheckFree(const Placement& p, const FreeIndex& free) const {
    for (const Slot& s : p) {
      const int want = unavailable_[s.node] ? 0 : cluster_.nodes()[s.node].gpus - used_[s.node];
      if (free.free(s.node) != want) {
        return Internal("engine's free index says node " + cluster_.nodes()[s.node].name + " has " +
                        std::to_string(free.free(s.node)) + " free GPUs, not " +
                        std::to_string(want));
      }
    }
    return Status::Ok();
  }

  void OnFinish(const Job& job, const Placement& p) {
    for (const Slot& s : p) used_[s.node] -= s.gpus;
    team_used_[job.team] -= job.gpus;
    running_.erase(job.index);
  }

 private:
  const Cluster& cluster_;
  const std::vector<Team>& teams_;
  std::vector<int> used_;
  std::vector<int> team_used_;
  std::vector<bool> unavailable_;  // drained or down
  struct Running {
    std::string id;
    std::vector<NodeIndex> nodes;
  };
  std::map<JobIndex, Running> running_;  // ordered: Down's expected set comes out sorted
};

// Independent per-device bookkeeping of GPU shares (the packing experiment, packing.h): no
// device may ever hold more than its capacity (1000 milli, or its k MIG-like slices), and the
// placer's own view of what is free must agree with it.
class DeviceCapacityChecker {
 public:
  // `capacity`: units per device, per node.
  DeviceCapacityChecker(const Cluster& c, std::vector<int> capacity)
      : capacity_(std::move(capacity)), used_(c.nodes().size()) {
    for (size_t n = 0; n < used_.size(); ++n) used_[n].assign(c.nodes()[n].gpus, 0);
  }

  // `units` of device `d` of node `n` given to `job`.
  Status OnTake(const std::string& job, NodeIndex n, int d, int units) {
    if (n < 0 || static_cast<size_t>(n) >= used_.size() || d < 0 ||
        static_cast<size_t>(d) >= used_[n].size()) {
      return Internal("job " + job + ": no device " + std::to_string(d) + " on node " +
                      std::to_string(n));
    }
    if (units <= 0 || used_[n][d] + units > capacity_[n]) {
      return Internal("job " + job + ": device " + std::to_string(d) + " of node " +
                      std::to_string(n) + " would hold " + std::to_string(used_[n][d] + units) +
                      " of " + std::to_string(capacity_[n]) + " units");
    }
    used_[n][d] += units;
    return Status::Ok();
  }

  void OnGive(NodeIndex n, int d, int units) { used_[n][d] -= units; }

  // The placer's free units per device of node `n` must be capacity less what was taken.
  Status Agrees(NodeIndex n, const std::vector<int>& free) const {
    for (size_t d = 0; d < used_[n].size(); ++d) {
      if (d >= free.size() || free[d] != capacity_[n] - used_[n][d]) {
        return Internal("node " + std::to_string(n) + " device " + std::to_string(d) +
                        ": the placer has " + (d < free.size() ? std::to_string(free[d]) : "none") +
                        " units free, the checker " + std::to_string(capacity_[n] - used_[n][d]));
      }
    }
    return Status::Ok();
  }

 private:
  std::vector<int> capacity_;  // per node
  std::vector<std::vector<int>> used_;
};

}  // namespace gantry
