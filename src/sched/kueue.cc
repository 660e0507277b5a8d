// The "kueue" admission plugin: quotas as Kueue does them, ported from its documented behaviour
// (ClusterQueue, Cohort, preemption, fair sharing, flavor fungibility).
//
// Each team is a ClusterQueue (CQ) with a nominal quota per flavor (a GPU type, or "*" for any
// type; Team::queue). CQs sit in cohorts, cohorts in parent cohorts: a tree. Quota moves up the
// tree as Kueue's hierarchical cohorts move it: a node keeps its guaranteed part (nominal less
// lendingLimit; 0 without a lendingLimit) and lends the rest to its parent; a parent's quota is
// what its children lend. A CQ may use its guaranteed part plus whatever its parent can
// provide, capped by its borrowingLimit. Usage climbs the tree the same way (only usage above
// the guaranteed part counts against the parent).
//
// A job gets one flavor: the CQ's flavors are tried in order (those of the job's GPU types).
// On each, it fits (maybe by borrowing), fits after preempting, or does not fit. Flavor
// fungibility says where to stop: whenCanBorrow=Borrow stops at a flavor that fits by
// borrowing (TryNextFlavor looks further for one that fits without); whenCanPreempt=Preempt
// stops at the first flavor where preemption works (TryNextFlavor looks further for a fit).
// With no stop, the best seen wins: a fit (borrowing or not) before a preemption.
//
// Preemption (classic): candidates are jobs of the same CQ allowed by withinClusterQueue, and
// jobs of other CQs of the tree that are borrowing on the flavor, allowed by
// reclaimWithinCohort. They are tried other-CQ first, lowest priority first, then in the
// profile's preemption plugin's order (Kueue's own without one: most recently started first;
// checkpoint-aware: cheapest first), skipping runs the plugin protects (minimum run time);
// after the preemptor fits, earlier picks it does not need are given back
// (the minimal set). As Kueue does, a CQ preempts in the cohort without borrowing when it is
// under its nominal quota; otherwise (or when that fails) it preempts only its own jobs and may
// borrow; borrowWithinCohort=LowerPriority lets it reclaim while borrowing, from jobs below its
// priority (and at most maxPriorityThreshold). With GraceTime (engine.h) a victim is signalled
// and runs on until it ends, counted until then, as its preemptor is from the signal on; a
// signalled job is never a victim again (OnJobSignalled), whatever the preemption plugin.
//
// Fair sharing (plugin argument fair_sharing: true) picks among the same candidates (the
// policies above still say who may be preempted), differently. A CQ's share is the GPUs it borrows
// (above nominal, over its flavors) per 1000 of the GPUs its root cohort can lend, divided by its
// weight. Victims come from the CQ with the highest share first, one at a time, when the
// strategy allows it: LessThanOrEqualToFinalShare (the preemptor's share with its job is at
// most the target's share without the victim), then LessThanInitialShare (below the target's
// share before). As in Kueue's hierarchical fair sharing, two CQs are compared through the
// children of their lowest common cohort (themselves when they share a cohort; else the
// sub-cohorts holding them, whose share counts what their whole subtree borrows). Admission order
// by share is not ported, nor Kueue's cycle (one head per CQ, heads that need no borrowing first):
// the profile's priority factors order jobs and the engine admits them one by one in that order.
//
// No preemption loops, bounded preemptions (Gantry's rules, not Kueue's): a job never preempts
// a job that preempted it, and a job preempted max_preemptions times (plugin argument, default
// 5, as Slurm's MaxBatchRequeue) is no longer a victim: it runs to its end. Without them a
// requeued victim may come back as a preemptor once loads shift (fair shares move as other
// jobs end; reclaim and borrowing swap roles between CQs), and a job of a CQ that lives on
// borrowed quota may be reclaimed every time it restarts.
//
// Priority is the job's QoS level (JobRequest::qos); "newer" is a later submit time.
//
// Quota and usage are counted in milli-GPUs: a job charges its MilliGpus (job_request.h), so a
// share of a GPU (gpu_milli 1..999) charges its flavor gpu_milli, a whole GPU 1000. Nominal
// quotas and borrowing and lending limits are GPUs in the spec, 1000 each here; fair sharing's
// share is a ratio, the same in either unit.
#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <map>

#include "builtin_plugins.h"

namespace gantry {
namespace {

constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max() / 4;

// Quotas and usage are in milli-GPUs (MilliGpus, job_request.h); the spec's limits are in GPUs,
// converted by GpusToMilli.

enum class Strategy : uint8_t { kLessThanOrEqualToFinalShare, kLessThanInitialShare };

class KueueAdmission final : public AdmissionPlugin {
 public:
  KueueAdmission(const Cluster& cluster, const std::vector<Team>& teams, bool fair,
                 std::vector<Strategy> strategies, int max_preemptions)
      : cluster_(cluster),
        teams_(teams),
        fair_(fair),
        strategies_(std::move(strategies)),
        max_preemptions_(max_preemptions) {}

  Status Init();

  std::string_view name() const override { return "kueue"; }
  int64_t HeadroomMilli(int) const override { return kNoHeadroomLimit; }
  bool per_job() const override { return true; }
  bool Admit(const JobRequest& job, Time now, AdmissionDecision* out) override;
  bool CanEverAdmit(const JobRequest& job) const override;
  bool WaitsForCohort(const JobRequest& job) const override;
  void OnJobStarted(const JobRequest& job, const Placement& placement, Time now) override;
  void OnJobEnded(const JobRequest& job, Time now) override;
  void OnJobSignalled(const JobRequest& victim, Time now) override;
  std::string Explain(const JobRequest& job) const override;
  void SetPreemption(const PreemptionPlugin* preemption) override { preemption_ = preemption; }

 private:
  // A ClusterQueue (nodes [0, teams)) or a cohort.
  struct QNode {
    std::string name;
    int parent = -1;
    bool unlimited = false;    // a team with no quota at all: not a ClusterQueue, never limited
    std::vector<int> flavors;  // a CQ's flavors, in the order admission tries them
  };
  struct Run {
    int cq = -1;
    int flavor = -1;
    int64_t milli = 0;  // MilliGpus: what it charges its flavor
    int priority = 0;
    Time start = 0;
    Time submit = 0;
    bool signalled = false;  // signalled for preemption (GraceTime): ends, is no victim again
    const JobRequest* job = nullptr;  // the driver's, read in place (preemptible may change)
  };

  size_t At(int node, int f) const { return static_cast<size_t>(node) * flavor_masks_.size() + f; }
  int Root(int node) const {
    while (nodes_[node].parent >= 0) node = nodes_[node].parent;
    return node;
  }
  // Kueue's available(): what `node` may still take on flavor f, with borrowing. With `empty`,
  // as if nothing ran anywhere (the most it could ever get).
  int64_t Available(int node, int f, bool empty) const {
    const int64_t usage = empty ? 0 : usage_[At(node, f)];
    const int64_t quota = quota_[At(node, f)];
    const int parent = nodes_[node].parent;
    if (parent < 0) return quota - usage;
    const int64_t guaranteed = guaranteed_[At(node, f)];
    const int64_t local = std::max<int64_t>(0, guaranteed - usage);
    int64_t from_parent = Available(parent, f, empty);
    const int64_t limit = borrow_limit_[At(node, f)];
    if (limit < kUnlimited) {
      const int64_t stored = quota - guaranteed;
      const int64_t used_in_parent = std::max<int64_t>(0, usage - guaranteed);
      from_parent = std::min(from_parent, stored - used_in_parent + limit);
    }
    return local + from_parent;
  }
  bool Borrowing(int cq, int f) const { return usage_[At(cq, f)] > quota_[At(cq, f)]; }
  bool UnderNominal(int cq, int f) const { return usage_[At(cq, f)] < quota_[At(cq, f)]; }
  bool Fits(int cq, int f, int64_t milli, bool allow_borrowing) const {
    if (!allow_borrowing && usage_[At(cq, f)] + milli > quota_[At(cq, f)]) return false;
    return milli <= Available(cq, f, false);
  }
  // Usage climbs the tree: a parent sees only what a child uses above its guaranteed part.
  void AddUsage(int node, int f, int64_t delta) {
    while (node >= 0 && delta != 0) {
      int64_t& u = usage_[At(node, f)];
      const int64_t g = guaranteed_[At(node, f)];
      const int64_t before = std::max<int64_t>(0, u - g);
      u += delta;
      delta = std::max<int64_t>(0, u - g) - before;
      node = nodes_[node].parent;
    }
  }
  // Kueue's dominant resource share of a CQ or a cohort: GPUs it uses above its quota per 1000
  // its root cohort can lend, over its weight (a cohort's is 1).
  double Share(int node) const;
  // The children of the lowest cohort holding both `a` and `b` on their paths: where Kueue's
  // hierarchical fair sharing compares them (a and b themselves when in the same cohort).
  std::pair<int, int> Sides(int a, int b) const {
    std::vector<int> path;
    for (int n = a; n >= 0; n = nodes_[n].parent) path.push_back(n);
    for (int child = b, m = b; m >= 0; child = m, m = nodes_[m].parent) {
      auto it = std::find(path.begin(), path.end(), m);
      if (it != path.end()) return {it == path.begin() ? a : *(it - 1), m == b ? b : child};
    }
    return {a, b};
  }
  std::vector<JobIndex> FindVictims(const JobRequest& job, int cq, int f, Time now);
  std::vector<JobIndex> Minimal(const std::vector<JobIndex>& candidates, int cq, int f,
                                int64_t milli, bool allow_borrowing, int threshold);
  std::vector<JobIndex> FairVictims(const std::vector<JobIndex>& candidates, int cq, int f,
                                    int64_t milli);
  // Gives back all but the jobs needed (newest picks kept), restores usage, returns the needed.
  std::vector<JobIndex> FillBack(std::vector<JobIndex> removed, int cq, int f, int64_t milli,
                                 bool allow_borrowing);
  void Remove(JobIndex r) { AddUsage(runs_[r].cq, runs_[r].flavor, -runs_[r].milli); }
  void Restore(JobIndex r) { AddUsage(runs_[r].cq, runs_[r].flavor, runs_[r].milli); }
  int FlavorOfPlacement(int cq, const Placement& placement) const;

  const Cluster& cluster_;
  const std::vector<Team>& teams_;
  const bool fair_;
  const std::vector<Strategy> strategies_;
  const int max_preemptions_;
  const PreemptionPlugin* preemption_ = nullptr;  // the profile's: victim order, min run time
  std::vector<QNode> nodes_;
  std::vector<uint32_t> flavor_masks_;      // 0: "*" (every type); 1 + t: GPU type t
  std::vector<int64_t> quota_;              // [node][flavor]: nominal (CQ) or what children lend
  std::vector<int64_t> guaranteed_;         // [node][flavor]: not lent to the parent
  std::vector<int64_t> borrow_limit_;       // [node][flavor]; kUnlimited when none
  std::vector<int64_t> usage_;              // [node][flavor]
  std::vector<std::vector<int>> tree_cqs_;  // per root: its CQs, in team order
  std::vector<std::vector<JobIndex>> running_;  // per CQ
  std::vector<Run> runs_;                       // per job index (cq -1: not running here)
  JobIndex last_job_ = -1;  // the job Admit last admitted, on which flavor, preempting whom
  int last_flavor_ = -1;
  std::vector<JobIndex> last_victims_;
  std::vector<std::vector<JobIndex>> preempted_by_;  // per job: the jobs that preempted it
  // Jobs refused since the last start or end, by what the decision depends on (CQ, GPU types,
  // GPUs, priority): a full cluster asks about hundreds of alike pending jobs per cycle, and
  // nothing changes between them. Jobs whose decision also depends on who they are (submit
  // time under LowerOrNewerEqualPriority, jobs that preempted them) are not remembered.
  struct Refused {
    int cq;
    uint32_t mask;
    int64_t milli;
    int priority;
    bool operator==(const Refused&) const = default;
  };
  std::vector<Refused> refused_;
};

Status KueueAdmission::Init() {
  const int num_teams = static_cast<int>(teams_.size());
  flavor_masks_.push_back(kAnyGpuType);
  for (size_t t = 0; t < cluster_.gpu_types().size(); ++t) flavor_masks_.push_back(1u << t);
  std::map<std::string, int> cohort_index;
  nodes_.resize(num_teams);
  const auto cohort = [&](const std::string& name) {
    auto [it, inserted] = cohort_index.try_emplace(name, static_cast<int>(nodes_.size()));
    if (inserted) nodes_.push_back({name, -1, false, {}});
    return it->second;
  };
  for (const Cohort& c : cluster_.cohorts()) {
    const int n = cohort(c.name);
    if (!c.parent.empty()) {
      const int p = cohort(c.parent);
      nodes_[n].parent = p;
    }
  }
  // Cohort loops are rejected by the spec parser; a Cluster built in code is checked here.
  for (size_t n = num_teams; n < nodes_.size(); ++n) {
    int at = nodes_[n].parent;
    for (size_t steps = 0; at >= 0; ++steps, at = nodes_[at].parent) {
      if (steps > nodes_.size()) {
        return InvalidArgument("kueue: cohort '" + nodes_[n].name + "' is its own ancestor");
      }
    }
  }
  const size_t num_flavors = flavor_masks_.size();
  std::vector<std::vector<FlavorQuota>> quotas(num_teams);
  for (int t = 0; t < num_teams; ++t) {
    const Team& team = teams_[t];
    QNode& q = nodes_[t];
    q.name = team.name;
    quotas[t] = team.queue.quotas;
    if (quotas[t].empty()) {
      if (team.quota_gpus == kNoQuota) {
        if (!team.queue.cohort.empty()) {
          return InvalidArgument("kueue: team '" + team.name + "' is in cohort '" +
                                 team.queue.cohort + "' but has no quota");
        }
        q.unlimited = true;
        continue;
      }
      quotas[t].push_back({kAnyFlavor, team.quota_gpus, kNoQuota, kNoQuota});
    }
    if (!team.queue.cohort.empty()) nodes_[t].parent = cohort(team.queue.cohort);
  }
  const size_t total = nodes_.size() * num_flavors;
  quota_.assign(total, 0);
  guaranteed_.assign(total, 0);
  borrow_limit_.assign(total, kUnlimited);
  usage_.assign(total, 0);
  for (int t = 0; t < num_teams; ++t) {
    for (const FlavorQuota& fq : quotas[t]) {
      int f = 0;
      if (fq.flavor != kAnyFlavor) {
        const GpuTypeIndex type = cluster_.FindGpuType(fq.flavor);
        if (type < 0) {
          return InvalidArgument("kueue: team '" + teams_[t].name + "': unknown flavor '" +
                                 fq.flavor + "' (not a GPU type of the cluster, nor \"*\")");
        }
        f = 1 + type;
      }
      if (std::find(nodes_[t].flavors.begin(), nodes_[t].flavors.end(), f) !=
          nodes_[t].flavors.end()) {
        return InvalidArgument("kueue: team '" + teams_[t].name + "': flavor '" + fq.flavor +
                               "' listed twice");
      }
      nodes_[t].flavors.push_back(f);
      quota_[At(t, f)] = GpusToMilli(fq.nominal);
      if (fq.lending_limit != kNoQuota) {
        guaranteed_[At(t, f)] = GpusToMilli(std::max(0, fq.nominal - fq.lending_limit));
      }
      if (fq.borrowing_limit != kNoQuota) borrow_limit_[At(t, f)] = GpusToMilli(fq.borrowing_limit);
    }
    // A CQ mixing "*" with typed flavors would count one GPU on two flavors.
    if (nodes_[t].flavors.size() > 1 &&
        std::find(nodes_[t].flavors.begin(), nodes_[t].flavors.end(), 0) !=
            nodes_[t].flavors.end()) {
      return InvalidArgument("kueue: team '" + teams_[t].name +
                             "': \"*\" cannot be combined with other flavors");
    }
  }
  // A cohort's quota is what its children lend: deepest first, so children are complete.
  std::vector<std::pair<int, int>> by_depth;  // (-depth, node)
  for (size_t n = 0; n < nodes_.size(); ++n) {
    int depth = 0;
    for (int at = nodes_[n].parent; at >= 0; at = nodes_[at].parent) ++depth;
    by_depth.emplace_back(-depth, static_cast<int>(n));
  }
  std::sort(by_depth.begin(), by_depth.end());
  for (const auto& [neg_depth, n] : by_depth) {
    const int p = nodes_[n].parent;
    if (p < 0) continue;
    for (size_t f = 0; f < num_flavors; ++f) {
      quota_[At(p, f)] += quota_[At(n, f)] - guaranteed_[At(n, f)];
    }
  }
  tree_cqs_.resize(nodes_.size());
  for (int t = 0; t < num_teams; ++t) {
    if (!nodes_[t].unlimited) tree_cqs_[Root(t)].push_back(t);
  }
  running_.resize(num_teams);
  return Status::Ok();
}

bool KueueAdmission::CanEverAdmit(const JobRequest& job) const {
  const QNode& q = nodes_[job.team];
  if (q.unlimited) return true;
  for (int f : q.flavors) {
    if ((flavor_masks_[f] & job.gpu_type_mask) && MilliGpus(job) <= Available(job.team, f, true)) {
      return true;
    }
  }
  return false;
}

// Room for the job on some flavor if nobody else in the tree used anything: then only the
// cohort's other members stand in its way.
bool KueueAdmission::WaitsForCohort(const JobRequest& job) const {
  const QNode& q = nodes_[job.team];
  if (q.unlimited || q.parent < 0) return false;
  for (int f : q.flavors) {
    if ((flavor_masks_[f] & job.gpu_type_mask) &&
        usage_[At(job.team, f)] + MilliGpus(job) <= Available(job.team, f, true)) {
      return true;
    }
  }
  return false;
}

bool KueueAdmission::Admit(const JobRequest& job, Time now, AdmissionDecision* out) {
  out->victims.clear();
  const int cq = job.team;
  const QNode& q = nodes_[cq];
  if (q.unlimited) {
    out->gpu_type_mask = job.gpu_type_mask;
    last_job_ = job.index;
    last_flavor_ = -1;
    return true;
  }
  const QueueSettings& settings = teams_[cq].queue;
  // A minimum run time makes decisions change with the clock alone: nothing is remembered.
  const bool cacheable =
      (preemption_ == nullptr || preemption_->min_run_time() == 0) &&
      settings.within_cluster_queue != WithinClusterQueue::kLowerOrNewerEqualPriority &&
      (static_cast<size_t>(job.index) >= preempted_by_.size() || preempted_by_[job.index].empty());
  const int64_t milli = MilliGpus(job);
  const Refused key{cq, job.gpu_type_mask, milli, job.qos};
  if (cacheable && std::find(refused_.begin(), refused_.end(), key) != refused_.end()) {
    return false;
  }
  int chosen = -1, best = -1, best_rank = 0;  // rank 2: fits by borrowing; 1: by preempting
  std::vector<JobIndex> best_victims;
  for (int f : q.flavors) {
    if ((flavor_masks_[f] & job.gpu_type_mask) == 0) continue;
    if (Fits(cq, f, milli, true)) {
      const bool borrows = usage_[At(cq, f)] + milli > quota_[At(cq, f)];
      if (!borrows || settings.when_can_borrow == FlavorFungibility::kBorrow) {
        chosen = f;
        out->victims.clear();
        break;
      }
      if (best_rank < 2) {
        best = f;
        best_rank = 2;
        best_victims.clear();
      }
      continue;
    }
    std::vector<JobIndex> victims = FindVictims(job, cq, f, now);
    if (victims.empty()) continue;
    if (settings.when_can_preempt == FlavorFungibility::kPreempt) {
      chosen = f;
      out->victims = std::move(victims);
      break;
    }
    if (best_rank < 1) {
      best = f;
      best_rank = 1;
      best_victims = std::move(victims);
    }
  }
  if (chosen < 0) {
    if (best < 0) {
      if (cacheable) refused_.push_back(key);
      return false;
    }
    chosen = best;
    out->victims = std::move(best_victims);
  }
  out->gpu_type_mask = job.gpu_type_mask & flavor_masks_[chosen];
  last_job_ = job.index;
  last_flavor_ = chosen;
  last_victims_ = out->victims;
  return true;
}

std::vector<JobIndex> KueueAdmission::FindVictims(const JobRequest& job, int cq, int f, Time now) {
  const QueueSettings& settings = teams_[cq].queue;
  const int priority = job.qos;
  std::vector<JobIndex> candidates;
  static const std::vector<JobIndex> kNone;
  const std::vector<JobIndex>& preempted_me =
      static_cast<size_t>(job.index) < preempted_by_.size() ? preempted_by_[job.index] : kNone;
  // Excluded victims: a signalled job, one that cannot be requeued, a job that preempted this
  // one, a job preempted enough already, a job the preemption plugin protects (minimum run time).
  const auto loops = [&](JobIndex r) {
    if (runs_[r].signalled || !runs_[r].job->preemptible) return true;
    if (preemption_ != nullptr && !preemption_->MayPreempt(r, job.index, now)) return true;
    if (static_cast<size_t>(r) < preempted_by_.size() &&
        static_cast<int>(preempted_by_[r].size()) >= max_preemptions_) {
      return true;
    }
    return std::find(preempted_me.begin(), preempted_me.end(), r) != preempted_me.end();
  };
  if (settings.within_cluster_queue != WithinClusterQueue::kNever) {
    for (JobIndex r : running_[cq]) {
      const Run& run = runs_[r];
      if (run.flavor != f || loops(r)) continue;
      const bool lower = run.priority < priority;
      const bool newer_equal =
          run.priority == priority &&
          (run.submit > job.submit || (run.submit == job.submit && r > job.index));
      if (lower ||
          (settings.within_cluster_queue == WithinClusterQueue::kLowerOrNewerEqualPriority &&
           newer_equal)) {
        candidates.push_back(r);
      }
    }
  }
  const bool reclaim =
      nodes_[cq].parent >= 0 && settings.reclaim_within_cohort != ReclaimWithinCohort::kNever;
  if (reclaim) {
    for (int other : tree_cqs_[Root(cq)]) {
      if (other == cq || !Borrowing(other, f)) continue;
      for (JobIndex r : running_[other]) {
        const Run& run = runs_[r];
        if (run.flavor != f || loops(r)) continue;
        if (settings.reclaim_within_cohort != ReclaimWithinCohort::kAny &&
            run.priority >= priority) {
          continue;
        }
        candidates.push_back(r);
      }
    }
  }
  if (candidates.empty()) return {};
  // Other CQs first, lowest priority first; then the preemption plugin's order (cheapest
  // first for checkpoint-aware), or Kueue's own: most recently started first.
  const bool plugin_orders = preemption_ != nullptr && preemption_->orders_victims();
  std::vector<std::pair<JobIndex, double>> keys;
  if (plugin_orders) {
    for (JobIndex r : candidates) keys.emplace_back(r, preemption_->VictimKey(r, now));
    std::sort(keys.begin(), keys.end());
  }
  const auto key_of = [&](JobIndex r) {
    return std::lower_bound(keys.begin(), keys.end(), std::make_pair(r, -HUGE_VAL))->second;
  };
  std::sort(candidates.begin(), candidates.end(), [&](JobIndex a, JobIndex b) {
    const Run& x = runs_[a];
    const Run& y = runs_[b];
    const bool xo = x.cq != cq, yo = y.cq != cq;
    if (xo != yo) return xo;
    if (x.priority != y.priority) return x.priority < y.priority;
    if (plugin_orders) {
      const double kx = key_of(a), ky = key_of(b);
      if (kx != ky) return kx < ky;
    } else if (x.start != y.start) {
      return x.start > y.start;
    }
    return a > b;
  });
  const int64_t milli = MilliGpus(job);
  if (fair_) return FairVictims(candidates, cq, f, milli);
  std::vector<JobIndex> same;
  for (JobIndex r : candidates) {
    if (runs_[r].cq == cq) same.push_back(r);
  }
  if (same.size() == candidates.size()) {
    return Minimal(candidates, cq, f, milli, true, INT_MAX);
  }
  if (settings.borrow_within_cohort == BorrowWithinCohort::kLowerPriority) {
    const int threshold = std::min(priority - 1, settings.borrow_max_priority);
    if (!UnderNominal(cq, f)) {
      std::vector<JobIndex> below;
      for (JobIndex r : candidates) {
        if (runs_[r].priority <= threshold) below.push_back(r);
      }
      candidates = std::move(below);
    }
    return Minimal(candidates, cq, f, milli, true, threshold);
  }
  if (UnderNominal(cq, f)) {
    std::vector<JobIndex> victims = Minimal(candidates, cq, f, milli, false, INT_MAX);
    if (!victims.empty()) return victims;
  }
  return Minimal(same, cq, f, milli, true, INT_MAX);
}

std::vector<JobIndex> KueueAdmission::Minimal(const std::vector<JobIndex>& candidates, int cq,
                                              int f, int64_t milli, bool allow_borrowing,
                                              int threshold) {
  std::vector<JobIndex> removed;
  for (JobIndex r : candidates) {
    const int owner = runs_[r].cq;
    // Reclaim only from a CQ that still borrows once earlier picks are gone.
    if (owner != cq && !Borrowing(owner, f)) continue;
    Remove(r);
    removed.push_back(r);
    // Preempting a job above the borrowWithinCohort threshold forbids borrowing.
    if (runs_[r].priority > threshold) allow_borrowing = false;
    if (Fits(cq, f, milli, allow_borrowing))
      return FillBack(std::move(removed), cq, f, milli, allow_borrowing);
  }
  for (JobIndex r : removed) Restore(r);
  return {};
}

std::vector<JobIndex> KueueAdmission::FillBack(std::vector<JobIndex> removed, int cq, int f,
                                               int64_t milli, bool allow_borrowing) {
  // The last pick made it fit; an earlier one may be unneeded now: give those back, newest
  // pick first, while the preemptor still fits.
  std::vector<bool> keep_running(removed.size(), false);
  for (int i = static_cast<int>(removed.size()) - 2; i >= 0; --i) {
    Restore(removed[i]);
    if (Fits(cq, f, milli, allow_borrowing)) {
      keep_running[i] = true;
    } else {
      Remove(removed[i]);
    }
  }
  std::vector<JobIndex> victims;
  for (size_t i = 0; i < removed.size(); ++i) {
    if (keep_running[i]) continue;
    Restore(removed[i]);
    victims.push_back(removed[i]);
  }
  return victims;
}

double KueueAdmission::Share(int node) const {
  const int root = Root(node);
  if (root == node) return 0;
  int64_t borrowed = 0, lendable = 0;
  for (size_t f = 0; f < flavor_masks_.size(); ++f) {
    borrowed += std::max<int64_t>(0, usage_[At(node, f)] - quota_[At(node, f)]);
    lendable += quota_[At(root, f)];
  }
  if (borrowed == 0) return 0;
  const double weight =
      node < static_cast<int>(teams_.size()) ? teams_[node].queue.fair_weight : 1.0;
  if (weight <= 0 || lendable <= 0) return std::numeric_limits<double>::infinity();
  return static_cast<double>(borrowed) * 1000.0 / static_cast<double>(lendable) / weight;
}

std::vector<JobIndex> KueueAdmission::FairVictims(const std::vector<JobIndex>& candidates, int cq,
                                                  int f, int64_t milli) {
  std::vector<JobIndex> removed;
  std::vector<bool> taken(candidates.size(), false);
  for (Strategy strategy : strategies_) {
    std::map<int, std::vector<size_t>> by_cq;  // CQ -> candidate positions not taken, in order
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (!taken[i]) by_cq[runs_[candidates[i]].cq].push_back(i);
    }
    while (!by_cq.empty()) {
      // The CQ whose side has the highest share loses first (ties: lower team index).
      auto target = by_cq.begin();
      double target_key = -1;
      for (auto it = by_cq.begin(); it != by_cq.end(); ++it) {
        const double key = it->first == cq ? Share(cq) : Share(Sides(cq, it->first).second);
        if (key > target_key) {
          target = it;
          target_key = key;
        }
      }
      const int y = target->first;
      std::vector<size_t>& list = target->second;
      bool picked = false;
      if (y == cq) {
        picked = true;
        taken[list.front()] = true;
        Remove(candidates[list.front()]);
        removed.push_back(candidates[list.front()]);
        list.erase(list.begin());
      } else if (Borrowing(y, f)) {
        const auto [mine, theirs] = Sides(cq, y);
        AddUsage(cq, f, milli);
        const double preemptor_share = Share(mine);
        AddUsage(cq, f, -milli);
        const double target_before = Share(theirs);
        for (size_t k = 0; k < list.size(); ++k) {
          const JobIndex r = candidates[list[k]];
          Remove(r);
          const double target_after = Share(theirs);
          const bool ok = strategy == Strategy::kLessThanOrEqualToFinalShare
                              ? preemptor_share <= target_after
                              : preemptor_share < target_before;
          if (ok) {
            taken[list[k]] = true;
            removed.push_back(r);
            list.erase(list.begin() + static_cast<std::ptrdiff_t>(k));
            picked = true;
            break;
          }
          Restore(r);
        }
      }
      if (!picked || list.empty()) by_cq.erase(target);
      if (picked && Fits(cq, f, milli, true)) {
        return FillBack(std::move(removed), cq, f, milli, true);
      }
    }
  }
  for (JobIndex r : removed) Restore(r);
  return {};
}

int KueueAdmission::FlavorOfPlacement(int cq, const Placement& placement) const {
  const QNode& q = nodes_[cq];
  if (placement.empty()) return q.flavors.empty() ? -1 : q.flavors.front();
  const uint32_t type = 1u << cluster_.nodes()[placement.front().node].gpu_type;
  for (int f : q.flavors) {
    if (flavor_masks_[f] & type) return f;
  }
  return q.flavors.empty() ? -1 : q.flavors.front();
}

void KueueAdmission::OnJobStarted(const JobRequest& job, const Placement& placement, Time now) {
  const int cq = job.team;
  refused_.clear();
  if (nodes_[cq].unlimited) return;
  // Adopted jobs, and jobs another plugin started, get the flavor their GPUs belong to.
  const bool admitted_here = job.index == last_job_;
  const int f =
      admitted_here && last_flavor_ >= 0 ? last_flavor_ : FlavorOfPlacement(cq, placement);
  last_job_ = -1;
  if (admitted_here) {
    // Its victims have ended or were signalled by now (the engine does that first): remember
    // who preempted them.
    for (JobIndex v : last_victims_) {
      if (static_cast<size_t>(v) >= preempted_by_.size()) preempted_by_.resize(v + 1);
      preempted_by_[v].push_back(job.index);
    }
  }
  last_victims_.clear();
  if (f < 0) return;
  if (static_cast<size_t>(job.index) >= runs_.size()) runs_.resize(job.index + 1);
  runs_[job.index] = {cq, f, MilliGpus(job), job.qos, now, job.submit, false, &job};
  AddUsage(cq, f, MilliGpus(job));
  running_[cq].push_back(job.index);
}

void KueueAdmission::OnJobSignalled(const JobRequest& victim, Time) {
  if (static_cast<size_t>(victim.index) >= runs_.size() || runs_[victim.index].cq < 0) return;
  runs_[victim.index].signalled = true;
  refused_.clear();
}

void KueueAdmission::OnJobEnded(const JobRequest& job, Time) {
  if (static_cast<size_t>(job.index) >= runs_.size() || runs_[job.index].cq < 0) return;
  refused_.clear();
  Run& run = runs_[job.index];
  AddUsage(run.cq, run.flavor, -run.milli);
  std::vector<JobIndex>& list = running_[run.cq];
  auto it = std::find(list.begin(), list.end(), job.index);
  if (it != list.end()) {
    *it = list.back();
    list.pop_back();
  }
  run.cq = -1;
}

std::string KueueAdmission::Explain(const JobRequest& job) const {
  const int cq = job.team;
  const QNode& q = nodes_[cq];
  std::string out = "ClusterQueue " + q.name;
  if (q.parent >= 0) out += " (cohort " + nodes_[q.parent].name + ")";
  out += ", job needs " + MilliGpusText(MilliGpus(job)) + " GPUs:";
  bool any = false;
  for (int f : q.flavors) {
    if ((flavor_masks_[f] & job.gpu_type_mask) == 0) continue;
    any = true;
    const std::string name = f == 0 ? std::string(kAnyFlavor) : cluster_.gpu_types()[f - 1].name;
    out += " flavor " + name + ": uses " + MilliGpusText(usage_[At(cq, f)]) + " of nominal " +
           MilliGpusText(quota_[At(cq, f)]) + ", " +
           MilliGpusText(std::max<int64_t>(0, Available(cq, f, false))) +
           " available with borrowing, at most " +
           MilliGpusText(std::max<int64_t>(0, Available(cq, f, true))) + " ever;";
  }
  if (!any) out += " no flavor of its GPU types;";
  out.pop_back();
  return out;
}

}  // namespace

namespace builtin {

Result<std::unique_ptr<AdmissionPlugin>> NewKueue(const PluginArgs& args,
                                                  const PluginContext& ctx) {
  GANTRY_RETURN_IF_ERROR(args.CheckKnown({"fair_sharing", "strategies", "max_preemptions"}));
  GANTRY_ASSIGN_OR_RETURN(const bool fair, args.Bool("fair_sharing", false));
  GANTRY_ASSIGN_OR_RETURN(const int64_t max_preemptions, args.Integer("max_preemptions", 5));
  if (max_preemptions < 0 || max_preemptions > 1000000) {
    return InvalidArgument("plugin 'kueue': argument 'max_preemptions' must be in [0, 1000000]");
  }
  GANTRY_ASSIGN_OR_RETURN(
      const std::string names,
      args.String("strategies", "LessThanOrEqualToFinalShare,LessThanInitialShare"));
  std::vector<Strategy> strategies;
  size_t pos = 0;
  while (pos <= names.size()) {
    const size_t comma = std::min(names.find(',', pos), names.size());
    const std::string name = names.substr(pos, comma - pos);
    if (name == "LessThanOrEqualToFinalShare") {
      strategies.push_back(Strategy::kLessThanOrEqualToFinalShare);
    } else if (name == "LessThanInitialShare") {
      strategies.push_back(Strategy::kLessThanInitialShare);
    } else {
      return InvalidArgument("plugin 'kueue': argument 'strategies': unknown strategy '" + name +
                             "' (valid: LessThanOrEqualToFinalShare, LessThanInitialShare)");
    }
    pos = comma + 1;
  }
  auto plugin = std::make_unique<KueueAdmission>(
      *ctx.cluster, *ctx.teams, fair, std::move(strategies), static_cast<int>(max_preemptions));
  GANTRY_RETURN_IF_ERROR(plugin->Init());
  return std::unique_ptr<AdmissionPlugin>(std::move(plugin));
}

}  // namespace builtin
}  // namespace gantry
