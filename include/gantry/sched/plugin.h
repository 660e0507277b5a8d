// The scheduling framework's extension points, modelled on the Kubernetes scheduling framework:
//
//   queue order  PriorityFactor   weighted factors summed into a job's priority (age, fair share,
//                                 size, QoS, oracles); the engine orders pending jobs by the sum
//   admission    AdmissionPlugin  may this job start now as far as policy goes, on which GPU
//                                 types, and which running jobs must be preempted first
//                                 (quota; Kueue ClusterQueues with cohorts, borrowing,
//                                 lending, flavors, reclaim and fair sharing: kueue.cc;
//                                 power caps per cluster and topology domain, checked on the
//                                 chosen placement: power_admission.cc)
//   placement    PlacementPlugin  which GPUs on which nodes: a filter (GPU type, shape,
//                                 reservation caps) shared by all, then a weighted sum of
//                                 ScorePlugins ranks the nodes that pass. first-fit, best-fit
//                                 and topology are defined by their own scores and run as
//                                 index-driven fast paths proven equivalent; a profile may add
//                                 scores to any of them; "scored" uses only the profile's
//   score        ScorePlugin      ranks one node for one job (pack, spread, lowest-index,
//                                 least-free, most-free, fgd, scarcity, data-locality:
//                                 how much of the job's declared data the node holds,
//                                 sched/data_locality.h)
//   backfill     Profile::backfill none / EASY / conservative reservations (engine.cc)
//   preemption   PreemptionPlugin victim order and eligibility for admission's preemptions, and
//                                 priority/QoS preemption for a blocked head job, GraceTime and
//                                 minimum run time (none, kueue-order, checkpoint-aware:
//                                 preemption.cc)
//
// Plugins are created per engine from a Profile (profile.h) through the registry (registry.h)
// and are used only from the engine's serial scheduling loop, so they need no locking.
#pragma once

#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/status.h"
#include "gantry/common/time.h"
#include "gantry/sched/free_index.h"
#include "gantry/workload/job_request.h"

namespace gantry {

// Arguments of one plugin in a profile: strings as written, typed on read. Errors name the
// plugin and the argument.
class PluginArgs {
 public:
  PluginArgs() = default;
  PluginArgs(std::string plugin, std::map<std::string, std::string> values)
      : plugin_(std::move(plugin)), values_(std::move(values)) {}

  Result<double> Number(const std::string& key, double fallback) const;
  Result<int64_t> Integer(const std::string& key, int64_t fallback) const;
  // Accepts seconds ("300"), or a number with s/m/h/d ("5m", "7d"); "inf" for kInfiniteTime.
  Result<Duration> DurationArg(const std::string& key, Duration fallback) const;
  Result<bool> Bool(const std::string& key, bool fallback) const;
  Result<std::string> String(const std::string& key, const std::string& fallback) const;
  // Every argument given must be one of `known` (catches typos in profiles).
  Status CheckKnown(const std::vector<std::string>& known) const;
  const std::map<std::string, std::string>& values() const { return values_; }

 private:
  std::string plugin_;
  std::map<std::string, std::string> values_;
};

struct Slot {
  NodeIndex node;
  int gpus;
  bool operator==(const Slot&) const = default;
};
using Placement = std::vector<Slot>;

// Per-node upper bounds on what a placement may take, on top of what is free. Backfill uses
// this to keep GPUs promised to a reservation. Dense, reset in O(touched).
class NodeCaps {
 public:
  explicit NodeCaps(size_t nodes) : cap_(nodes, INT_MAX) {}
  int Effective(NodeIndex n, int free) const { return free < cap_[n] ? free : cap_[n]; }
  int cap(NodeIndex n) const { return cap_[n]; }
  void Set(NodeIndex n, int cap) {
    if (cap_[n] == INT_MAX) touched_.push_back(n);
    cap_[n] = cap;
  }
  bool empty() const { return touched_.empty(); }
  const std::vector<NodeIndex>& touched() const { return touched_; }
  void Clear() {
    for (NodeIndex n : touched_) cap_[n] = INT_MAX;
    touched_.clear();
  }

 private:
  std::vector<int> cap_;
  std::vector<NodeIndex> touched_;
};

class PlacementPlugin {
 public:
  virtual ~PlacementPlugin() = default;
  virtual std::string_view name() const = 0;
  // Chooses GPUs for all of `job` (gang: all or nothing) from `free`, taking at most
  // caps->Effective() on each node when caps is given. Returns false when it does not fit;
  // `out` is then unspecified.
  virtual bool Place(const JobRequest& job, const FreeIndex& free, const NodeCaps* caps,
                     Placement* out) const = 0;
};

// Score extension point of every placement (src/sched/filter_score.h): how good `node` is for
// `job`, higher is better. Called only for nodes that passed the filter; `usable` is how many
// GPUs the job could take there (free, less what reservations hold back). A profile weights
// several scores; ties go to the lower node index, so placements stay deterministic.
class ScorePlugin {
 public:
  virtual ~ScorePlugin() = default;
  virtual std::string_view name() const = 0;
  virtual double Score(const JobRequest& job, NodeIndex node, int usable,
                       const FreeIndex& free) const = 0;
  // True when Score is 0 on every node for `job` (the "data-locality" score for a job that
  // declares no data), so it cannot change the ranking: a built-in placement whose extra scores
  // are all uniform for a job keeps its index-driven fast path for that job. 0, not merely the
  // same value, so that the generic path's sums are unchanged bit for bit too.
  virtual bool Uniform(const JobRequest& job) const { return false; }
};

// What priority factors may observe of the engine.
struct TeamUsageView {
  const std::vector<Team>* teams;
  const std::vector<int64_t>* running_milli;  // per team: MilliGpus of its running jobs
};

// One weighted term of a job's priority. The engine's priority of job j at time t is
//   sum_f weight_f * (JobValue_f(j) + TeamValue_f(team of j))  +  age term,
// where the age term (the "age" factor) grows linearly with time waited up to max_age. Keeping
// the time-varying parts per team (or common to all jobs) lets the engine keep each team's queue
// sorted without re-sorting every job whenever the clock moves.
class PriorityFactor {
 public:
  virtual ~PriorityFactor() = default;
  virtual std::string_view name() const = 0;
  // Time-invariant part for a job; typically in [0, 1]. Factors whose per-job value moves with
  // usage (per-user fair share) say so with job_value_changes(); the engine then re-keys its
  // pending jobs after each Refresh.
  virtual double JobValue(const JobRequest& job) const { return 0; }
  virtual bool job_value_changes() const { return false; }
  // Team part as of the last Refresh; typically in [0, 1].
  virtual double TeamValue(int team) const { return 0; }
  // Called at most every Profile::priority_recalc_interval and before the first cycle.
  virtual void Refresh(Time now, const TeamUsageView& usage) {}
  virtual void OnJobStarted(const JobRequest& job, Time now) {}
  virtual void OnJobEnded(const JobRequest& job, Time now) {}
  // For the age factor only: the age (seconds) at which the factor reaches 1; kInfiniteTime for
  // plain FIFO. Other factors return 0.
  virtual Duration max_age() const { return 0; }
  // Explains the value for `job` (why-pending output), e.g. "fairshare=0.42 (usage 31% of 12%)".
  virtual std::string Describe(const JobRequest& job) const;
};

class PreemptionPlugin;

// What an admission plugin decided for one job that it admits.
struct AdmissionDecision {
  uint32_t gpu_type_mask = kAnyGpuType;  // types it may be placed on (its flavor), within its own
  std::vector<JobIndex> victims;         // running jobs to end first so that it fits its quota
};

// HeadroomMilli of a team no plugin limits.
inline constexpr int64_t kNoHeadroomLimit = INT64_MAX;

class AdmissionPlugin {
 public:
  virtual ~AdmissionPlugin() = default;
  virtual std::string_view name() const = 0;
  // What `team` may still start now, in thousandths of a GPU: a job fits when its MilliGpus
  // (job_request.h: a share its gpu_milli, a whole GPU 1000) is at most this. kNoHeadroomLimit
  // when unlimited. A team with no headroom (<= 0) has its whole queue skipped in O(1).
  virtual int64_t HeadroomMilli(int team) const = 0;
  // True when the plugin decides job by job (Admit below): the engine then asks Admit for every
  // job whose team has headroom, and keeps scheduling while no GPU is free, since admission
  // may preempt. False (the default): the HeadroomMilli test alone decides.
  virtual bool per_job() const { return false; }
  // Whether `job` may start now, on which GPU types, and after preempting which running jobs
  // (quota only: the engine still has to place it). Called only when per_job(); may keep what
  // it chose for OnJobStarted. The default is the HeadroomMilli test on the job's own types.
  virtual bool Admit(const JobRequest& job, Time now, AdmissionDecision* out) {
    out->gpu_type_mask = job.gpu_type_mask;
    out->victims.clear();
    return MilliGpus(job) <= HeadroomMilli(job.team);
  }
  // Whether `job` may start on `placement`, which the placement plugin chose after every
  // plugin admitted the job: for limits that depend on where a job lands (the "power" plugin's
  // caps on the cluster and on topology domains). `placement` holds the GPUs the start turns
  // busy: empty for a share that joins a GPU already shared (its slot is that GPU's node).
  // `end`: when the job would end, started now (now + its time limit). On a refusal the plugin may
  // append node ranges [first, end) to `avoid` (a rack at its cap): the engine then places the job
  // once more off every range named so far, a few times at most. A final refusal keeps the job
  // pending with reason kPower. Default: yes.
  virtual bool AdmitPlacement(const JobRequest& job, const Placement& placement, Time end,
                              std::vector<std::pair<NodeIndex, NodeIndex>>* avoid) {
    return true;
  }
  // EASY's reservation, for a limit that AdmitPlacement holds (power): `job`, the
  // highest-priority job of this cycle that AdmitPlacement refused, is promised what it lacks
  // by the time running jobs free it if they end at their time limits. Until the next
  // BeginCycle, AdmitPlacement admits other jobs only if they end by then or leave it enough.
  // Returns that time (the job's start estimate), or kInfiniteTime for no reservation. Called
  // at most once a cycle. Default: none.
  virtual Time Reserve(const JobRequest& job, Time now) { return kInfiniteTime; }
  // A scheduling cycle begins: any reservation of the last one is dropped.
  virtual void BeginCycle(Time now) {}
  // False when no state of the cluster would ever admit `job` (larger than anything its team
  // could get): it then waits with reason kQuota for ever, as Kueue leaves such a workload
  // pending.
  virtual bool CanEverAdmit(const JobRequest& job) const { return true; }
  // For a job Admit refused: true when its own quota (and borrowing limit) would admit it and
  // only what others in its cohort use stands in the way (Kueue's "insufficient unused quota
  // in cohort"); the engine then says reason kCohort instead of kQuota.
  virtual bool WaitsForCohort(const JobRequest& job) const { return false; }
  // The job started on `placement` at `start` (for an adopted job, when it really started); it
  // ended at `now`.
  virtual void OnJobStarted(const JobRequest& job, const Placement& placement, Time start) = 0;
  virtual void OnJobEnded(const JobRequest& job, Time now) = 0;
  // Running `victim` was signalled for preemption (GraceTime, engine.h; also a signal a restarted
  // driver restores): it runs on, and counts, until OnJobEnded. A plugin that names victims
  // never names it again, whatever the preemption plugin's MayPreempt says: what it frees is
  // its preemptor's already, and naming it twice would signal it twice.
  virtual void OnJobSignalled(const JobRequest& victim, Time now) {}
  // Why a job asking `gpus` is not admitted, e.g. "team vc1 uses 56 of its 64-GPU quota".
  virtual std::string Explain(const JobRequest& job) const = 0;
  // The profile's preemption plugin (owned by the engine, set once before the first cycle): a
  // plugin that names victims orders them and checks their eligibility through it.
  virtual void SetPreemption(const PreemptionPlugin* preemption) {}
};

// Preemption: which running jobs may be preempted, in which order, and how
// (src/sched/preemption.cc, docs/architecture.md "Preemption").
//
// Two paths preempt. Admission (the "kueue" plugin) names victims for quota reclaim and fair
// sharing; among candidates its policy ranks alike (Kueue: other ClusterQueues first, lower
// priority first) it asks this plugin for the order (VictimKey) and whether a job may be a
// victim yet (MayPreempt: minimum run time). And for the highest-priority job that does not fit
// on nodes, the engine asks SelectVictims for running jobs it may preempt by priority or QoS
// (Slurm's PreemptType=preempt/qos), cheapest first; the engine takes the fewest of them, in
// that order, with which the job fits.
//
// The engine tells the plugin of every start and end (and of each preemption), so the plugin
// knows each running job's current run: when it started, and whether it resumed from a
// checkpoint.
class PreemptionPlugin {
 public:
  virtual ~PreemptionPlugin() = default;
  virtual std::string_view name() const = 0;
  // Running jobs the engine may preempt so that `blocked` (the highest-priority job that does
  // not fit) can start, most preferred victim first (empty: none). Called once per cycle for
  // the head job when preempts() is true.
  virtual std::vector<JobIndex> SelectVictims(const JobRequest& blocked, Time now) = 0;
  // True when SelectVictims may return victims (priority or QoS preemption is configured): the
  // engine then runs cycles on a full cluster too.
  virtual bool preempts() const { return false; }
  // True when VictimKey orders admission's victims; false leaves admission its own order.
  virtual bool orders_victims() const { return false; }
  // Lower is preempted first among victims admission ranks alike.
  virtual double VictimKey(JobIndex victim, Time now) const { return 0; }
  // Whether `victim` (running) may be preempted by `preemptor` at `now`: false while it is
  // younger than the minimum run time, once it was preempted too often, and when it once
  // preempted `preemptor` (no preemption loops).
  virtual bool MayPreempt(JobIndex victim, JobIndex preemptor, Time now) const { return true; }
  // Slurm's PreemptExemptTime: a job runs at least this long before it may be preempted.
  virtual Duration min_run_time() const { return 0; }
  // Slurm's GraceTime: a victim is signalled and keeps running this long (it may take a final
  // checkpoint) before its GPUs go to the preemptor. 0: victims end at once.
  virtual Duration grace_time() const { return 0; }
  // The GraceTime `victim` gets: its QOS's GraceTime when the cluster spec sets one (Slurm's
  // GraceTime is a property of the preempted job's QOS), else grace_time().
  virtual Duration GraceTimeOf(const JobRequest& victim) const { return grace_time(); }
  // `resumed`: the run restores a checkpoint first (the job was preempted or interrupted before).
  virtual void OnJobStarted(const JobRequest& job, Time start, bool resumed) {}
  // The run ended (finished, cancelled, interrupted, or signalled for preemption).
  virtual void OnJobEnded(const JobRequest& job, Time now) {}
  // `victim` was preempted so that `preemptor` could start.
  virtual void OnPreempted(JobIndex victim, JobIndex preemptor, Time now) {}
};

}  // namespace gantry
