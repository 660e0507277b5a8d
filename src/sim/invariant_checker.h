// Private to sim/: an independent check of the engine's decisions, run after every event in
// test builds. It keeps its own per-node and per-team bookkeeping instead of trusting the
// engine's, so a bookkeeping bug in the engine shows up as a disagreement. Besides starts and
// finishes it follows what a live driver tells the engine: cancels, node drain/down/up (no new
// start on an unavailable node; Down must end exactly the jobs running there) and adopted jobs.
// Fractional jobs (gpu_milli 1..999) share GPUs: it books each shared GPU the engine names as
// one busy GPU of its node from its first share to the end of its last, so no whole-GPU job can
// land on it unnoticed (the node would be over its GPUs), and checks that no shared GPU holds
// more than its capacity (1000 milli, or its type's MIG-like slices, each share rounded up to
// whole slices), computed here from the cluster spec rather than taken from the engine.
// Quotas are checked in milli-GPUs, a job holding its MilliGpus (a share its gpu_milli, a whole
// GPU 1000): a team's running jobs never hold more than quota_gpus x 1000, nor, under kueue, a
// ClusterQueue more than (nominal + borrowing limit) x 1000 of a flavor, nor a cohort's queues
// more beyond their guaranteed parts than they lend.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/status.h"
#include "gantry/sched/engine.h"
#include "gantry/sched/free_index.h"
#include "gantry/sched/plugin.h"
#include "gantry/workload/job.h"

namespace gantry {

// Independent bookkeeping of what is allocated, to check the engine's decisions.
class InvariantChecker {
 public:
  // With `kueue_quotas`, quotas are the teams' ClusterQueue settings (Team::queue: nominal
  // quota per flavor, borrowing and lending limits, cohorts) rather than hard per-team caps.
  InvariantChecker(const Cluster& c, const std::vector<Team>& teams, bool kueue_quotas = false)
      : cluster_(c),
        teams_(teams),
        used_(c.nodes().size(), 0),
        team_used_(teams.size(), 0),
        unavailable_(c.nodes().size(), false),
        kueue_(kueue_quotas) {
    if (kueue_) BuildKueueTree();
    if (c.power().has_caps()) BuildPower();
  }

  // A job the engine reports pending after a cycle has a reason a waiting job can have, and
  // its start estimate, when it has one, is neither in the past nor before its submit.
  static Status CheckPending(const Job& job, const JobStatus& st, Time now) {
    if (st.phase != JobStatus::Phase::kPending) return Status::Ok();
    switch (st.reason) {
      case Reason::kPriority:
      case Reason::kResources:
      case Reason::kQuota:
      case Reason::kCohort:
      case Reason::kReservation:
      case Reason::kTopology:
      case Reason::kFragmentation:
      case Reason::kPower:
      case Reason::kPreempting:  // waiting out its victims' GraceTime
        break;
      default:
        return Internal("job " + job.id + " is pending with reason " + ReasonName(st.reason));
    }
    if (st.reserved_start < kInfiniteTime &&
        (st.reserved_start < now || st.reserved_start < job.submit)) {
      return Internal("job " + job.id + " is pending at t=" + std::to_string(now) +
                      " with a start estimate in the past (t=" + std::to_string(st.reserved_start) +
                      ")");
    }
    return Status::Ok();
  }

  // `shared_gpu`: the engine's shared GPU of a share (Engine::shared_gpu), -1 for other jobs.
  Status OnStart(const Job& job, Time now, const Placement& p, int32_t shared_gpu = -1) {
    return Book(job, now, p, /*check_quota=*/true, /*allow_unavailable=*/false, shared_gpu);
  }

  // A job the driver found running at restart: the same checks, except quotas (what runs,
  // runs) and that a drained node may hold it.
  Status OnAdopt(const Job& job, Time start, const Placement& p, int32_t shared_gpu = -1) {
    return Book(job, start, p, /*check_quota=*/false, /*allow_unavailable=*/true, shared_gpu);
  }

  // Units a share of `milli` takes on a GPU of type `t`, and what one such GPU holds.
  int ShareUnits(GpuTypeIndex t, int milli) const {
    const int slices = cluster_.gpu_types()[t].mig_slices;
    return slices > 0 ? (milli * slices + 999) / 1000 : milli;
  }
  int ShareCapacity(GpuTypeIndex t) const {
    const int slices = cluster_.gpu_types()[t].mig_slices;
    return slices > 0 ? slices : 1000;
  }

  Status OnCancelRunning(const Job& job, const Placement& p) {
    OnFinish(job, p);
    return Status::Ok();
  }

  // GPUs the engine books for a preemptor waiting for its signalled victims (GraceTime): no
  // job runs there, but they are not free. sign -1 gives them back (before it starts).
  void Hold(const Placement& p, int sign) {
    for (const Slot& s : p) used_[s.node] += sign * s.gpus;
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
              bool allow_unavailable, int32_t shared_gpu) {
    const std::string who = "job " + job.id + " at t=" + std::to_string(now) + ": ";
    if (now < job.submit)
      return Internal(who + "started before its submit time " + std::to_string(job.submit));
    if (IsShare(job) || shared_gpu >= 0) {
      return BookShare(job, who, p, check_quota, allow_unavailable, shared_gpu);
    }
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
    running_[job.index] = {job.id, seen, -1};
    if (power_) {
      AddPower(p, +1);
      if (check_quota) GANTRY_RETURN_IF_ERROR(CheckPower(who));
    }
    return BookQuota(job, who, p, check_quota);
  }

  // The team's (and under kueue its flavor's) milli-GPUs, then the quota rules.
  Status BookQuota(const Job& job, const std::string& who, const Placement& p, bool check_quota) {
    team_used_[job.team] += MilliGpus(job);
    if (kueue_) {
      const int f = FlavorOf(job.team, p);
      running_[job.index].flavor = f;
      if (f >= 0) kueue_used_[job.team][f] += MilliGpus(job);
      if (check_quota) GANTRY_RETURN_IF_ERROR(CheckKueue(who));
      return Status::Ok();
    }
    const int q = teams_[job.team].quota_gpus;
    if (check_quota && q != kNoQuota && team_used_[job.team] > GpusToMilli(q)) {
      return Internal(who + "team " + teams_[job.team].name + " over quota: " +
                      MilliGpusText(team_used_[job.team]) + " > " + std::to_string(q) + " GPUs");
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

  // Every team: the engine's running milli-GPUs (Engine::team_running_milli) equal ours.
  Status CheckTeamUsage(const Engine& engine) const {
    for (size_t t = 0; t < team_used_.size(); ++t) {
      const int64_t theirs = engine.team_running_milli(static_cast<int>(t));
      if (theirs != team_used_[t]) {
        return Internal("engine says team " + teams_[t].name + " runs " + MilliGpusText(theirs) +
                        " GPUs, not " + MilliGpusText(team_used_[t]));
      }
    }
    return Status::Ok();
  }

  void OnFinish(const Job& job, const Placement& p) {
    auto it = running_.find(job.index);
    if (it != running_.end() && it->second.shared_gpu >= 0) {
      SharedGpu& g = shared_[it->second.shared_gpu];
      g.units -= ShareUnits(cluster_.nodes()[g.node].gpu_type, job.gpu_milli);
      if (--g.shares == 0) {
        // The last share ended: the GPU is whole (and idle) again.
        used_[g.node] -= 1;
        if (power_) AddPower({{g.node, 1}}, -1);
        shared_.erase(it->second.shared_gpu);
      }
    } else {
      for (const Slot& s : p) used_[s.node] -= s.gpus;
      if (power_) AddPower(p, -1);
    }
    team_used_[job.team] -= MilliGpus(job);
    if (it != running_.end() && it->second.flavor >= 0) {
      kueue_used_[job.team][it->second.flavor] -= MilliGpus(job);
    }
    running_.erase(job.index);
  }

 private:
  // Kueue quotas, checked from first principles rather than with the plugin's recursion: per
  // ClusterQueue and flavor, usage <= nominal + borrowing_limit; per root cohort and flavor,
  // what its CQs use beyond their guaranteed part (nominal - lending_limit) fits in what they
  // lend (nominal less the guaranteed part). Intermediate cohorts hold no quota of their own,
  // so the root's sum is the whole constraint above the CQs.
  struct KueueFlavor {
    uint32_t mask;
    int nominal, borrowing_limit, guaranteed;  // GPUs, as in the spec
    std::string name;
  };
  void BuildKueueTree() {
    std::map<std::string, std::string> parent;
    for (const Cohort& c : cluster_.cohorts()) parent[c.name] = c.parent;
    kueue_flavors_.resize(teams_.size());
    kueue_used_.resize(teams_.size());
    kueue_root_.assign(teams_.size(), "");
    for (size_t t = 0; t < teams_.size(); ++t) {
      const Team& team = teams_[t];
      std::vector<FlavorQuota> quotas = team.queue.quotas;
      if (quotas.empty() && team.quota_gpus != kNoQuota) {
        quotas.push_back({kAnyFlavor, team.quota_gpus, kNoQuota, kNoQuota});
      }
      for (const FlavorQuota& q : quotas) {
        const GpuTypeIndex type = q.flavor == kAnyFlavor ? -1 : cluster_.FindGpuType(q.flavor);
        const uint32_t mask = type < 0 ? kAnyGpuType : 1u << type;
        const int guaranteed =
            q.lending_limit == kNoQuota ? 0 : std::max(0, q.nominal - q.lending_limit);
        kueue_flavors_[t].push_back(
            {mask, q.nominal, q.borrowing_limit, guaranteed, type < 0 ? kAnyFlavor : q.flavor});
      }
      kueue_used_[t].assign(kueue_flavors_[t].size(), 0);
      std::string root = team.queue.cohort;
      for (size_t steps = 0; !root.empty() && steps <= parent.size(); ++steps) {
        auto it = parent.find(root);
        if (it == parent.end() || it->second.empty()) break;
        root = it->second;
      }
      kueue_root_[t] = root;
    }
  }
  // Power caps: the draw of the cluster and of every capped domain, in whole milliwatts, from
  // the spec's model (cluster.h PowerSpec) with this checker's own sums: idle draw of every node
  // below, plus busy-above-idle watts of the GPUs in use there.
  static int64_t Mw(double watts) { return std::llround(watts * 1000.0); }
  void BuildPower() {
    power_ = true;
    const PowerSpec& spec = cluster_.power();
    const auto node_idle = [&](const Node& n) {
      return Mw(spec.node_watts) + n.gpus * Mw(cluster_.gpu_types()[n.gpu_type].idle_watts);
    };
    for (const Node& n : cluster_.nodes()) cluster_mw_ += node_idle(n);
    cluster_cap_mw_ = spec.cap_watts > 0 ? Mw(spec.cap_watts) : 0;
    domain_mw_.assign(cluster_.domains().size(), 0);
    domain_cap_mw_.assign(cluster_.domains().size(), 0);
    for (size_t d = 0; d < cluster_.domains().size(); ++d) {
      const Domain& dom = cluster_.domains()[d];
      for (NodeIndex n = dom.first_node; n < dom.end_node; ++n) {
        domain_mw_[d] += node_idle(cluster_.nodes()[n]);
      }
      if (!spec.domain_cap_watts.empty() && spec.domain_cap_watts[d] > 0) {
        domain_cap_mw_[d] = Mw(spec.domain_cap_watts[d]);
      }
    }
  }
  void AddPower(const Placement& p, int sign) {
    for (const Slot& s : p) {
      const Node& node = cluster_.nodes()[s.node];
      const int64_t added = sign * s.gpus *
                            (Mw(cluster_.BusyWatts(node.gpu_type)) -
                             Mw(cluster_.gpu_types()[node.gpu_type].idle_watts));
      cluster_mw_ += added;
      for (DomainIndex d = node.domain; d >= 0; d = cluster_.domains()[d].parent) {
        domain_mw_[d] += added;
      }
    }
  }
  // Every cap, after a start: O(domains), in test builds only.
  Status CheckPower(const std::string& who) const {
    if (cluster_cap_mw_ > 0 && cluster_mw_ > cluster_cap_mw_) {
      return Internal(who + "the cluster draws " + std::to_string(cluster_mw_) +
                      " mW, over its cap of " + std::to_string(cluster_cap_mw_) + " mW");
    }
    for (size_t d = 0; d < domain_mw_.size(); ++d) {
      if (domain_cap_mw_[d] > 0 && domain_mw_[d] > domain_cap_mw_[d]) {
        return Internal(who + "domain " + cluster_.domains()[d].name + " draws " +
                        std::to_string(domain_mw_[d]) + " mW, over its cap of " +
                        std::to_string(domain_cap_mw_[d]) + " mW");
      }
    }
    return Status::Ok();
  }

  // A share: one slot of one GPU on a shared GPU the engine named; that GPU stays on one node,
  // counts as one busy GPU of it while it holds shares, and never holds more than its capacity.
  Status BookShare(const Job& job, const std::string& who, const Placement& p, bool check_quota,
                   bool allow_unavailable, int32_t shared_gpu) {
    if (!IsShare(job))
      return Internal(who + "a whole-GPU job placed on shared GPU " + std::to_string(shared_gpu));
    if (shared_gpu < 0) return Internal(who + "a share placed on no shared GPU");
    if (p.size() != 1 || p[0].gpus != 1 || p[0].node < 0 ||
        p[0].node >= static_cast<NodeIndex>(cluster_.nodes().size())) {
      return Internal(who + "a share's placement is not one GPU on one node");
    }
    const NodeIndex n = p[0].node;
    const Node& node = cluster_.nodes()[n];
    if (unavailable_[n] && !allow_unavailable) {
      return Internal(who + "started on node " + node.name + ", which is drained or down");
    }
    if (!((job.gpu_type_mask >> node.gpu_type) & 1u)) {
      return Internal(who + "placed on node " + node.name + " of a GPU type it did not allow");
    }
    SharedGpu& g = shared_[shared_gpu];
    if (g.shares == 0) {
      if (used_[n] + 1 > node.gpus) {
        return Internal(who + "node " + node.name + " double-booked: shared GPU " +
                        std::to_string(shared_gpu) + " opened on it with " +
                        std::to_string(used_[n]) + " of " + std::to_string(node.gpus) +
                        " GPUs in use");
      }
      g.node = n;
      used_[n] += 1;
      if (power_) AddPower({{n, 1}}, +1);
    } else if (g.node != n) {
      return Internal(who + "shared GPU " + std::to_string(shared_gpu) + " is on node " +
                      cluster_.nodes()[g.node].name + ", not " + node.name);
    }
    const int units = ShareUnits(node.gpu_type, job.gpu_milli);
    const int capacity = ShareCapacity(node.gpu_type);
    if (g.units + units > capacity) {
      return Internal(who + "shared GPU " + std::to_string(shared_gpu) + " on node " + node.name +
                      " over capacity: " + std::to_string(g.units) + " + " + std::to_string(units) +
                      " > " + std::to_string(capacity) + " units");
    }
    g.units += units;
    ++g.shares;
    running_[job.index] = {job.id, {n}, -1, shared_gpu};
    if (power_ && check_quota) GANTRY_RETURN_IF_ERROR(CheckPower(who));
    return BookQuota(job, who, p, check_quota);
  }

  int FlavorOf(int team, const Placement& p) const {
    if (p.empty()) return -1;
    const uint32_t type = 1u << cluster_.nodes()[p.front().node].gpu_type;
    for (size_t f = 0; f < kueue_flavors_[team].size(); ++f) {
      if (kueue_flavors_[team][f].mask & type) return static_cast<int>(f);
    }
    return -1;
  }
  Status CheckKueue(const std::string& who) const {
    std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> roots;
    for (size_t t = 0; t < teams_.size(); ++t) {
      for (size_t f = 0; f < kueue_flavors_[t].size(); ++f) {
        const KueueFlavor& fl = kueue_flavors_[t][f];
        const int64_t used = kueue_used_[t][f];
        const bool in_cohort = !kueue_root_[t].empty();
        const int64_t cap = !in_cohort ? GpusToMilli(fl.nominal)
                            : fl.borrowing_limit == kNoQuota
                                ? INT64_MAX
                                : GpusToMilli(fl.nominal + fl.borrowing_limit);
        if (used > cap) {
          return Internal(who + "ClusterQueue " + teams_[t].name + " uses " + MilliGpusText(used) +
                          " GPUs of flavor " + fl.name +
                          ", more than nominal plus borrowing limit (" + MilliGpusText(cap) + ")");
        }
        if (in_cohort) {
          auto& [above, lent] = roots[{kueue_root_[t], fl.name}];
          above += std::max<int64_t>(0, used - GpusToMilli(fl.guaranteed));
          lent += GpusToMilli(fl.nominal - fl.guaranteed);
        }
      }
    }
    for (const auto& [key, v] : roots) {
      if (v.first > v.second) {
        return Internal(who + "cohort " + key.first + " lends " + MilliGpusText(v.second) +
                        " GPUs of flavor " + key.second + " but its ClusterQueues use " +
                        MilliGpusText(v.first) + " beyond what they keep for themselves");
      }
    }
    return Status::Ok();
  }

 public:
 private:
  const Cluster& cluster_;
  const std::vector<Team>& teams_;
  std::vector<int> used_;
  std::vector<int64_t> team_used_;  // milli-GPUs
  std::vector<bool> unavailable_;   // drained or down
  bool kueue_ = false;
  std::vector<std::vector<KueueFlavor>> kueue_flavors_;  // per team, in its order
  std::vector<std::vector<int64_t>> kueue_used_;         // per team and flavor, milli-GPUs
  std::vector<std::string> kueue_root_;                  // per team: its root cohort, or ""
  bool power_ = false;                                   // the cluster has power caps
  int64_t cluster_mw_ = 0, cluster_cap_mw_ = 0;
  std::vector<int64_t> domain_mw_, domain_cap_mw_;
  struct Running {
    std::string id;
    std::vector<NodeIndex> nodes;
    int flavor = -1;          // kueue: index into kueue_flavors_[team]
    int32_t shared_gpu = -1;  // a share: the engine's shared GPU it runs on
  };
  // Shared GPUs holding shares, by the engine's number: their node, units taken, shares.
  struct SharedGpu {
    NodeIndex node = -1;
    int units = 0;
    int shares = 0;
  };
  std::map<int32_t, SharedGpu> shared_;
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
