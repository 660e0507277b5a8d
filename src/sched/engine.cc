// The scheduling engine. See engine.h for the contract and docs/architecture.md for the design.
//
// Pending jobs live in per-team queues with time-invariant sort keys; a cycle merges the teams'
// queue heads by current priority (k-way), so no cycle re-sorts or rescans every pending job.
// A team whose quota is used up is skipped in O(1). Free GPUs are in a FreeIndex. Within one
// cycle free capacity only shrinks, so a job shape that failed to fit stays unfit for the rest
// of the cycle and is not tried again (the "failed shapes" memo).
#include "gantry/sched/engine.h"

#include <algorithm>
#include <cassert>
#include <climits>
#include <cstdio>
#include <queue>
#include <unordered_map>

#include "gantry/sched/fragmentation.h"
#include "placement.h"

namespace gantry {

const char* ReasonName(Reason r) {
  switch (r) {
    case Reason::kNone:
      return "None";
    case Reason::kPriority:
      return "Priority";
    case Reason::kResources:
      return "Resources";
    case Reason::kQuota:
      return "Quota";
    case Reason::kCohort:
      return "Cohort";
    case Reason::kReservation:
      return "Reservation";
    case Reason::kTopology:
      return "Topology";
    case Reason::kFragmentation:
      return "Fragmentation";
    case Reason::kStartedHead:
      return "StartedInOrder";
    case Reason::kStartedBackfill:
      return "Backfilled";
    case Reason::kAdopted:
      return "Adopted";
    case Reason::kCancelled:
      return "Cancelled";
    case Reason::kNodeDown:
      return "NodeDown";
    case Reason::kPreempted:
      return "Preempted";
    case Reason::kPower:
      return "Power";
    case Reason::kPreempting:
      return "Preempting";
  }
  return "Unknown";
}

namespace {

// Sort key inside a team's queue: higher key first, then earlier submit, then lower index.
struct QueueKey {
  double key;
  Time submit;
  JobIndex job;
  bool operator<(const QueueKey& o) const {
    if (key != o.key) return key > o.key;
    if (submit != o.submit) return submit < o.submit;
    return job < o.job;
  }
};
using Queue = std::set<QueueKey>;

// A failed placement attempt's shape; mode 0 = unconstrained, 1 = under reservation caps.
struct ShapeKey {
  int gpus, gpus_per_node, nodes;
  uint32_t mask;
  int mode;
  bool operator==(const ShapeKey& o) const {
    return gpus == o.gpus && gpus_per_node == o.gpus_per_node && nodes == o.nodes &&
           mask == o.mask && mode == o.mode;
  }
};

// Free GPUs over future time, as a step function, for conservative backfill: running jobs give
// their GPUs back at their expected end; each reservation takes its GPUs over its window. A
// whole-cluster count: a necessary condition only, which finds candidate start times fast; the
// per-node plan (NodePlan) decides whether the job fits there.
class FreeProfile {
 public:
  void Reset(Time now, int free_now) {
    steps_.clear();
    steps_.push_back({now, free_now});
  }
  // From `t` on, `gpus` more are free.
  void AddFrom(Time t, int gpus) {
    const size_t i = Split(t);
    for (size_t j = i; j < steps_.size(); ++j) steps_[j].free += gpus;
  }
  void Reserve(Time from, Time to, int gpus) {
    const size_t i = Split(from);
    const size_t j = to >= kInfiniteTime ? steps_.size() : Split(to);
    for (size_t k = i; k < j; ++k) steps_[k].free -= gpus;
  }
  // Earliest step time t >= `from` with at least `gpus` free throughout [t, t + length).
  Time EarliestStart(int gpus, Duration length, Time from) const {
    // The step holding `from`: the last one beginning at or before it.
    auto it = std::upper_bound(steps_.begin(), steps_.end(), from,
                               [](Time v, const Step& s) { return v < s.t; });
    size_t i = it == steps_.begin() ? 0 : static_cast<size_t>(it - steps_.begin()) - 1;
    while (i < steps_.size()) {
      if (steps_[i].free < gpus) {
        ++i;
        continue;
      }
      const Time start = std::max(steps_[i].t, from);
      const Time end = start + length;
      size_t j = i;
      while (j < steps_.size() && steps_[j].t < end && steps_[j].free >= gpus) ++j;
      if (j == steps_.size() || steps_[j].t >= end) return start;
      i = j + 1;  // any start in [i, j] overlaps the short step j
    }
    return kInfiniteTime;
  }
  // The first step time after t (kInfiniteTime if none).
  Time NextStepAfter(Time t) const {
    auto it = std::upper_bound(steps_.begin(), steps_.end(), t,
                               [](Time v, const Step& s) { return v < s.t; });
    return it == steps_.end() ? kInfiniteTime : it->t;
  }

 private:
  struct Step {
    Time t;
    int free;
  };
  // Index of the step beginning exactly at t, inserting one if needed.
  size_t Split(Time t) {
    auto it = std::lower_bound(steps_.begin(), steps_.end(), t,
                               [](const Step& s, Time v) { return s.t < v; });
    if (it != steps_.end() && it->t == t) return static_cast<size_t>(it - steps_.begin());
    const int free = it == steps_.begin() ? 0 : std::prev(it)->free;
    it = steps_.insert(it, Step{t, free});
    return static_cast<size_t>(it - steps_.begin());
  }
  std::vector<Step> steps_;
};

// Conservative backfill's plan per node, as Slurm's: each node's free GPUs over future time are
// what is free now plus the changes at event times: running jobs give their GPUs back at their
// expected ends, and each reservation takes GPUs of a set of nodes over its window. A job may
// use a node's GPUs over [t, t + length) only up to the least that node has free in that window,
// so no job ever takes GPUs that a reservation holds. Only nodes with events are stored.
class NodePlan {
 public:
  explicit NodePlan(size_t nodes) : events_(nodes), stamp_(nodes, 0) {}
  void Clear() {
    for (NodeIndex n : nodes_) events_[n].clear();
    nodes_.clear();
    ++epoch_;
  }
  // From `t` on, node n has `delta` more GPUs free.
  void Add(NodeIndex n, Time t, int delta) {
    if (stamp_[n] != epoch_) {
      stamp_[n] = epoch_;
      nodes_.push_back(n);
    }
    std::vector<Event>& ev = events_[n];
    auto it =
        std::upper_bound(ev.begin(), ev.end(), t, [](Time v, const Event& e) { return v < e.t; });
    ev.insert(it, Event{t, delta});
  }
  // The fewest GPUs node n has free at any instant of [from, to), given `free_now`.
  int MinFree(NodeIndex n, int free_now, Time from, Time to) const {
    int f = free_now;
    const std::vector<Event>& ev = events_[n];
    size_t i = 0;
    for (; i < ev.size() && ev[i].t <= from; ++i) f += ev[i].delta;
    int least = f;
    for (; i < ev.size() && ev[i].t < to; ++i) {
      f += ev[i].delta;
      least = std::min(least, f);
    }
    return least;
  }
  // The earliest t >= now at which node n has at least `g` GPUs free throughout [t, t + length)
  // (kInfiniteTime if never). O(events of n): one pass over its runs of enough free GPUs.
  Time EarliestRun(NodeIndex n, int free_now, Time now, Duration length, int g) const {
    const std::vector<Event>& ev = events_[n];
    int f = free_now;
    size_t i = 0;
    for (; i < ev.size() && ev[i].t <= now; ++i) f += ev[i].delta;
    Time run = f >= g ? now : kInfiniteTime;  // where the current run of f >= g began
    for (; i < ev.size(); ++i) {
      if (run < kInfiniteTime && ev[i].t - run >= length) return run;
      f += ev[i].delta;
      // Several events at one instant: judge the level after the last of them.
      if (i + 1 < ev.size() && ev[i + 1].t == ev[i].t) continue;
      if (f < g) {
        run = kInfiniteTime;
      } else if (run >= kInfiniteTime) {
        run = ev[i].t;
      }
    }
    return run;
  }
  const std::vector<NodeIndex>& nodes() const { return nodes_; }

 private:
  struct Event {
    Time t;
    int delta;
  };
  std::vector<std::vector<Event>> events_;
  std::vector<NodeIndex> nodes_;  // nodes with events
  std::vector<uint64_t> stamp_;
  uint64_t epoch_ = 1;
};

}  // namespace

class Engine::Impl {
  struct JobState;

 public:
  Impl(const Cluster& cluster, std::vector<Team> teams, const Profile& profile,
       const EngineOptions& options)
      : cluster_(cluster),
        teams_(std::move(teams)),
        profile_(profile),
        options_(options),
        free_(cluster),
        plan_free_(cluster),
        shares_(cluster),
        node_plan_(cluster.nodes().size()),
        caps_(cluster.nodes().size()),
        node_state_(cluster.nodes().size(), NodeState::kUp),
        held_(cluster.nodes().size(), 0),
        team_running_milli_(teams_.size(), 0),
        queues_(teams_.size()),
        quota_marked_(teams_.size(), 0) {}

  Status Init() {
    const PluginRegistry& registry =
        options_.registry ? *options_.registry : PluginRegistry::Builtin();
    PluginContext ctx{&cluster_, &teams_,        options_.oracle,
                      &registry, options_.users, options_.queues};
    ctx.data_locality = options_.data_locality;
    ctx.shared_gpus = &shares_;
    ctx.shared_gpu_of = [this](JobIndex j) {
      return j >= 0 && static_cast<size_t>(j) < state_.size() ? state_[j].shared_gpu : -1;
    };
    for (const PluginSpec& spec : profile_.priority) {
      auto f = registry.CreatePriority(spec.name, spec.args, ctx);
      if (!f.ok()) return f.status().WithContext("profile '" + profile_.name + "'");
      if ((*f)->max_age() > 0) {
        if (age_weight_ != 0) {
          return InvalidArgument("profile '" + profile_.name + "': more than one age factor");
        }
        max_age_ = (*f)->max_age();
        // Per second of waiting; plain FIFO (no cap) counts days.
        age_rate_ = spec.weight / static_cast<double>(max_age_ >= kInfiniteTime ? 86400 : max_age_);
        age_weight_ = spec.weight;
      }
      rekey_on_refresh_ = rekey_on_refresh_ || (*f)->job_value_changes();
      factors_.push_back(std::move(f).value());
      weights_.push_back(spec.weight);
    }
    for (const PluginSpec& spec : profile_.admission) {
      auto a = registry.CreateAdmission(spec.name, spec.args, ctx);
      if (!a.ok()) return a.status().WithContext("profile '" + profile_.name + "'");
      per_job_admission_ = per_job_admission_ || (*a)->per_job();
      admission_.push_back(std::move(a).value());
    }
    // A power cap holds whichever profile runs: the "power" plugin joins any profile that does not
    // name it when the cluster has caps.
    if (cluster_.power().has_caps() &&
        std::none_of(admission_.begin(), admission_.end(),
                     [](const auto& a) { return a->name() == "power"; })) {
      auto a = registry.CreateAdmission("power", PluginArgs("power", {}), ctx);
      if (!a.ok()) return a.status().WithContext("profile '" + profile_.name + "'");
      admission_.push_back(std::move(a).value());
    }
    auto p = registry.CreatePlacement(profile_.placement.name, profile_.placement.args, ctx);
    if (!p.ok()) return p.status().WithContext("profile '" + profile_.name + "'");
    placement_ = std::move(p).value();
    auto pre = registry.CreatePreemption(profile_.preemption.name, profile_.preemption.args, ctx);
    if (!pre.ok()) return pre.status().WithContext("profile '" + profile_.name + "'");
    preemption_ = std::move(pre).value();
    for (auto& a : admission_) a->SetPreemption(preemption_.get());
    preempts_ = preemption_->preempts();
    min_run_time_ = preemption_->min_run_time();
    return Status::Ok();
  }

  Status CheckNewJob(const JobRequest& job) const {
    if (job.index < 0) return InvalidArgument("job '" + job.id + "': negative index");
    if (job.team < 0 || job.team >= static_cast<int>(teams_.size())) {
      return InvalidArgument("job '" + job.id + "': team index " + std::to_string(job.team) +
                             " is not one of the " + std::to_string(teams_.size()) + " teams");
    }
    if (job.gpus <= 0) return InvalidArgument("job '" + job.id + "': asks for no GPUs");
    if (static_cast<size_t>(job.index) < state_.size() &&
        state_[job.index].status.phase != JobStatus::Phase::kUnknown) {
      return InvalidArgument("job '" + job.id + "' (index " + std::to_string(job.index) +
                             ") was already submitted");
    }
    return Status::Ok();
  }

  Status Submit(const JobRequest& job, Time now) {
    GANTRY_RETURN_IF_ERROR(CheckNewJob(job));
    if (static_cast<size_t>(job.index) >= state_.size()) state_.resize(job.index + 1);
    JobState& s = state_[job.index];
    s.job = &job;
    AddPending(s, now);
    return Status::Ok();
  }

  // Queues a job whose status is fresh: new, or reset by Requeue.
  [[gnu::always_inline]] void AddPending(JobState& s, Time now) {
    const JobRequest& job = *s.job;
    s.status.phase = JobStatus::Phase::kPending;
    s.status.reason = quota_marked_[job.team] ? Reason::kQuota : Reason::kPriority;
    double static_score = 0;
    for (size_t i = 0; i < factors_.size(); ++i)
      static_score += weights_[i] * factors_[i]->JobValue(job);
    s.static_score = static_score;
    const bool ages = age_rate_ > 0 && max_age_ < kInfiniteTime;
    if (ages && now - job.submit >= max_age_) {
      s.old = true;
      s.key = static_score + age_rate_ * static_cast<double>(max_age_);
    } else {
      s.old = false;
      s.key = static_score - age_rate_ * static_cast<double>(job.submit);
      if (ages) aging_.push({job.submit + max_age_, job.index});
    }
    Queues(job.team, s.old).insert({s.key, job.submit, job.index});
    ++pending_;
    dirty_ = true;
  }

  Status Finish(JobIndex j, Time now) {
    if (j < 0 || static_cast<size_t>(j) >= state_.size() ||
        state_[j].status.phase != JobStatus::Phase::kRunning) {
      return InvalidArgument("Finish(" + std::to_string(j) + "): the job is not running");
    }
    const bool signalled = state_[j].signalled;
    EndRunning(j, now);
    if (signalled) state_[j].status.reason = Reason::kPreempted;
    return Status::Ok();
  }

  void EndRunning(JobIndex j, Time now) {
    JobState& s = state_[j];
    if (s.shared_gpu >= 0) {
      // A share gives back exactly its units; its GPU goes back whole when the last share ends.
      // (A signalled share keeps nothing for its preemptor: preemption never counts on it.)
      const NodeIndex n = shares_.node(s.shared_gpu);
      if (shares_.Remove(s.shared_gpu, j, shares_.Units(free_.gpu_type(n), s.job->gpu_milli))) {
        ReleaseSlot({n, 1});
      }
      s.shared_gpu = -1;
    } else {
      for (const Slot& slot : s.placement) {
        // A signalled victim's GPUs that its preemptor will take stay booked for it.
        const int kept = s.signalled ? KeepForPreemptor(s.status.preempted_by, slot) : 0;
        if (slot.gpus > kept) ReleaseSlot({slot.node, slot.gpus - kept});
      }
    }
    // A signalled victim left the preemption plugin (no victim twice) at its signal; it holds
    // its quota until now.
    for (auto& a : admission_) a->OnJobEnded(*s.job, now);
    if (!s.signalled) preemption_->OnJobEnded(*s.job, now);
    for (auto& f : factors_) f->OnJobEnded(*s.job, now);
    if (min_run_time_ > 0) by_start_.erase({s.status.start, j});
    s.signalled = false;
    team_running_milli_[s.job->team] -= MilliGpus(*s.job);
    running_by_end_.erase({s.status.expected_end, j});
    ++running_epoch_;
    s.status.phase = JobStatus::Phase::kDone;
    --running_;
    dirty_ = true;
  }

  // GPUs a job gives back go to the free index, or stay held while their node is not up.
  void ReleaseSlot(const Slot& slot) {
    if (nodes_not_up_ == 0 || node_state_[slot.node] == NodeState::kUp) {
      free_.Release(slot.node, slot.gpus);
    } else {
      held_[slot.node] += slot.gpus;
    }
  }

  Status Cancel(JobIndex j, Time now) {
    const JobStatus::Phase phase = status(j).phase;
    if (phase == JobStatus::Phase::kPending) {
      JobState& s = state_[j];
      Queues(s.job->team, s.old).erase({s.key, s.job->submit, j});
      if (s.status.reason == Reason::kPreempting) DropWaitingPreemptor(j, now);
      planned_.erase(j);
      --pending_;
      s.status.phase = JobStatus::Phase::kDone;
      dirty_ = true;  // the head of the queue may have changed
    } else if (phase == JobStatus::Phase::kRunning) {
      EndRunning(j, now);
    } else {
      return FailedPrecondition("Cancel(" + std::to_string(j) +
                                "): the job is neither pending nor running");
    }
    JobStatus& st = state_[j].status;
    st.reason = Reason::kCancelled;
    st.reserved_start = kInfiniteTime;
    st.blocked_by = -1;
    return Status::Ok();
  }

  Status CheckNode(NodeIndex n, const char* op) const {
    if (n < 0 || static_cast<size_t>(n) >= node_state_.size()) {
      return InvalidArgument(std::string(op) + "(" + std::to_string(n) + "): no such node");
    }
    return Status::Ok();
  }

  // Takes the node's free GPUs out of the free index, so no placement sees them.
  void HoldFree(NodeIndex n) {
    const int f = free_.free(n);
    if (f > 0) free_.Allocate(n, f);
    held_[n] += f;
    ++running_epoch_;  // free capacity changed: EASY reservations must be recomputed
    dirty_ = true;
  }

  Status Drain(NodeIndex n, Time now) {
    GANTRY_RETURN_IF_ERROR(CheckNode(n, "Drain"));
    if (node_state_[n] == NodeState::kDown) {
      return FailedPrecondition("Drain: node " + cluster_.nodes()[n].name +
                                " is down; Up it first");
    }
    if (node_state_[n] == NodeState::kDrained) return Status::Ok();
    node_state_[n] = NodeState::kDrained;
    ++nodes_not_up_;
    HoldFree(n);
    return Status::Ok();
  }

  Status Down(NodeIndex n, Time now, std::vector<JobIndex>* interrupted) {
    GANTRY_RETURN_IF_ERROR(CheckNode(n, "Down"));
    if (node_state_[n] == NodeState::kDown) return Status::Ok();
    const bool was_up = node_state_[n] == NodeState::kUp;
    node_state_[n] = NodeState::kDown;
    if (was_up) {
      ++nodes_not_up_;
      HoldFree(n);
    }
    std::vector<JobIndex> victims;
    for (const auto& [end, j] : running_by_end_) {
      for (const Slot& slot : state_[j].placement) {
        if (slot.node == n) {
          victims.push_back(j);
          break;
        }
      }
    }
    std::sort(victims.begin(), victims.end());
    for (JobIndex j : victims) {
      EndRunning(j, now);
      state_[j].status.reason = Reason::kNodeDown;
      if (interrupted) interrupted->push_back(j);
    }
    dirty_ = true;
    return Status::Ok();
  }

  Status Up(NodeIndex n, Time now) {
    GANTRY_RETURN_IF_ERROR(CheckNode(n, "Up"));
    if (node_state_[n] == NodeState::kUp) return Status::Ok();
    node_state_[n] = NodeState::kUp;
    --nodes_not_up_;
    if (held_[n] > 0) free_.Release(n, held_[n]);
    held_[n] = 0;
    ++running_epoch_;
    dirty_ = true;
    return Status::Ok();
  }

  NodeState node_state(NodeIndex n) const {
    return n >= 0 && static_cast<size_t>(n) < node_state_.size() ? node_state_[n]
                                                                 : NodeState::kDown;
  }

  Status Requeue(JobIndex j, Time now) {
    const JobStatus& st = status(j);
    if (st.phase != JobStatus::Phase::kDone ||
        (st.reason != Reason::kNodeDown && st.reason != Reason::kPreempted)) {
      return FailedPrecondition(
          "Requeue(" + std::to_string(j) +
          "): only a job ended by a node going down or by preemption can be requeued");
    }
    JobState& s = state_[j];
    s.status = JobStatus();
    s.placement.clear();
    s.resumed = true;  // its next run restores a checkpoint first
    AddPending(s, now);
    return Status::Ok();
  }

  Status Adopt(const JobRequest& job, const Placement& placement, Time start, Time now) {
    GANTRY_RETURN_IF_ERROR(CheckNewJob(job));
    const std::string who = "Adopt(job '" + job.id + "'): ";
    if (start > now) return InvalidArgument(who + "starts after now");
    if (start < job.submit) return InvalidArgument(who + "starts before its submit time");
    const JobShape shape = ShapeOf(job);
    int total = 0;
    std::vector<NodeIndex> seen;
    for (const Slot& slot : placement) {
      if (slot.node < 0 || static_cast<size_t>(slot.node) >= node_state_.size() || slot.gpus <= 0) {
        return InvalidArgument(who + "bad slot (node " + std::to_string(slot.node) + ", " +
                               std::to_string(slot.gpus) + " GPUs)");
      }
      const Node& node = cluster_.nodes()[slot.node];
      if (!((job.gpu_type_mask >> node.gpu_type) & 1u)) {
        return InvalidArgument(who + "node " + node.name +
                               " has a GPU type the job does not allow");
      }
      if (!shape.any && slot.gpus != shape.gpus_per_node) {
        return InvalidArgument(who + "takes " + std::to_string(slot.gpus) + " GPUs on node " +
                               node.name + ", its shape says " +
                               std::to_string(shape.gpus_per_node));
      }
      const NodeState ns = node_state_[slot.node];
      if (ns == NodeState::kDown) return FailedPrecondition(who + "node " + node.name + " is down");
      int available = ns == NodeState::kUp ? free_.free(slot.node) : held_[slot.node];
      // A share may also join a shared GPU of that node with room.
      if (IsShare(job) && ShareRoomOn(slot.node, job.gpu_milli) >= 0) available = slot.gpus;
      if (slot.gpus > available) {
        return FailedPrecondition(who + "node " + node.name + " has " + std::to_string(available) +
                                  " GPUs not booked, the job takes " + std::to_string(slot.gpus));
      }
      total += slot.gpus;
      seen.push_back(slot.node);
    }
    std::sort(seen.begin(), seen.end());
    if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) {
      return InvalidArgument(who + "the placement names a node twice");
    }
    if (total != job.gpus || (!shape.any && static_cast<int>(placement.size()) != shape.nodes)) {
      return InvalidArgument(who + "the placement (" + std::to_string(total) + " GPUs on " +
                             std::to_string(placement.size()) + " nodes) is not the job's shape");
    }
    if (static_cast<size_t>(job.index) >= state_.size()) state_.resize(job.index + 1);
    JobState& s = state_[job.index];
    s.job = &job;
    s.placement = placement;
    if (IsShare(job)) {
      const NodeIndex n = placement.front().node;
      share_target_ = ShareRoomOn(n, job.gpu_milli);
      if (share_target_ < 0 && node_state_[n] != NodeState::kUp) {
        // A drained node's GPU: out of held_, and TakeShare must not take it from free_.
        held_[n] -= 1;
        share_target_ = shares_.Open(n);
      }
      TakeShare(job.index, s);
    } else {
      for (const Slot& slot : placement) {
        if (node_state_[slot.node] == NodeState::kUp) {
          free_.Allocate(slot.node, slot.gpus);
        } else {
          held_[slot.node] -= slot.gpus;
        }
      }
    }
    for (auto& a : admission_) a->OnJobStarted(job, placement, start);
    for (auto& f : factors_) f->OnJobStarted(job, now);
    preemption_->OnJobStarted(job, start, false);
    if (min_run_time_ > 0) by_start_.insert({start, job.index});
    team_running_milli_[job.team] += MilliGpus(job);
    s.status = JobStatus();
    s.status.phase = JobStatus::Phase::kRunning;
    s.status.reason = Reason::kAdopted;
    s.status.start = start;
    s.status.expected_end = start + std::max<Duration>(job.time_limit, 1);
    running_by_end_.insert({s.status.expected_end, job.index});
    ++running_epoch_;
    ++running_;
    dirty_ = true;
    return Status::Ok();
  }

  // RestorePreempting (engine.h): checks, then SignalVictims as the signal had done.
  Status RestorePreempting(JobIndex j, const std::vector<JobIndex>& victims,
                           const Placement& placement, Time grace_end, Time now) {
    const std::string who = "RestorePreempting(" + std::to_string(j) + "): ";
    if (j < 0 || static_cast<size_t>(j) >= state_.size() ||
        state_[j].status.phase != JobStatus::Phase::kPending ||
        state_[j].status.reason == Reason::kPreempting) {
      return FailedPrecondition(who + "the preemptor is not pending");
    }
    if (victims.empty()) return InvalidArgument(who + "no victims");
    GANTRY_RETURN_IF_ERROR(CheckVictims(who, victims, j));
    // What the victims do not hold must be free now on nodes that are up (SignalVictims books
    // it for the preemptor).
    for (const Slot& slot : placement) {
      if (slot.node < 0 || static_cast<size_t>(slot.node) >= node_state_.size() || slot.gpus <= 0) {
        return InvalidArgument(who + "bad slot (node " + std::to_string(slot.node) + ")");
      }
      if (node_state_[slot.node] != NodeState::kUp) {
        return FailedPrecondition(who + "node " + cluster_.nodes()[slot.node].name + " is not up");
      }
      int from_victims = 0;
      for (JobIndex v : victims) {
        for (const Slot& vs : state_[v].placement) {
          if (vs.node == slot.node) from_victims += vs.gpus;
        }
      }
      if (slot.gpus - std::min(slot.gpus, from_victims) > free_.free(slot.node)) {
        return FailedPrecondition(who + "node " + cluster_.nodes()[slot.node].name +
                                  " has not the GPUs the preemptor is to start on");
      }
    }
    decision_.victims = victims;
    scratch_ = placement;
    for (JobIndex v : victims) preemption_->OnPreempted(v, j, now);
    SignalVictims(j, now, grace_end, nullptr);
    dirty_ = true;
    return Status::Ok();
  }

  // RestoreSignalled (engine.h): the victims' side of SignalVictims, with no preemptor.
  Status RestoreSignalled(const std::vector<JobIndex>& victims, Time grace_end, Time now) {
    GANTRY_RETURN_IF_ERROR(CheckVictims("RestoreSignalled: ", victims, -1));
    for (JobIndex v : victims) {
      JobState& vs = state_[v];
      vs.signalled = true;
      vs.status.grace_end = grace_end;
      vs.status.preempted_by = -1;
      preemption_->OnJobEnded(*vs.job, now);
      for (auto& a : admission_) a->OnJobSignalled(*vs.job, now);
    }
    dirty_ = true;
    return Status::Ok();
  }

  // FailedPrecondition unless every victim is a running whole-GPU job that was not signalled
  // (and is not `preemptor`).
  Status CheckVictims(const std::string& who, const std::vector<JobIndex>& victims,
                      JobIndex preemptor) const {
    for (JobIndex v : victims) {
      if (v < 0 || static_cast<size_t>(v) >= state_.size() ||
          state_[v].status.phase != JobStatus::Phase::kRunning || state_[v].signalled ||
          state_[v].shared_gpu >= 0 || v == preemptor) {
        return FailedPrecondition(who + "victim " + std::to_string(v) +
                                  " is not a running whole-GPU job that was not signalled");
      }
    }
    return Status::Ok();
  }

  void PreemptibleChanged() { dirty_ = true; }

  void Schedule(Time now, std::vector<StartDecision>* starts) {
    changes_.clear();
    if (!refreshed_ || now >= next_refresh_) {
      TeamUsageView view{&teams_, &team_running_milli_};
      for (auto& f : factors_) f->Refresh(now, view);
      next_refresh_ = now + profile_.priority_recalc_interval;
      refreshed_ = true;
      ComputeTeamScores();
      if (rekey_on_refresh_) RekeyPending();
    }
    // A running job passing its minimum run time may be preempted now: worth a cycle.
    if (!dirty_ && min_run_time_ > 0 && pending_ > 0) {
      auto it = by_start_.lower_bound({last_cycle_ - min_run_time_ + 1, -1});
      if (it != by_start_.end() && it->first <= now - min_run_time_) dirty_ = true;
    }
    if (!dirty_) return;
    dirty_ = false;
    last_cycle_ = now;
    ++stats_.cycles;
    AgeJobs(now);
    if (!waiting_.empty()) StartWaitingPreemptors(now, starts);
    if (pending_ == 0) return;
    // A full cluster starts nothing (unless preemption makes room), but the cycle still runs:
    // the head's reason and estimate, and under conservative backfill every examined job's,
    // follow the plan at every instant.
    ++cycle_;
    touched_.clear();
    RunCycle(now, starts);
    SettleReasons();
  }

  Time NextWakeup(Time now) const {
    if (min_run_time_ <= 0 || pending_ == 0) return kInfiniteTime;
    auto it = by_start_.lower_bound({now - min_run_time_ + 1, -1});
    return it == by_start_.end() ? kInfiniteTime : it->first + min_run_time_;
  }

  const std::vector<JobIndex>& status_changes() const { return changes_; }

  const JobStatus& status(JobIndex j) const {
    static const JobStatus kUnknown;
    if (j < 0 || static_cast<size_t>(j) >= state_.size()) return kUnknown;
    return state_[j].status;
  }
  const Placement& placement(JobIndex j) const {
    static const Placement kEmpty;
    if (j < 0 || static_cast<size_t>(j) >= state_.size()) return kEmpty;
    return state_[j].placement;
  }
  // Shown only while the job is pending with a finite estimate, so it can never disagree with
  // reserved_start, whichever path cleared that. EASY's head's is computed here, on demand.
  const Placement& planned_placement(JobIndex j) {
    static const Placement kEmpty;
    if (j < 0 || static_cast<size_t>(j) >= state_.size()) return kEmpty;
    const JobState& s = state_[j];
    if (s.status.phase != JobStatus::Phase::kPending || s.status.reserved_start >= kInfiniteTime) {
      return kEmpty;
    }
    if (head_plan_dirty_ && j == reservation_head_ && s.status.reason != Reason::kPreempting) {
      PlanHead();
    }
    auto it = planned_.find(j);
    return it == planned_.end() ? kEmpty : it->second;
  }
  std::string Explain(JobIndex j);

  const FreeIndex& free_index() const { return free_; }
  const SharedGpus& shared_gpus() const { return shares_; }
  int32_t shared_gpu(JobIndex j) const {
    if (j < 0 || static_cast<size_t>(j) >= state_.size()) return -1;
    return state_[j].shared_gpu;
  }
  const std::vector<Team>& teams() const { return teams_; }
  int64_t team_running_milli(int t) const { return team_running_milli_[t]; }
  int64_t pending_count() const { return pending_; }
  int64_t running_count() const { return running_; }
  const EngineStats& stats() const { return stats_; }
  const Profile& profile() const { return profile_; }

 private:
  struct JobState {
    const JobRequest* job = nullptr;
    JobStatus status;
    double static_score = 0;
    double key = 0;
    bool old = false;        // aged past max_age: in the team's "old" queue
    bool resumed = false;    // requeued: its next run restores a checkpoint first
    bool signalled = false;  // running, signalled for preemption (GraceTime)
    Placement placement;
    int32_t shared_gpu = -1;  // running as a share (gpu_milli): its shared GPU (SharedGpus)
    // The cycle that last examined the job, and its reason and estimate before that cycle.
    uint64_t touched = 0;
    Reason prev_reason = Reason::kNone;
    Time prev_reserved = kInfiniteTime;
  };

  // The cycle examines `j`: remember its reason and estimate before, to report a change.
  void Touch(JobState& s, JobIndex j) {
    if (s.touched == cycle_) return;
    s.touched = cycle_;
    s.prev_reason = s.status.reason;
    s.prev_reserved = s.status.reserved_start;
    touched_.push_back(j);
  }

  // Sets a pending job's reason outside of an examination, reporting a change.
  void SetUnexamined(JobState& s, JobIndex j, Reason r) {
    JobStatus& st = s.status;
    if (st.reason == r && st.reserved_start >= kInfiniteTime && st.blocked_by < 0) return;
    st.reason = r;
    st.reserved_start = kInfiniteTime;
    st.blocked_by = -1;
    changes_.push_back(j);
  }

  // A team with no quota headroom has its queue skipped, so its jobs are never examined: they
  // are all marked Quota when the team reaches its quota and Priority again when it drops below
  // (O(team's queue) per such change, never per cycle).
  void MarkQuotaTeam(int team, bool at_quota) {
    if (static_cast<bool>(quota_marked_[team]) == at_quota) return;
    quota_marked_[team] = at_quota;
    for (bool old : {false, true}) {
      for (const QueueKey& k : Queues(team, old)) {
        JobState& s = state_[k.job];
        if (at_quota) {
          SetUnexamined(s, k.job, Reason::kQuota);
        } else if (s.status.reason == Reason::kQuota) {
          SetUnexamined(s, k.job, Reason::kPriority);
        }
      }
    }
  }

  // After a cycle: jobs the previous cycle examined and this one did not lose what it said
  // (Priority, or Quota in a team at its quota); the changes of examined jobs are reported.
  void SettleReasons() {
    // Starts during the cycle may have brought teams to their quota.
    for (size_t t = 0; t < queues_.size(); ++t) {
      if (!quota_marked_[t] && HeadroomMilli(static_cast<int>(t)) <= 0) {
        MarkQuotaTeam(static_cast<int>(t), true);
      }
    }
    for (JobIndex j : prev_touched_) {
      JobState& s = state_[j];
      if (s.touched == cycle_ || s.status.phase != JobStatus::Phase::kPending) continue;
      // A preemptor waiting out its victims' GraceTime is in no queue: its reason stands.
      if (s.status.reason == Reason::kPreempting) continue;
      SetUnexamined(s, j, quota_marked_[s.job->team] ? Reason::kQuota : Reason::kPriority);
    }
    for (JobIndex j : touched_) {
      const JobState& s = state_[j];
      if (s.status.phase == JobStatus::Phase::kPending &&
          (s.status.reason != s.prev_reason || s.status.reserved_start != s.prev_reserved)) {
        changes_.push_back(j);
      }
    }
    prev_touched_.swap(touched_);
  }

  // Why a job that did not fit on free GPUs waits: enough free in one domain's reach but not
  // inside one (Topology), enough free in total but not in its per-node shape (Fragmentation),
  // or not enough free GPUs of its types (Resources).
  Reason BlockedReason(const JobRequest& job) const {
    if (FitsIgnoringTopology(job)) return Reason::kTopology;
    if (free_.FreeOfTypes(job.gpu_type_mask) >= job.gpus) return Reason::kFragmentation;
    return Reason::kResources;
  }

  // Each team has two queues: jobs younger than max_age, whose age term still grows (key =
  // static - rate * submit, the common rate * now added at comparison), and older ones whose
  // age term is capped (key = static + rate * max_age).
  Queue& Queues(int team, bool old) { return old ? queues_[team].old : queues_[team].young; }

  void ComputeTeamScores() {
    team_score_.assign(teams_.size(), 0.0);
    for (size_t t = 0; t < teams_.size(); ++t) {
      for (size_t i = 0; i < factors_.size(); ++i) {
        team_score_[t] += weights_[i] * factors_[i]->TeamValue(static_cast<int>(t));
      }
    }
  }

  // Per-job values moved (per-user fair share): recompute every pending job's time-invariant
  // part and re-sort each team's queues. O(pending log pending), once per recalculation period.
  void RekeyPending() {
    for (size_t t = 0; t < queues_.size(); ++t) {
      for (bool old : {false, true}) {
        Queue& q = Queues(static_cast<int>(t), old);
        if (q.empty()) continue;
        Queue rekeyed;
        for (const QueueKey& k : q) {
          JobState& s = state_[k.job];
          double static_score = 0;
          for (size_t i = 0; i < factors_.size(); ++i)
            static_score += weights_[i] * factors_[i]->JobValue(*s.job);
          s.key += static_score - s.static_score;
          s.static_score = static_score;
          rekeyed.insert({s.key, k.submit, k.job});
        }
        q.swap(rekeyed);
      }
    }
    // Like a change of team scores, a new order alone does not start a cycle: the next event
    // (a submit, an end) does, and sees the new order.
  }

 public:
  std::vector<PriorityTerm> PriorityTerms(JobIndex j, Time now) const {
    std::vector<PriorityTerm> terms;
    if (j < 0 || static_cast<size_t>(j) >= state_.size() || state_[j].job == nullptr) return terms;
    const JobRequest& job = *state_[j].job;
    for (size_t i = 0; i < factors_.size(); ++i) {
      PriorityTerm term{std::string(factors_[i]->name()), weights_[i], 0};
      const Duration max_age = factors_[i]->max_age();
      if (max_age > 0) {
        const double waited = static_cast<double>(std::max<Duration>(0, now - job.submit));
        term.value = max_age >= kInfiniteTime ? waited / 86400.0
                                              : std::min(waited, static_cast<double>(max_age)) /
                                                    static_cast<double>(max_age);
      } else {
        term.value = factors_[i]->JobValue(job) + factors_[i]->TeamValue(job.team);
      }
      terms.push_back(std::move(term));
    }
    return terms;
  }

 private:
  void AgeJobs(Time now) {
    while (!aging_.empty() && aging_.top().first <= now) {
      const JobIndex j = aging_.top().second;
      aging_.pop();
      JobState& s = state_[j];
      // A preemptor waiting for its victims (GraceTime) is in no queue until it starts.
      if (s.status.phase != JobStatus::Phase::kPending || s.old ||
          s.status.reason == Reason::kPreempting) {
        continue;
      }
      Queues(s.job->team, false).erase({s.key, s.job->submit, j});
      s.old = true;
      s.key = s.static_score + age_rate_ * static_cast<double>(max_age_);
      Queues(s.job->team, true).insert({s.key, s.job->submit, j});
    }
  }

  // Milli-GPUs the team may still start (AdmissionPlugin::HeadroomMilli), over all plugins.
  int64_t HeadroomMilli(int team) const {
    int64_t h = kNoHeadroomLimit;
    for (const auto& a : admission_) h = std::min(h, a->HeadroomMilli(team));
    return h;
  }

  // One stream per (team, young|old) queue, merged by current priority.
  struct Stream {
    double priority;
    Time submit;
    JobIndex job;
    int team;
    bool old;
    Queue::const_iterator it;
    bool operator<(const Stream& o) const {  // max-heap: "less" is lower priority
      if (priority != o.priority) return priority < o.priority;
      if (submit != o.submit) return submit > o.submit;
      return job > o.job;
    }
  };

  void PushStream(std::vector<Stream>& heap, int team, bool old, Queue::const_iterator it,
                  Time now) {
    const Queue& q = old ? queues_[team].old : queues_[team].young;
    if (it == q.end()) return;
    const double age_term = old ? 0.0 : age_rate_ * static_cast<double>(now);
    heap.push_back({team_score_[team] + it->key + age_term, it->submit, it->job, team, old, it});
    std::push_heap(heap.begin(), heap.end());
  }

  bool ShapeFailed(const JobRequest& job, int mode) const {
    const ShapeKey k{job.gpus, job.gpus_per_node, job.nodes, job.gpu_type_mask, mode};
    return std::find(failed_.begin(), failed_.end(), k) != failed_.end();
  }
  void MarkShapeFailed(const JobRequest& job, int mode) {
    failed_.push_back({job.gpus, job.gpus_per_node, job.nodes, job.gpu_type_mask, mode});
  }

  // Forced inline into RunCycle: with the driver operations in this file GCC's choices cost the
  // simulator about 0.5% more instructions (measured with callgrind on a 100k-job trace).
  // A placement some admission plugin refuses (a power cap) sets power_refused_ and is memoized
  // as mode + 2: within a cycle the draw only grows, so the same shape stays refused.
  [[gnu::always_inline]] bool TryPlace(const JobRequest& job, int mode, const NodeCaps* caps,
                                       Time end) {
    power_refused_ = false;
    // A share first joins a shared GPU with room; failing that it takes a whole GPU as a 1-GPU
    // job would (Start opens a shared GPU there).
    if (IsShare(job)) [[unlikely]] {
      if (JoinShared(job, caps, end)) return true;
    }
    if (ShapeFailed(job, mode)) return false;
    if (ShapeFailed(job, mode + 2)) {
      power_refused_ = true;
      return false;
    }
    ++stats_.placements_tried;
    if (placement_->Place(job, free_, caps, &scratch_)) {
      avoid_.clear();
      for (int tries = 0;; ++tries) {
        const size_t named = avoid_.size();
        if (PlacementAdmitted(job, scratch_, end, &avoid_)) return true;
        if (tries == 3 || avoid_.size() == named) break;
        // Again, off the nodes the refusal named (and within `caps`).
        if (!retry_caps_) retry_caps_ = std::make_unique<NodeCaps>(cluster_.nodes().size());
        retry_caps_->Clear();
        if (caps != nullptr) {
          for (NodeIndex n : caps->touched()) retry_caps_->Set(n, caps->cap(n));
        }
        for (const auto& [first, end] : avoid_) {
          for (NodeIndex n = first; n < end; ++n) retry_caps_->Set(n, 0);
        }
        ++stats_.placements_tried;
        if (!placement_->Place(job, free_, retry_caps_.get(), &scratch_)) break;
      }
      power_refused_ = true;
      // Under a power reservation a refusal depends on the job's end too: not memoized.
      if (!power_reserved_) MarkShapeFailed(job, mode + 2);
      return false;
    }
    MarkShapeFailed(job, mode);
    return false;
  }

  // When shared GPU `g` is expected to be whole again: the latest expected end of its shares.
  Time SharedGpuEnd(int32_t g) const {
    Time end = 0;
    for (JobIndex o : shares_.jobs(g)) end = std::max(end, state_[o].status.expected_end);
    return end;
  }

  // Running share `r` is the one whose end gives its GPU back whole (the last to end, ties by
  // job index): reservations count that GPU free then, and no earlier.
  bool LastOnSharedGpu(JobIndex r) const {
    const Time end = state_[r].status.expected_end;
    for (JobIndex o : shares_.jobs(state_[r].shared_gpu)) {
      const Time e = state_[o].status.expected_end;
      if (o != r && (e > end || (e == end && o > r))) return false;
    }
    return true;
  }

  // A shared GPU on node `n` with room for `milli`, or -1.
  int32_t ShareRoomOn(NodeIndex n, int milli) const {
    return shares_.BestFit(1u << free_.gpu_type(n), milli,
                           [&](int32_t g) { return shares_.node(g) == n; });
  }

  // Places share `job` (running until `end`) on the best-fitting shared GPU with room, on a node
  // that is up: scratch_ gets its slot and share_target_ the GPU. Under a reservation's caps a
  // capped node's shared GPU is joined only by a share that ends before the GPU would be whole
  // again, so the reservation's GPU is not delayed. Joining turns no GPU busy, so admission sees
  // an empty placement (a shared GPU draws once, whatever its shares).
  bool JoinShared(const JobRequest& job, const NodeCaps* caps, Time end) {
    const bool all_up = nodes_not_up_ == 0;
    const int32_t g = shares_.BestFit(job.gpu_type_mask, job.gpu_milli, [&](int32_t c) {
      const NodeIndex n = shares_.node(c);
      if (!all_up && node_state_[n] != NodeState::kUp) return false;
      if (caps != nullptr && caps->cap(n) != INT_MAX && end > SharedGpuEnd(c)) return false;
      return true;
    });
    if (g < 0) return false;
    avoid_.clear();
    if (!PlacementAdmitted(job, Placement(), end, &avoid_)) return false;
    scratch_.assign(1, Slot{shares_.node(g), 1});
    share_target_ = g;
    return true;
  }

  // Books a starting share on its slot: the GPU JoinShared chose, or a new shared GPU opened on
  // a whole GPU taken from the free index.
  void TakeShare(JobIndex j, JobState& s) {
    const NodeIndex n = s.placement.front().node;
    int32_t g = share_target_;
    share_target_ = -1;
    if (g < 0) {
      free_.Allocate(n, 1);
      g = shares_.Open(n);
    }
    shares_.Add(g, j, shares_.Units(free_.gpu_type(n), s.job->gpu_milli));
    s.shared_gpu = g;
  }

  bool PlacementAdmitted(const JobRequest& job, const Placement& p, Time end,
                         std::vector<std::pair<NodeIndex, NodeIndex>>* avoid) {
    for (const auto& a : admission_) {
      if (!a->AdmitPlacement(job, p, end, avoid)) return false;
    }
    return true;
  }

  // `j` was refused by AdmitPlacement (power): the first such job of the cycle gets the
  // admission plugins' reservation (AdmissionPlugin::Reserve) and its time as its estimate.
  void ReserveAdmission(JobIndex j, Time now) {
    if (reserve_tried_) return;
    reserve_tried_ = true;
    Time at = kInfiniteTime;
    for (const auto& a : admission_) at = std::min(at, a->Reserve(*state_[j].job, now));
    state_[j].status.reserved_start = at;
    power_reserved_ = at < kInfiniteTime;
  }

  // True when the job would fit by GPU counts alone (no topology, no reservation caps): then
  // its wait is the topology's or the reservation's. O(types * GPUs per node), no node scans.
  bool FitsIgnoringTopology(const JobRequest& job) const {
    const JobShape s = ShapeOf(job);
    if (s.any) return free_.FreeOfTypes(job.gpu_type_mask) >= job.gpus;
    return free_.NodesWithFree(job.gpu_type_mask, s.gpus_per_node) >= s.nodes;
  }

  // `admitted`: admission already booked the job (at its victims' signal, GraceTime).
  void Start(JobIndex j, Time now, Reason reason, std::vector<StartDecision>* starts,
             bool admitted = false) {
    JobState& s = state_[j];
    const JobRequest& job = *s.job;
    Queues(job.team, s.old).erase({s.key, job.submit, j});
    if (!planned_.empty()) planned_.erase(j);
    s.placement = scratch_;
    if (IsShare(job)) [[unlikely]] {
      TakeShare(j, s);
    } else {
      for (const Slot& slot : s.placement) free_.Allocate(slot.node, slot.gpus);
    }
    if (!admitted) {
      for (auto& a : admission_) a->OnJobStarted(job, s.placement, now);
    }
    preemption_->OnJobStarted(job, now, s.resumed);
    if (min_run_time_ > 0) by_start_.insert({now, j});
    for (auto& f : factors_) f->OnJobStarted(job, now);
    team_running_milli_[job.team] += MilliGpus(job);
    s.status.phase = JobStatus::Phase::kRunning;
    s.status.reason = reason;
    s.status.start = now;
    s.status.expected_end = now + std::max<Duration>(job.time_limit, 1);
    s.status.reserved_start = kInfiniteTime;
    s.status.blocked_by = -1;
    running_by_end_.insert({s.status.expected_end, j});
    // A start in priority order may end after the head's shadow time: the head's reservation
    // must be recomputed. Backfilled starts never delay it (that is their condition).
    if (reason == Reason::kStartedHead) ++running_epoch_;
    --pending_;
    ++running_;
    starts->push_back({j, now, s.placement, reason, {}});
    starts->back().shared_gpu = s.shared_gpu;
  }

  // EASY: when the blocked head job can start if running jobs end at their time limits, and
  // which GPUs it will take then. Fills caps_ so that jobs running past that time leave those
  // GPUs alone. The head's planned placement is cleared, for PlanHead to compute when it is
  // asked for. Returns the shadow time (kInfiniteTime if running jobs never free enough).
  Time ComputeReservation(const JobRequest& head, Time now, Placement* planned) {
    planned->clear();
    ++stats_.reservations_computed;
    caps_.Clear();
    const JobShape shape = ShapeOf(head);
    const uint32_t mask = head.gpu_type_mask;
    const auto& nodes = cluster_.nodes();
    extra_.clear();
    const int g = shape.any ? 1 : shape.gpus_per_node;
    int nodes_ok = free_.NodesWithFree(mask, g);
    int total = free_.FreeOfTypes(mask);
    Time shadow = kInfiniteTime;
    const bool all_up = nodes_not_up_ == 0;  // a local: kept in a register through the walk
    for (const auto& [end, r] : running_by_end_) {
      if (state_[r].shared_gpu >= 0 && !LastOnSharedGpu(r)) [[unlikely]]
        continue;
      for (const Slot& slot : state_[r].placement) {
        if (!((mask >> nodes[slot.node].gpu_type) & 1u)) continue;
        // A drained or down node keeps what the job gives back.
        if (!all_up && node_state_[slot.node] != NodeState::kUp) continue;
        int& e = extra_[slot.node];
        const int before = free_.free(slot.node) + e;
        e += slot.gpus;
        if (before < g && before + slot.gpus >= g) ++nodes_ok;
        total += slot.gpus;
      }
      const bool fits = shape.any ? total >= head.gpus : nodes_ok >= shape.nodes;
      if (fits) {
        shadow = std::max(end, now);
        break;
      }
    }
    if (shadow >= kInfiniteTime) return shadow;
    head_plan_dirty_ = true;
    // Choose the reserved GPUs: nodes freed by the ending jobs first (lowest index), then nodes
    // free now. For each, slack = what is free at the shadow time minus what the head takes.
    std::vector<std::pair<NodeIndex, int>> avail;  // (node, free at shadow)
    for (const auto& [n, e] : extra_) avail.emplace_back(n, free_.free(n) + e);
    std::sort(avail.begin(), avail.end());
    int need = head.gpus;
    int nodes_left = shape.any ? INT_MAX : shape.nodes;
    auto reserve = [&](NodeIndex n, int at_shadow) {
      if (need <= 0 || nodes_left <= 0) return;
      const int take = shape.any ? std::min(need, at_shadow) : (at_shadow >= g ? g : 0);
      if (take <= 0) return;
      need -= take;
      --nodes_left;
      caps_.Set(n, at_shadow - take);
    };
    for (const auto& [n, at_shadow] : avail) reserve(n, at_shadow);
    if (need > 0 && nodes_left > 0) {
      free_.VisitDescending(mask, g, [&](NodeIndex n) {
        if (extra_.count(n) == 0) reserve(n, free_.free(n));
        return need > 0 && nodes_left > 0;
      });
    }
    return shadow;
  }

  // EASY: the head's planned placement, computed on demand (planned_placement, Explain) rather
  // than with every reservation: a placement that succeeds is a real search, and the GPUs back
  // by the shadow time are all the running jobs ending by then (every overdue one too), where
  // the reservation's walk stops at the first that makes room. Done with every reservation,
  // the engine benchmark's slurm-like cycle took 20 to 80 times as long (many overdue jobs);
  // the simulator never asks. From the state now: the placement plugin runs on the GPUs free
  // now plus those of the running jobs expected to end by the head's estimate (of its admitted
  // GPU types, on nodes that are up), counted free for the one call and taken back. Placement
  // plugins keep no state across calls that this could change (the head was tried in its
  // cycle, so scores that learn the workload saw it).
  void PlanHead() {
    head_plan_dirty_ = false;
    JobState& s = state_[reservation_head_];
    Placement& planned = planned_[reservation_head_];
    const Time shadow = s.status.reserved_start;
    const JobRequest* head = s.job;
    if (reservation_mask_ != head->gpu_type_mask) {
      plan_job_ = *head;
      plan_job_.gpu_type_mask = reservation_mask_;
      head = &plan_job_;
    }
    const uint32_t mask = head->gpu_type_mask;
    plan_back_.clear();
    for (const auto& [end, r] : running_by_end_) {
      if (end > shadow) break;
      if (state_[r].shared_gpu >= 0 && !LastOnSharedGpu(r)) continue;
      for (const Slot& slot : state_[r].placement) {
        if (!((mask >> free_.gpu_type(slot.node)) & 1u)) continue;
        if (nodes_not_up_ != 0 && node_state_[slot.node] != NodeState::kUp) continue;
        plan_back_.push_back(slot);
      }
    }
    for (const Slot& b : plan_back_) free_.Release(b.node, b.gpus);
    if (!placement_->Place(*head, free_, nullptr, &planned)) planned.clear();
    for (const Slot& b : plan_back_) free_.Allocate(b.node, b.gpus);
  }

  // Free GPUs from now on, as running jobs end at their limits. Down nodes hold no running jobs
  // and their GPUs are out of the free index; GPUs a job gives back on a drained node stay
  // there (held_), so they never count.
  void BuildFreeProfile(Time now) {
    profile_steps_.Reset(now, free_.total_free());
    node_plan_.Clear();
    for (const auto& [end, r] : running_by_end_) {
      const JobState& s = state_[r];
      if (s.shared_gpu >= 0 && !LastOnSharedGpu(r)) [[unlikely]]
        continue;
      int gpus = 0;
      for (const Slot& slot : s.placement) {
        if (nodes_not_up_ > 0 && node_state_[slot.node] != NodeState::kUp) continue;
        gpus += slot.gpus;
        node_plan_.Add(slot.node, std::max(end, now), slot.gpus);
      }
      if (gpus > 0) profile_steps_.AddFrom(std::max(end, now), gpus);
    }
    // plan_free_ starts as free_; PlanWindow changes only the nodes the plan has events on.
    for (size_t n = 0; n < cluster_.nodes().size(); ++n) {
      SetPlanFree(static_cast<NodeIndex>(n), free_.free(static_cast<NodeIndex>(n)));
    }
  }

  void SetPlanFree(NodeIndex n, int v) {
    const int c = plan_free_.free(n);
    if (v < c) plan_free_.Allocate(n, c - v);
    if (v > c) plan_free_.Release(n, v - c);
  }

  // Conservative backfill: the earliest window where `job` fits the per-node plan. Candidate
  // start times come from the cluster-wide count (a necessary condition); at each, every node
  // offers the least it has free over the whole window, and the placement plugin chooses among
  // those. Starts the job when that window opens now; otherwise reserves the nodes it chose.
  // Returns true when it started.
  bool PlanConservative(JobIndex j, const JobRequest& job, Time now,
                        std::vector<StartDecision>* starts) {
    JobStatus& st = state_[j].status;
    const Duration length = std::max<Duration>(job.time_limit, 1);
    if (IsShare(job) && JoinShared(job, nullptr, now + length)) [[unlikely]] {
      Start(j, now, Reason::kStartedBackfill, starts);
      return true;
    }
    const JobShape shape = ShapeOf(job);
    const int g = shape.any ? 1 : shape.gpus_per_node;
    Time from = now;
    if (!shape.any) {
      // No start before `shape.nodes` nodes could each hold their part for the whole window:
      // jump to the k-th earliest such time (nodes without plan events hold what is free now).
      int ready_now = free_.NodesWithFree(job.gpu_type_mask, g);
      runs_.clear();
      for (NodeIndex n : node_plan_.nodes()) {
        if (!((job.gpu_type_mask >> free_.gpu_type(n)) & 1u)) continue;
        if (free_.free(n) >= g) --ready_now;
        const Time e = node_plan_.EarliestRun(n, free_.free(n), now, length, g);
        if (e < kInfiniteTime) runs_.push_back(e);
      }
      const int more = shape.nodes - ready_now;  // nodes still needed from those with events
      if (more > 0) {
        if (more > static_cast<int>(runs_.size())) {
          st.reserved_start = kInfiniteTime;
          return false;
        }
        std::nth_element(runs_.begin(), runs_.begin() + (more - 1), runs_.end());
        from = std::max(from, runs_[more - 1]);
      }
    }
    while (true) {
      Time t = profile_steps_.EarliestStart(job.gpus, length, from);
      if (t >= kInfiniteTime) {
        st.reserved_start = kInfiniteTime;
        return false;
      }
      t = std::max(t, now);
      // What each node with plan events offers over the window, and whether the job's shape
      // could fit those offers by counts (the other nodes offer what is free now): only then
      // is the placement plugin asked.
      offers_.clear();
      int fits_nodes = free_.NodesWithFree(job.gpu_type_mask, g);
      int fits_gpus = free_.FreeOfTypes(job.gpu_type_mask);
      for (NodeIndex n : node_plan_.nodes()) {
        const int now_free = free_.free(n);
        int v = node_plan_.MinFree(n, now_free, t, t + length);
        // A job past its expected end still holds its GPUs now: a start now takes only what
        // is free.
        if (t <= now) v = std::min(v, now_free);
        v = std::max(0, v);
        offers_.emplace_back(n, v);
        if ((job.gpu_type_mask >> free_.gpu_type(n)) & 1u) {
          fits_nodes += (v >= g) - (now_free >= g);
          fits_gpus += v - now_free;
        }
      }
      if (shape.any ? fits_gpus < job.gpus : fits_nodes < shape.nodes) {
        from = profile_steps_.NextStepAfter(t);
        continue;
      }
      for (const auto& [n, v] : offers_) SetPlanFree(n, v);
      ++stats_.placements_tried;
      if (placement_->Place(job, plan_free_, nullptr, &scratch_)) {
        if (t <= now) {
          // A start now must also keep every power cap; power is not planned per node: a
          // refused job waits, with the cycle's power reservation if it is the first and a
          // plugin makes one (ReserveAdmission), as under EASY.
          avoid_.clear();
          if (!PlacementAdmitted(job, scratch_, now + length, &avoid_)) {
            power_refused_ = true;
            st.reason = Reason::kPower;
            st.reserved_start = kInfiniteTime;
            ReserveAdmission(j, now);
            return false;
          }
        }
        profile_steps_.Reserve(t, t + length, job.gpus);
        if (t <= now) {
          for (const Slot& slot : scratch_) node_plan_.Add(slot.node, now + length, slot.gpus);
          Start(j, now, Reason::kStartedBackfill, starts);
          return true;
        }
        for (const Slot& slot : scratch_) {
          node_plan_.Add(slot.node, t, -slot.gpus);
          node_plan_.Add(slot.node, t + length, slot.gpus);
        }
        st.reserved_start = t;
        planned_[j] = scratch_;
        return false;
      }
      from = profile_steps_.NextStepAfter(t);
    }
  }

  void RunCycle(Time now, std::vector<StartDecision>* starts) {
    failed_.clear();
    power_reserved_ = reserve_tried_ = false;
    for (const auto& a : admission_) a->BeginCycle(now);
    std::vector<Stream>& heap = heap_;
    heap.clear();
    for (size_t t = 0; t < queues_.size(); ++t) {
      const bool at_quota = HeadroomMilli(static_cast<int>(t)) <= 0;
      MarkQuotaTeam(static_cast<int>(t), at_quota);
      if (at_quota) continue;
      PushStream(heap, static_cast<int>(t), false, queues_[t].young.begin(), now);
      PushStream(heap, static_cast<int>(t), true, queues_[t].old.begin(), now);
    }
    JobIndex head = -1;  // the highest-priority job that could not start
    Time shadow = kInfiniteTime;
    int examined = 0;
    int scanned = 0;
    const int max_jobs = profile_.max_jobs_per_cycle;
    const int max_scan = profile_.max_scan_per_cycle;
    const BackfillMode mode = profile_.backfill;
    // Jobs of teams at or above their entitlement wait in deferred_ and are examined once the
    // queues hold nothing more (Profile::below_share_first).
    const BelowShareFirst below_share_first =
        mode == BackfillMode::kNone ? BelowShareFirst::kNone : profile_.below_share_first;
    if (below_share_first != BelowShareFirst::kNone) ComputeEntitlements();
    deferred_.clear();
    size_t replayed = 0;
    int64_t tried_before = -1;  // placements tried before the previous job, if it may move
    while (!heap.empty() || replayed < deferred_.size()) {
      // The previous job tried no placement: with max_scan it counts there, not in max_jobs.
      if (tried_before >= 0 && stats_.placements_tried == tried_before) {
        --examined;
        ++scanned;
      }
      tried_before = -1;
      if (max_jobs > 0 && examined >= max_jobs) break;
      if (max_scan > 0 && scanned >= max_scan) break;
      // Nothing can start on a full cluster; the head still gets its reason and estimate, and
      // conservative backfill goes on planning.
      if (free_.total_free() == 0 && !per_job_admission_ && head >= 0 &&
          mode != BackfillMode::kConservative && shares_.open_total() == 0) {
        break;
      }
      JobIndex j;
      int64_t headroom;
      if (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end());
        Stream s = heap.back();
        heap.pop_back();
        headroom = HeadroomMilli(s.team);
        if (headroom <= 0) continue;  // quota used up: skip the team's whole queue
        j = s.job;
        PushStream(heap, s.team, s.old, std::next(s.it), now);
        const bool defers = below_share_first == BelowShareFirst::kAll ||
                            (below_share_first == BelowShareFirst::kBackfill && head >= 0);
        if (defers && static_cast<double>(team_running_milli_[s.team]) >= entitled_milli_[s.team]) {
          deferred_.push_back(j);
          continue;
        }
      } else {
        j = deferred_[replayed++];
        headroom = HeadroomMilli(state_[j].job->team);
        if (headroom <= 0) continue;
      }
      JobState& st = state_[j];
      const JobRequest& job = *st.job;
      ++examined;
      ++stats_.jobs_examined;
      if (max_scan > 0) tried_before = stats_.placements_tried;
      Touch(st, j);
      st.status.blocked_by = -1;
      st.status.reserved_start = kInfiniteTime;
      if (MilliGpus(job) > headroom) {
        st.status.reason = Reason::kQuota;
        continue;
      }
      // Per-job admission (Kueue): the flavor it gets narrows its GPU types; victims mean it
      // fits its quota only after preempting them.
      const JobRequest* admitted = &job;
      if (per_job_admission_) {
        if (!AdmitJob(job, now)) {
          st.status.reason = Reason::kQuota;
          for (const auto& a : admission_) {
            if (a->WaitsForCohort(job)) st.status.reason = Reason::kCohort;
          }
          continue;
        }
        if (decision_.gpu_type_mask != job.gpu_type_mask) {
          narrowed_ = job;
          narrowed_.gpu_type_mask = decision_.gpu_type_mask;
          admitted = &narrowed_;
        }
        if (!decision_.victims.empty()) {
          // Behind a blocked head only EASY may start it, and only on GPUs the head's
          // reservation leaves alone; conservative backfill does not preempt past the head.
          if (head >= 0 && mode != BackfillMode::kEasy) {
            st.status.reason = Reason::kQuota;
            continue;
          }
          power_refused_ = false;
          if (!PreemptAndStart(j, *admitted, now, head < 0 ? nullptr : &caps_,
                               head < 0 ? Reason::kStartedHead : Reason::kStartedBackfill,
                               starts)) {
            st.status.reason = power_refused_ ? Reason::kPower : Reason::kQuota;
          }
          continue;
        }
      }
      if (head < 0) {
        if (TryPlace(*admitted, 0, nullptr, now + std::max<Duration>(job.time_limit, 1))) {
          Start(j, now, Reason::kStartedHead, starts);
          continue;
        }
        if (power_refused_) {
          // Power is shared like GPUs: in strict order nobody passes it. With backfill the
          // first such job may have power reserved (ReserveAdmission: power's reserve: true),
          // as the head has GPUs.
          st.status.reason = Reason::kPower;
          if (mode == BackfillMode::kNone) break;
          ReserveAdmission(j, now);
          continue;
        }
        // Priority/QoS preemption (the profile's preemption plugin) for the head job.
        if (preempts_ && PreemptForHead(j, *admitted, now, starts)) continue;
        st.status.reason = BlockedReason(*admitted);
        head = j;
        // Strict order: nobody passes the head, and there is no plan, hence no estimate (the
        // walk over running jobs would cost FIFO's cycle half again).
        if (mode == BackfillMode::kNone) break;
        if (mode == BackfillMode::kEasy) {
          // The reservation (shadow time and caps, less what long backfills took since) stays
          // exact while the head is the same job and no running job ended or started ahead of
          // it: reuse it instead of walking the running jobs again.
          if (j != reservation_head_ || running_epoch_ != reservation_epoch_ ||
              now >= reservation_shadow_ || admitted->gpu_type_mask != reservation_mask_) {
            reservation_shadow_ = ComputeReservation(*admitted, now, &planned_[j]);
            reservation_head_ = j;
            reservation_epoch_ = running_epoch_;
            reservation_mask_ = admitted->gpu_type_mask;
          }
          shadow = reservation_shadow_;
          st.status.reserved_start = shadow;
        } else {
          BuildFreeProfile(now);
          PlanConservative(j, *admitted, now, starts);
        }
        continue;
      }
      // Backfill: start `job` only if no reservation is delayed.
      if (mode == BackfillMode::kEasy) {
        const Time end = now + std::max<Duration>(job.time_limit, 1);
        const bool short_enough = end <= shadow;
        if (TryPlace(*admitted, short_enough ? 0 : 1, short_enough ? nullptr : &caps_, end)) {
          // A share that joined a shared GPU took no whole GPU from the reservation's caps.
          if (!short_enough && share_target_ < 0) {
            for (const Slot& slot : scratch_) {
              if (caps_.cap(slot.node) != INT_MAX)
                caps_.Set(slot.node, caps_.cap(slot.node) - slot.gpus);
            }
          }
          // The head's planned placement: a job running past the shadow time holds GPUs the
          // plan may have counted, or changes what the placement plugin prefers then.
          if (!short_enough) head_plan_dirty_ = true;
          Start(j, now, Reason::kStartedBackfill, starts);
        } else {
          const Reason r = power_refused_ ? Reason::kPower : BlockedReason(*admitted);
          st.status.reason = r == Reason::kTopology ? Reason::kReservation : r;
          st.status.blocked_by = st.status.reason == Reason::kReservation ? head : -1;
        }
      } else {
        // Why it cannot start now, unless the plan starts it: what would fit on the free
        // GPUs waits for higher-priority reservations.
        const Reason r = BlockedReason(*admitted);
        st.status.reason = r == Reason::kTopology ? Reason::kReservation : r;
        PlanConservative(j, *admitted, now, starts);
      }
    }
  }

  // Each team's entitlement now, in milli-GPUs: its weighted max-min fair share of the cluster's
  // GPUs among the teams that want GPUs (running and pending), within its quota. Wants change
  // only between cycles, so one computation serves the whole cycle.
  void ComputeEntitlements() {
    const size_t n = teams_.size();
    want_milli_.assign(n, 0);
    share_weight_.assign(n, 1.0);
    for (size_t t = 0; t < n; ++t) {
      int64_t want = team_running_milli_[t];
      for (bool old : {false, true}) {
        for (const QueueKey& k : Queues(static_cast<int>(t), old)) {
          want += MilliGpus(*state_[k.job].job);
        }
      }
      want_milli_[t] = static_cast<double>(want);
      if (teams_[t].quota_gpus != kNoQuota) {
        want_milli_[t] =
            std::min(want_milli_[t], static_cast<double>(teams_[t].quota_gpus) * kMilliPerGpu);
      }
      if (teams_[t].shares > 0) share_weight_[t] = teams_[t].shares;
    }
    WaterFill(static_cast<double>(cluster_.total_gpus()) * kMilliPerGpu, want_milli_, share_weight_,
              &entitled_milli_, &fill_order_);
  }

  // Every admission plugin admits `job`: decision_ holds the intersection of their GPU types and
  // the union of their victims.
  bool AdmitJob(const JobRequest& job, Time now) {
    decision_.gpu_type_mask = job.gpu_type_mask;
    victims_.clear();
    AdmissionDecision d;
    for (const auto& a : admission_) {
      if (!a->Admit(job, now, &d)) return false;
      decision_.gpu_type_mask &= d.gpu_type_mask;
      for (JobIndex v : d.victims) {
        if (std::find(victims_.begin(), victims_.end(), v) == victims_.end()) victims_.push_back(v);
      }
    }
    decision_.victims = victims_;
    return decision_.gpu_type_mask != 0;
  }

  // Ends decision_.victims and starts `j` (placed as `job`, its flavor's types) if, with the
  // victims' GPUs counted free, it fits on nodes (under `caps` when given). Nothing changes when
  // it does not fit: quota alone never preempts a job for a start that cannot happen. With
  // GraceTime the victims are signalled instead and `j` waits for them (SignalVictims).
  bool PreemptAndStart(JobIndex j, const JobRequest& job, Time now, const NodeCaps* caps,
                       Reason reason, std::vector<StartDecision>* starts) {
    const std::vector<JobIndex>& victims = decision_.victims;
    ReleaseVictims(victims, +1);
    ++stats_.placements_tried;
    const bool fits = placement_->Place(job, free_, caps, &scratch_);
    ReleaseVictims(victims, -1);
    if (!fits) return false;
    // Power caps are checked with the victims still drawing: conservative, never over a cap.
    avoid_.clear();
    if (!PlacementAdmitted(job, scratch_, now + std::max<Duration>(job.time_limit, 1), &avoid_)) {
      power_refused_ = true;
      return false;
    }
    if (caps != nullptr) {
      for (const Slot& slot : scratch_) {
        if (caps_.cap(slot.node) != INT_MAX) caps_.Set(slot.node, caps_.cap(slot.node) - slot.gpus);
      }
    }
    for (JobIndex v : victims) preemption_->OnPreempted(v, j, now);
    // Signalled when any victim has a GraceTime; a victim whose QOS gives it none is then
    // signalled to end at once, and its preemptor still waits for the others.
    const bool signal = std::any_of(victims.begin(), victims.end(), [&](JobIndex v) {
      return preemption_->GraceTimeOf(*state_[v].job) > 0;
    });
    if (signal) {
      SignalVictims(j, now, /*restored_end=*/-1, starts);
      return true;
    }
    for (JobIndex v : victims) {
      EndRunning(v, now);
      JobStatus& vs = state_[v].status;
      vs.reason = Reason::kPreempted;
      vs.preempted_by = j;
    }
    failed_.clear();  // capacity grew: shapes that failed this cycle may fit now
    Start(j, now, reason, starts);
    starts->back().preempted = victims;
    return true;
  }

  // sign +1: the victims' GPUs (on nodes that are up) count as free; -1 undoes it.
  void ReleaseVictims(const std::vector<JobIndex>& victims, int sign) {
    for (JobIndex v : victims) {
      // A share frees no whole GPU by itself: preemption never counts on its GPU.
      if (state_[v].shared_gpu >= 0) continue;
      for (const Slot& slot : state_[v].placement) {
        if (nodes_not_up_ != 0 && node_state_[slot.node] != NodeState::kUp) continue;
        if (sign > 0) {
          free_.Release(slot.node, slot.gpus);
        } else {
          free_.Allocate(slot.node, slot.gpus);
        }
      }
    }
  }

  // GraceTime: decision_.victims keep running, each signalled to end by now + its GraceTime
  // (GraceTimeOf: its QOS's, else the plugin's; the preemptor waits for the last), or all by
  // `restored_end` when a restarted driver restores the signal (RestorePreempting); `j` leaves its
  // queue and waits with the placement in scratch_. The GPUs of that placement that no victim
  // holds are booked for it now, and so is its quota: until the victims end, both count in
  // admission's books (the victims still hold their GPUs), so nobody else is admitted on the
  // quota the preemption frees. `starts` (null when restored) gets the kPreempting decision.
  void SignalVictims(JobIndex j, Time now, Time restored_end, std::vector<StartDecision>* starts) {
    JobState& s = state_[j];
    const JobRequest& job = *s.job;
    WaitingPreemptor w;
    w.job = j;
    w.victims = decision_.victims;
    w.placement = scratch_;
    for (const Slot& slot : scratch_) {
      int from_victims = 0;
      for (JobIndex v : w.victims) {
        if (state_[v].shared_gpu >= 0) continue;  // gives back no whole GPU (ReleaseVictims)
        for (const Slot& vs : state_[v].placement) {
          if (vs.node == slot.node) from_victims += vs.gpus;
        }
      }
      const int held = slot.gpus - std::min(slot.gpus, from_victims);
      if (held > 0) {
        free_.Allocate(slot.node, held);
        w.held.push_back({slot.node, held});
      }
    }
    Time end_by = now;
    for (JobIndex v : w.victims) {
      JobState& vs = state_[v];
      vs.signalled = true;
      vs.status.grace_end =
          restored_end >= 0 ? restored_end : now + preemption_->GraceTimeOf(*vs.job);
      end_by = std::max(end_by, vs.status.grace_end);
      vs.status.preempted_by = j;
      preemption_->OnJobEnded(*vs.job, now);
      for (auto& a : admission_) a->OnJobSignalled(*vs.job, now);
    }
    for (auto& a : admission_) a->OnJobStarted(job, w.placement, now);
    Queues(job.team, s.old).erase({s.key, job.submit, j});
    s.status.reason = Reason::kPreempting;
    s.status.reserved_start = end_by;
    planned_[j] = w.placement;
    s.status.blocked_by = -1;
    if (starts != nullptr) {
      starts->push_back({j, now, w.placement, Reason::kPreempting, w.victims, end_by});
    }
    waiting_.push_back(std::move(w));
    ++running_epoch_;  // free capacity shrank: reservations must be recomputed
  }

  // Starts, on their planned placements, the waiting preemptors whose victims have all ended;
  // one whose placement cannot be used any more goes back to its queue.
  void StartWaitingPreemptors(Time now, std::vector<StartDecision>* starts) {
    for (size_t i = 0; i < waiting_.size();) {
      WaitingPreemptor& w = waiting_[i];
      bool ended = true;
      for (JobIndex v : w.victims) {
        if (state_[v].status.phase == JobStatus::Phase::kRunning && state_[v].signalled) {
          ended = false;
        }
      }
      if (!ended) {
        ++i;
        continue;
      }
      const JobIndex j = w.job;
      for (const Slot& h : w.held) ReleaseSlot(h);
      bool usable = true;
      for (const Slot& slot : w.placement) {
        if (node_state_[slot.node] != NodeState::kUp || free_.free(slot.node) < slot.gpus) {
          usable = false;
        }
      }
      JobState& s = state_[j];
      if (usable) {
        scratch_ = w.placement;
        Start(j, now, Reason::kStartedHead, starts, /*admitted=*/true);
      } else {
        for (auto& a : admission_) a->OnJobEnded(*s.job, now);
        s.status.reserved_start = kInfiniteTime;
        --pending_;  // AddPending counts it again, keyed for its age now
        AddPending(s, now);
      }
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }

  // A signalled victim of `preemptor` gives back `slot`: how many of those GPUs the preemptor's
  // placement still needs on that node (up) and now keeps booked.
  int KeepForPreemptor(JobIndex preemptor, const Slot& slot) {
    if (nodes_not_up_ != 0 && node_state_[slot.node] != NodeState::kUp) return 0;
    for (WaitingPreemptor& w : waiting_) {
      if (w.job != preemptor) continue;
      int need = 0;
      for (const Slot& p : w.placement) {
        if (p.node == slot.node) need += p.gpus;
      }
      Slot* held = nullptr;
      for (Slot& h : w.held) {
        if (h.node == slot.node) held = &h;
      }
      const int have = held ? held->gpus : 0;
      const int take = std::min(slot.gpus, need - have);
      if (take <= 0) return 0;
      if (held) {
        held->gpus += take;
      } else {
        w.held.push_back({slot.node, take});
      }
      return take;
    }
    return 0;
  }

  // A waiting preemptor was cancelled: its booked GPUs and quota go back.
  void DropWaitingPreemptor(JobIndex j, Time now) {
    for (size_t i = 0; i < waiting_.size(); ++i) {
      if (waiting_[i].job != j) continue;
      for (const Slot& h : waiting_[i].held) ReleaseSlot(h);
      for (auto& a : admission_) a->OnJobEnded(*state_[j].job, now);
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
      ++running_epoch_;
      return;
    }
  }

  // Priority/QoS preemption for the head job `j` (placed as `job`), which does not fit: the
  // fewest of the plugin's candidates, in its order, with which it fits on nodes; then
  // PreemptAndStart. False when no set of candidates makes it fit.
  bool PreemptForHead(JobIndex j, const JobRequest& job, Time now,
                      std::vector<StartDecision>* starts) {
    std::vector<JobIndex> candidates = preemption_->SelectVictims(*state_[j].job, now);
    if (candidates.empty()) return false;
    const uint32_t mask = job.gpu_type_mask;
    const auto& nodes = cluster_.nodes();
    std::vector<JobIndex> taken;
    int usable = free_.FreeOfTypes(mask);
    bool fits = false;
    for (JobIndex v : candidates) {
      const JobState& vs = state_[v];
      if (vs.status.phase != JobStatus::Phase::kRunning || vs.signalled) continue;
      if (vs.shared_gpu >= 0) continue;  // a share frees no whole GPU by itself
      int gain = 0;
      for (const Slot& slot : vs.placement) {
        if ((mask >> nodes[slot.node].gpu_type) & 1u) gain += slot.gpus;
      }
      if (gain == 0) continue;  // GPUs of no use to this job
      taken.push_back(v);
      ReleaseVictims({v}, +1);
      usable += gain;
      if (usable < job.gpus) continue;
      ++stats_.placements_tried;
      if (placement_->Place(job, free_, nullptr, &scratch_)) {
        fits = true;
        break;
      }
    }
    if (fits) {
      // Give back earlier picks the job does not need, last first (keeps the cheapest set the
      // order allows).
      for (int i = static_cast<int>(taken.size()) - 2; i >= 0; --i) {
        ReleaseVictims({taken[i]}, -1);
        ++stats_.placements_tried;
        if (placement_->Place(job, free_, nullptr, &scratch_)) {
          taken.erase(taken.begin() + i);
        } else {
          ReleaseVictims({taken[i]}, +1);
        }
      }
    }
    ReleaseVictims(taken, -1);
    if (!fits) return false;
    decision_.victims = taken;
    return PreemptAndStart(j, job, now, nullptr, Reason::kStartedHead, starts);
  }

  const Cluster& cluster_;
  std::vector<Team> teams_;
  Profile profile_;
  EngineOptions options_;
  FreeIndex free_;
  // Conservative backfill: the per-node plan, and a free index holding, for one candidate
  // window, what each node may give a job (free_ where the plan has no events).
  FreeIndex plan_free_;
  // GPUs shared by fractional jobs (whole GPUs taken out of free_), and the one a share about to
  // start joins (JoinShared, for Start; -1: open a new one).
  SharedGpus shares_;
  int32_t share_target_ = -1;
  NodePlan node_plan_;
  std::vector<std::pair<NodeIndex, int>> offers_;  // per candidate window: (node, GPUs)
  std::vector<Time> runs_;                         // per planned job: nodes' earliest windows
  NodeCaps caps_;
  std::vector<NodeState> node_state_;
  int nodes_not_up_ = 0;  // the hot paths skip node_state_ while every node is up
  // GPUs of drained or down nodes kept out of free_: free ones when the node left, and those
  // jobs gave back since. Up releases them.
  std::vector<int> held_;
  std::vector<std::unique_ptr<PriorityFactor>> factors_;
  std::vector<double> weights_;
  std::vector<std::unique_ptr<AdmissionPlugin>> admission_;
  std::unique_ptr<PlacementPlugin> placement_;
  std::unique_ptr<PreemptionPlugin> preemption_;
  bool rekey_on_refresh_ = false;  // a factor's JobValue moves at Refresh
  double age_rate_ = 0;
  double age_weight_ = 0;
  Duration max_age_ = kInfiniteTime;

  std::vector<JobState> state_;
  std::vector<int64_t> team_running_milli_;  // per team, MilliGpus of its running jobs
  std::vector<double> team_score_;
  struct TeamQueues {
    Queue young, old;
  };
  std::vector<TeamQueues> queues_;
  using AgingEntry = std::pair<Time, JobIndex>;
  std::priority_queue<AgingEntry, std::vector<AgingEntry>, std::greater<>> aging_;
  std::set<std::pair<Time, JobIndex>> running_by_end_;
  int64_t pending_ = 0;
  int64_t running_ = 0;
  bool dirty_ = false;
  bool refreshed_ = false;
  Time next_refresh_ = 0;
  EngineStats stats_;

  // Per-cycle scratch, kept to avoid reallocation.
  std::vector<Stream> heap_;
  std::vector<JobIndex> deferred_;  // below_share_first: jobs of teams at or above their share
  std::vector<double> want_milli_, share_weight_, entitled_milli_;  // ComputeEntitlements
  std::vector<int> fill_order_;
  std::vector<ShapeKey> failed_;
  Placement scratch_;
  std::unordered_map<NodeIndex, int> extra_;
  FreeProfile profile_steps_;
  // EASY reservation cache: valid for reservation_head_ while running_epoch_ is unchanged.
  uint64_t running_epoch_ = 0;
  uint64_t reservation_epoch_ = ~0ull;
  JobIndex reservation_head_ = -1;
  uint32_t reservation_mask_ = 0;
  Time reservation_shadow_ = kInfiniteTime;
  // The reservation head's planned placement is to be computed (PlanHead); plan_job_ is the
  // head with its admitted GPU types, plan_back_ the GPUs counted back by its estimate.
  bool head_plan_dirty_ = false;
  JobRequest plan_job_;
  Placement plan_back_;
  // Planned placements (planned_placement), kept apart from JobState because few jobs have one
  // (EASY's head, the jobs conservative backfill examines, waiting preemptors): erased when the
  // job starts or is cancelled, shown only while its estimate is finite.
  std::unordered_map<JobIndex, Placement> planned_;
  // Per-job admission (AdmissionPlugin::per_job): the current job's decision, and the job with
  // its types narrowed to the admitted flavor.
  bool per_job_admission_ = false;
  AdmissionDecision decision_;
  bool power_refused_ = false;   // the last placement tried was refused by AdmitPlacement
  bool reserve_tried_ = false;   // this cycle's ReserveAdmission was asked for
  bool power_reserved_ = false;  // ... and some admission plugin made a reservation
  std::vector<std::pair<NodeIndex, NodeIndex>> avoid_;  // node ranges refusals named
  std::unique_ptr<NodeCaps> retry_caps_;                // caps of a placement tried again
  std::vector<JobIndex> victims_;
  JobRequest narrowed_;
  // The preemption plugin's settings, and jobs waiting for signalled victims (GraceTime).
  bool preempts_ = false;
  Duration min_run_time_ = 0;
  struct WaitingPreemptor {
    JobIndex job;
    std::vector<JobIndex> victims;
    Placement placement;  // where it starts
    // What of it is booked for it: GPUs idle at the signal, then what its victims give back as
    // they end (KeepForPreemptor); all of it once the last victim ended.
    Placement held;
  };
  std::vector<WaitingPreemptor> waiting_;
  // Running jobs by start, with a minimum run time: when the next one may be preempted.
  std::set<std::pair<Time, JobIndex>> by_start_;
  Time last_cycle_ = 0;
  // Reason bookkeeping (status_changes): the cycle count, the jobs this and the previous cycle
  // examined, the changes of the last Schedule call, and which teams are marked at quota.
  uint64_t cycle_ = 0;
  std::vector<JobIndex> touched_, prev_touched_, changes_;
  std::vector<uint8_t> quota_marked_;
};

std::string Engine::Impl::Explain(JobIndex j) {
  const JobStatus& st = status(j);
  if (st.phase == JobStatus::Phase::kUnknown) return "unknown job";
  const JobState& s = state_[j];
  const JobRequest& job = *s.job;
  std::string out;
  char buf[256];
  switch (st.phase) {
    case JobStatus::Phase::kDone:
      if (st.reason == Reason::kCancelled) return "cancelled";
      if (st.reason == Reason::kNodeDown) {
        return "ended when a node it ran on went down (the driver may requeue it)";
      }
      if (st.reason == Reason::kPreempted) {
        return "preempted so that job " +
               (st.preempted_by >= 0 ? state_[st.preempted_by].job->id : std::string("?")) +
               " could start (the driver may requeue it)";
      }
      [[fallthrough]];
    case JobStatus::Phase::kRunning: {
      if (st.phase == JobStatus::Phase::kRunning && st.grace_end >= 0) {
        // No preemptor: restored by a driver that could not restore its preemption.
        return std::string("signalled for preemption") +
               (st.preempted_by >= 0
                    ? " so that job " + state_[st.preempted_by].job->id + " can start"
                    : "") +
               "; runs on (GraceTime) until t=" + std::to_string(st.grace_end) + " at the latest";
      }
      if (st.reason == Reason::kAdopted) {
        std::snprintf(buf, sizeof buf, "adopted: running since t=%lld on %zu node(s)",
                      static_cast<long long>(st.start), s.placement.size());
        return buf;
      }
      std::snprintf(
          buf, sizeof buf, "%s at t=%lld on %zu node(s)",
          st.reason == Reason::kStartedBackfill
              ? "started early by backfill (it ends before any reservation it could delay)"
              : "started in priority order",
          static_cast<long long>(st.start), s.placement.size());
      out = buf;
      if (st.phase == JobStatus::Phase::kDone) out += "; finished";
      return out;
    }
    default:
      break;
  }
  if (st.reason == Reason::kPreempting) {
    return "preempting: its victims were signalled and it starts on their GPUs once they end, "
           "by t=" +
           std::to_string(st.reserved_start) + " (GraceTime)";
  }
  // A team at its quota has its queue skipped without touching its jobs, so ask admission now
  // rather than trusting the last recorded reason.
  for (const auto& a : admission_) {
    if (!a->CanEverAdmit(job)) {
      return "can never start: larger than anything team " + teams_[job.team].name +
             " could ever get: " + a->Explain(job);
    }
    if (a->HeadroomMilli(job.team) < MilliGpus(job)) return "waiting for quota: " + a->Explain(job);
  }
  if ((st.reason == Reason::kQuota || st.reason == Reason::kCohort) && per_job_admission_) {
    for (const auto& a : admission_) {
      if (a->per_job()) {
        return (st.reason == Reason::kCohort
                    ? "waiting for its cohort (others use the quota it could borrow or lent): "
                    : "waiting for quota: ") +
               a->Explain(job);
      }
    }
  }
  std::string estimate;
  if (st.reserved_start < kInfiniteTime) {
    estimate = "; expected to start by t=" + std::to_string(st.reserved_start);
    const Placement& planned = planned_placement(j);
    // The planned nodes (planned_placement), a few by name: where a driver stages its data.
    constexpr size_t kNamed = 8;
    for (size_t i = 0; i < planned.size() && i < kNamed; ++i) {
      estimate += (i == 0 ? (planned.size() == 1 ? " on node " : " on nodes ") : ",") +
                  cluster_.nodes()[planned[i].node].name;
    }
    if (planned.size() > kNamed) {
      estimate += " and " + std::to_string(planned.size() - kNamed) + " more";
    }
    estimate += " (if running jobs end at their time limits)";
  }
  switch (st.reason) {
    case Reason::kQuota:
      return "waiting for quota";
    case Reason::kResources:
      return "waiting for " + std::to_string(job.gpus) + " GPUs of its types to be free" + estimate;
    case Reason::kTopology:
      return "enough GPUs are free, but not inside one allowed topology domain" + estimate;
    case Reason::kFragmentation:
      return "enough GPUs are free in total, but no " + std::to_string(ShapeOf(job).nodes) +
             " node(s) have room for its shape" + estimate;
    case Reason::kPower:
      out = "waiting for power";
      for (const auto& a : admission_) {
        if (a->name() == "power") out += ": " + a->Explain(job);
      }
      return out;
    case Reason::kReservation:
      return "GPUs are free, but starting now would delay the reservation of " +
             (st.blocked_by >= 0 ? "job " + state_[st.blocked_by].job->id
                                 : std::string("higher-priority jobs")) +
             estimate;
    default:
      break;
  }
  out = "waiting behind higher-priority jobs; priority terms: ";
  for (size_t i = 0; i < factors_.size(); ++i) {
    if (i) out += ", ";
    out += factors_[i]->Describe(job);
  }
  return out;
}

Result<std::unique_ptr<Engine>> Engine::Create(const Cluster& cluster, std::vector<Team> teams,
                                               const Profile& profile,
                                               const EngineOptions& options) {
  auto impl = std::make_unique<Impl>(cluster, std::move(teams), profile, options);
  GANTRY_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;
Status Engine::Submit(const JobRequest& job, Time now) { return impl_->Submit(job, now); }
Status Engine::Finish(JobIndex job, Time now) { return impl_->Finish(job, now); }
Status Engine::Cancel(JobIndex job, Time now) { return impl_->Cancel(job, now); }
Status Engine::Drain(NodeIndex node, Time now) { return impl_->Drain(node, now); }
Status Engine::Down(NodeIndex node, Time now, std::vector<JobIndex>* interrupted) {
  return impl_->Down(node, now, interrupted);
}
Status Engine::Up(NodeIndex node, Time now) { return impl_->Up(node, now); }
NodeState Engine::node_state(NodeIndex node) const { return impl_->node_state(node); }
Status Engine::Requeue(JobIndex job, Time now) { return impl_->Requeue(job, now); }
void Engine::PreemptibleChanged() { impl_->PreemptibleChanged(); }
Status Engine::Adopt(const JobRequest& job, const Placement& placement, Time start, Time now) {
  return impl_->Adopt(job, placement, start, now);
}
Status Engine::RestorePreempting(JobIndex preemptor, const std::vector<JobIndex>& victims,
                                 const Placement& placement, Time grace_end, Time now) {
  return impl_->RestorePreempting(preemptor, victims, placement, grace_end, now);
}
Status Engine::RestoreSignalled(const std::vector<JobIndex>& victims, Time grace_end, Time now) {
  return impl_->RestoreSignalled(victims, grace_end, now);
}
void Engine::Schedule(Time now, std::vector<StartDecision>* starts) {
  impl_->Schedule(now, starts);
}
Time Engine::NextWakeup(Time now) const { return impl_->NextWakeup(now); }
const JobStatus& Engine::status(JobIndex job) const { return impl_->status(job); }
const std::vector<JobIndex>& Engine::status_changes() const { return impl_->status_changes(); }
const Placement& Engine::placement(JobIndex job) const { return impl_->placement(job); }
const Placement& Engine::planned_placement(JobIndex job) const {
  return impl_->planned_placement(job);
}
std::string Engine::Explain(JobIndex job) const { return impl_->Explain(job); }
std::vector<PriorityTerm> Engine::PriorityTerms(JobIndex job, Time now) const {
  return impl_->PriorityTerms(job, now);
}
const FreeIndex& Engine::free_index() const { return impl_->free_index(); }
const SharedGpus& Engine::shared_gpus() const { return impl_->shared_gpus(); }
int32_t Engine::shared_gpu(JobIndex job) const { return impl_->shared_gpu(job); }
const std::vector<Team>& Engine::teams() const { return impl_->teams(); }
int Engine::team_running_gpus(int team) const {
  const int64_t milli = impl_->team_running_milli(team);
  return static_cast<int>((milli + kMilliPerGpu - 1) / kMilliPerGpu);
}
int64_t Engine::team_running_milli(int team) const { return impl_->team_running_milli(team); }
int64_t Engine::pending_count() const { return impl_->pending_count(); }
int64_t Engine::running_count() const { return impl_->running_count(); }
const EngineStats& Engine::stats() const { return impl_->stats(); }
const Profile& Engine::profile() const { return impl_->profile(); }

}  // namespace gantry
