#include "gantry/sim/simulator.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <queue>
#include <set>

#include "gantry/sched/engine.h"
#include "gantry/sched/fragmentation.h"
#include "gantry/sched/power.h"
#include "gantry/sim/failures.h"
#include "invariant_checker.h"

namespace gantry {
namespace {

// Counts pending jobs by GPU count, to ask "how many pending jobs ask for at most F GPUs" in
// O(log) for the fragmentation metric.
class Fenwick {
 public:
  explicit Fenwick(int n) : tree_(n + 1, 0) {}
  void Add(int i, int delta) {
    for (++i; i < static_cast<int>(tree_.size()); i += i & -i) tree_[i] += delta;
  }
  int64_t PrefixSum(int i) const {  // sum of [0, i]
    int64_t s = 0;
    if (i >= static_cast<int>(tree_.size()) - 1) i = static_cast<int>(tree_.size()) - 2;
    for (++i; i > 0; i -= i & -i) s += tree_[i];
    return s;
  }

 private:
  std::vector<int64_t> tree_;
};

// Pending jobs grouped by the GPU types they may use, for the fragmentation wait: a job waits
// "for fragmentation" while at least as many GPUs of the types it may use are idle as it asks
// for (GPUs it could not use do not count). One group, and the plain idle total, on a cluster
// of one type or when every job takes any type.
class PendingByTypes {
 public:
  explicit PendingByTypes(const Cluster& c)
      : c_(c),
        all_(c.gpu_types().size() >= 32 ? ~0u : (1u << c.gpu_types().size()) - 1),
        gpus_of_type_(c.gpu_types().size(), 0),
        busy_of_type_(c.gpu_types().size(), 0) {
    for (const Node& n : c.nodes()) gpus_of_type_[n.gpu_type] += n.gpus;
  }
  void Pending(const Job& job, int delta) {
    const uint32_t mask = job.gpu_type_mask & all_;
    auto it = std::find_if(groups_.begin(), groups_.end(),
                           [&](const auto& g) { return g.first == mask; });
    if (it == groups_.end()) {
      groups_.emplace_back(mask, Fenwick(c_.total_gpus() + 1));
      it = groups_.end() - 1;
    }
    it->second.Add(job.gpus, delta);
  }
  void Busy(const Placement& p, int sign) {
    for (const Slot& s : p) busy_of_type_[c_.nodes()[s.node].gpu_type] += sign * s.gpus;
  }
  // Pending jobs asking for no more than the idle GPUs of their types. Under a cluster power
  // cap only as many as the cap has power for count: a job waiting for power waits for that,
  // not for fragmentation.
  int64_t FragWaiting(const PowerMeter& power) const {
    int64_t n = 0;
    for (const auto& [mask, fenwick] : groups_) {
      int64_t idle = 0;
      for (size_t t = 0; t < gpus_of_type_.size(); ++t) {
        if ((mask >> t) & 1u) idle += gpus_of_type_[t] - busy_of_type_[t];
      }
      idle = std::min(idle, power.BusyGpusLeft(mask));
      n += fenwick.PrefixSum(static_cast<int>(idle));
    }
    return n;
  }

 private:
  const Cluster& c_;
  uint32_t all_;
  std::vector<int64_t> gpus_of_type_;
  std::vector<int64_t> busy_of_type_;
  std::vector<std::pair<uint32_t, Fenwick>> groups_;
};

// FGD's expected fragmentation (sched/fragmentation.h) of the running cluster, over the
// workload's kinds of job: a running sum of per-node values, updated on the nodes a start or
// an end touches (O(kinds) per node).
class FragmentationSum {
 public:
  FragmentationSum(const Cluster& c, const std::vector<Job>& jobs)
      : c_(c), busy_(c.nodes().size(), 0), frag_(c.nodes().size(), 0) {
    for (const Job& j : jobs) mix_.Add(j);
    for (size_t n = 0; n < frag_.size(); ++n) Update(static_cast<NodeIndex>(n));
  }
  void Busy(const Placement& p, int sign) {
    for (const Slot& s : p) {
      busy_[s.node] += sign * s.gpus;
      Update(s.node);
    }
  }
  // Clamped: rounding in the running sum may leave a hair below 0 when nothing is fragmented.
  double total() const { return total_ > 0 ? total_ : 0; }

 private:
  void Update(NodeIndex n) {
    total_ -= frag_[n];
    const Node& node = c_.nodes()[n];
    frag_[n] = WholeGpuFragmentation(node.gpus - busy_[n], node.gpu_type, mix_);
    total_ += frag_[n];
  }
  const Cluster& c_;
  TaskMix mix_;
  std::vector<int> busy_;
  std::vector<double> frag_;
  double total_ = 0;
};

// Innermost topology level whose one domain holds every node of the placement; -1 for a single
// node, levels().size() when no domain holds them all.
int SpanLevel(const Cluster& c, const Placement& p) {
  if (p.size() <= 1) return -1;
  NodeIndex lo = p[0].node, hi = p[0].node;
  for (const Slot& s : p) {
    lo = std::min(lo, s.node);
    hi = std::max(hi, s.node);
  }
  for (DomainIndex d = c.nodes()[lo].domain; d >= 0; d = c.domains()[d].parent) {
    const Domain& dom = c.domains()[d];
    if (dom.first_node <= lo && hi < dom.end_node) return dom.level;
  }
  return static_cast<int>(c.levels().size());
}

// The simulator knows what really happened: the trace's run times. Oracle profiles read them
// through this, and only through this; the engine sees JobRequests, which carry no run time.
class TraceRuntimeOracle final : public RuntimeOracle {
 public:
  explicit TraceRuntimeOracle(const std::vector<Job>& jobs) : jobs_(jobs) {}
  Duration TrueRunTime(const JobRequest& job) const override { return jobs_[job.index].run_time; }

 private:
  const std::vector<Job>& jobs_;
};

// Under a capped clock (PowerSpec::capped_slowdown) every job runs that many times as long, and
// its time limit stretches with it (a site that slows its clocks raises its limits).
std::vector<Job> StretchedJobs(const std::vector<Job>& jobs, double slowdown) {
  std::vector<Job> out = jobs;
  const auto stretch = [slowdown](Duration d) {
    return static_cast<Duration>(std::ceil(static_cast<double>(d) * slowdown));
  };
  for (Job& j : out) {
    j.run_time = stretch(j.run_time);
    if (j.time_limit > 0 && j.time_limit < kInfiniteTime) j.time_limit = stretch(j.time_limit);
  }
  return out;
}

int64_t PeakRssKb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

}  // namespace

Result<SimResult> Simulate(const Cluster& cluster, const std::vector<Team>& teams,
                           const Workload& workload, const Profile& profile,
                           const SimOptions& options) {
  const auto wall_start = std::chrono::steady_clock::now();
  const double slowdown = cluster.power().capped_slowdown;
  const std::vector<Job> stretched =
      slowdown != 1 ? StretchedJobs(workload.jobs, slowdown) : std::vector<Job>();
  const std::vector<Job>& jobs = slowdown != 1 ? stretched : workload.jobs;
  const TraceRuntimeOracle oracle(jobs);
  EngineOptions engine_options;
  engine_options.oracle = &oracle;
  engine_options.users = &workload.users;
  engine_options.queues = &workload.queues;
  GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                          Engine::Create(cluster, teams, profile, engine_options));
  SimResult result;
  // An oracle profile is one the engine cannot create without the trace's run times (registry.h);
  // the same options but the oracle succeeded just above, so nothing else can make this fail.
  EngineOptions no_oracle = engine_options;
  no_oracle.oracle = nullptr;
  result.oracle = !Engine::Create(cluster, teams, profile, no_oracle).ok();
  result.profile = profile.name;
  result.workload = &workload;
  result.cluster = &cluster;
  result.teams = teams;
  result.outcomes.resize(jobs.size());
  result.preemption_plugin = profile.preemption.name;
  result.cycle = options.cycle;
  result.launch_latency = options.launch_latency;
  result.end_latency = options.end_latency;

  std::vector<JobIndex> order(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].index != static_cast<JobIndex>(i)) {
      return InvalidArgument("workload job " + jobs[i].id + " has index " +
                             std::to_string(jobs[i].index) + " at position " + std::to_string(i));
    }
    order[i] = static_cast<JobIndex>(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](JobIndex a, JobIndex b) { return jobs[a].submit < jobs[b].submit; });
  const std::vector<ClusterEvent>& events = options.events;
  for (size_t i = 0; i < events.size(); ++i) {
    const ClusterEvent& e = events[i];
    const size_t limit =
        e.kind == ClusterEvent::Kind::kCancel ? jobs.size() : cluster.nodes().size();
    if (e.index < 0 || static_cast<size_t>(e.index) >= limit) {
      return InvalidArgument("events line " + std::to_string(e.line) + ": target " + e.target +
                             " is not resolved (ResolveClusterEvents)");
    }
    if (i > 0 && e.at < events[i - 1].at) {
      return InvalidArgument("events line " + std::to_string(e.line) + ": events are not sorted");
    }
  }

  using FinishEvent = std::pair<Time, JobIndex>;
  std::priority_queue<FinishEvent, std::vector<FinishEvent>, std::greater<>> finishes;
  bool kueue_quotas = false;
  for (const PluginSpec& a : profile.admission) kueue_quotas = kueue_quotas || a.name == "kueue";
  InvariantChecker checker(cluster, teams, kueue_quotas);
  PendingByTypes pending_by_types(cluster);
  FragmentationSum fragmentation(cluster, jobs);
  std::vector<Placement> started_on(jobs.size());  // the current run's placement, per job
  // Energy: the meter follows the draw; each run's busy watts are charged to its job when it
  // ends, the rest of the draw (idle GPUs, node_watts) to the cluster.
  PowerMeter power(cluster);
  std::vector<Time> run_start(jobs.size(), 0);
  std::vector<double> job_joules(jobs.size(), 0);
  result.peak_watts = static_cast<double>(power.cluster_mw()) / 1000.0;
  std::vector<int64_t> domain_peak_mw(power.capped_domains().empty() ? 0
                                                                     : cluster.domains().size());
  for (DomainIndex d : power.capped_domains()) domain_peak_mw[d] = power.domain_mw(d);
  std::vector<StartDecision> starts;

  // SimOptions::cycle: decisions only at ticks, and ends seen at the first tick at or after
  // them. With no cycle every instant is a tick.
  if (options.cycle < 0 || options.launch_latency < 0 || options.end_latency < 0) {
    return InvalidArgument("cycle, launch latency and end latency must not be negative");
  }
  const Duration cycle = options.cycle;
  const auto tick_at_or_after = [cycle](Time t) {
    if (cycle <= 1 || t >= kInfiniteTime) return t;
    const Time r = t % cycle;
    return r == 0 ? t : t + (r > 0 ? cycle - r : -r);
  };
  // When the engine learns of a run's end at `end`.
  const auto end_seen = [&](Time end) { return tick_at_or_after(end + options.end_latency); };
  const Time first = jobs.empty() ? 0 : jobs[order.front()].submit;
  const Time last_submit = jobs.empty() ? 0 : jobs[order.back()].submit;
  Duration sample_every =
      std::max<Duration>(1, (last_submit - first) / std::max(1, options.target_samples));
  Time next_sample = first;
  const int num_teams = static_cast<int>(teams.size());
  // GPUs in use, in milli-GPUs: a share (gpu_milli) counts as gpu_milli / 1000 of a GPU.
  std::vector<int64_t> team_busy(num_teams, 0);
  std::vector<int32_t> team_busy_gpus(num_teams, 0);
  const auto to_gpus = [](int64_t milli) { return static_cast<int32_t>((milli + 500) / 1000); };
  const auto team_sample = [&]() -> const std::vector<int32_t>& {
    for (int t = 0; t < num_teams; ++t) team_busy_gpus[t] = to_gpus(team_busy[t]);
    return team_busy_gpus;
  };
  // Shared GPUs (Engine::shared_gpu): each run's GPU, and how many runs each holds, so that a
  // shared GPU counts once as busy (power, fragmentation, idle GPUs by type) from its first
  // share to the end of its last.
  std::vector<int32_t> run_shared_gpu(jobs.size(), -1);
  std::vector<int32_t> shares_on_gpu;

  size_t next_submit = 0, next_event = 0;
  int64_t processed = 0, pending = 0, running = 0, busy = 0;
  const int64_t total_events =
      static_cast<int64_t>(jobs.size()) * 2 + static_cast<int64_t>(events.size());
  int64_t next_progress = 0;
  Time prev = first;

  Time now = first;
  // The state and the counters so far, as a time sample at `t`.
  const auto sample_at = [&](Time t) {
    return TimeSample{t,
                      to_gpus(busy),
                      static_cast<int32_t>(pending),
                      static_cast<int32_t>(running),
                      team_sample(),
                      result.preemptions,
                      result.requeues,
                      result.node_failures,
                      result.preemption_lost_gpu_seconds,
                      result.lost_gpu_seconds};
  };
  const auto end_running = [&](const Job& job) {
    --running;
    busy -= MilliGpus(job);
    team_busy[job.team] -= MilliGpus(job);
    const int32_t g = run_shared_gpu[job.index];
    // A share is charged its fraction of its GPU's busy watts.
    const double fraction = g >= 0 ? static_cast<double>(job.gpu_milli) / 1000.0 : 1.0;
    job_joules[job.index] += fraction *
                             static_cast<double>(power.BusyMilliwatts(started_on[job.index])) /
                             1000.0 * static_cast<double>(now - run_start[job.index]);
    if (g >= 0) {
      run_shared_gpu[job.index] = -1;
      if (--shares_on_gpu[g] > 0) return;  // the GPU stays busy with its other shares
    }
    pending_by_types.Busy(started_on[job.index], -1);
    fragmentation.Busy(started_on[job.index], -1);
    power.Add(started_on[job.index], -1);
  };
  // Per-job progress, kept only when runs can be interrupted: work saved by checkpoints, and the
  // restart cost the current run pays first.
  // A profile that preempts turns this on at its first preemption (all zeros until then).
  bool interruptible = !events.empty() || options.failures.enabled;
  std::vector<Duration> work_saved(interruptible ? jobs.size() : 0, 0);
  std::vector<Duration> restart_penalty(interruptible ? jobs.size() : 0, 0);
  const CheckpointModel& ckpt = options.checkpoints;
  // GraceTime (the engine's kPreempting decisions): when each signalled victim was signalled
  // (-1: not signalled), when its run would have ended unsignalled, whether a job's current
  // run restarts after a preemption, and the GPUs booked for each waiting preemptor.
  std::vector<Time> signalled_at(jobs.size(), -1);
  std::vector<Time> natural_end(jobs.size(), -1);
  std::vector<bool> after_preemption(jobs.size(), false);
  std::vector<Placement> held_for(jobs.size());
  std::vector<JobIndex> signalled_for(jobs.size(), -1);  // a signalled victim's preemptor
  std::vector<JobIndex> waiting_preemptors;
  std::vector<Placement> planned_for(jobs.size());  // a waiting preemptor's placement
  // A waiting preemptor started, went back to its queue, or was cancelled: its booking ends.
  const auto end_wait = [&](JobIndex p) {
    auto it = std::find(waiting_preemptors.begin(), waiting_preemptors.end(), p);
    if (it == waiting_preemptors.end()) return;
    waiting_preemptors.erase(it);
    checker.Hold(held_for[p], -1);
    held_for[p].clear();
    planned_for[p].clear();
  };
  // The engine keeps a signalled victim's GPUs that its preemptor needs booked when it ends
  // (Engine::Impl::KeepForPreemptor): the checker's books follow.
  const auto keep_for_preemptor = [&](JobIndex v) {
    const JobIndex p = signalled_for[v];
    signalled_for[v] = -1;
    if (p < 0) return;
    if (std::find(waiting_preemptors.begin(), waiting_preemptors.end(), p) ==
        waiting_preemptors.end()) {
      return;
    }
    Placement kept;
    if (run_shared_gpu[v] >= 0) return;  // a share keeps no GPU for a preemptor (the engine's)
    for (const Slot& slot : started_on[v]) {
      if (engine->node_state(slot.node) != NodeState::kUp) continue;
      int need = 0;
      const Placement& planned = planned_for[p];
      for (const Slot& ps : planned) {
        if (ps.node == slot.node) need += ps.gpus;
      }
      Slot* held = nullptr;
      for (Slot& h : held_for[p]) {
        if (h.node == slot.node) held = &h;
      }
      const int take = std::min(slot.gpus, need - (held ? held->gpus : 0));
      if (take <= 0) continue;
      if (held) {
        held->gpus += take;
      } else {
        held_for[p].push_back({slot.node, take});
      }
      kept.push_back({slot.node, take});
    }
    checker.Hold(kept, 1);
  };

  // Reasons and estimates: the last recorded per job (only changes are recorded), and which jobs
  // keep a whole history.
  std::vector<Reason> last_reason(jobs.size(), Reason::kNone);
  std::vector<Time> last_estimate(jobs.size(), -1);
  std::vector<bool> keep_history(jobs.size(), false);
  for (JobIndex j : options.history_of) {
    if (j >= 0 && static_cast<size_t>(j) < jobs.size()) keep_history[j] = true;
  }
  const auto record = [&](JobIndex j, Reason reason, Time estimate) {
    if (reason == last_reason[j] && estimate == last_estimate[j]) return;
    last_reason[j] = reason;
    last_estimate[j] = estimate;
    JobOutcome& o = result.outcomes[j];
    if (engine->status(j).phase == JobStatus::Phase::kPending) {
      o.reason = ReasonName(reason);
      if (estimate >= 0 && o.first_estimate < 0 && o.first_start < 0) o.first_estimate = estimate;
    }
    if (keep_history[j]) result.history.push_back({j, now, ReasonName(reason), estimate});
  };
  // The engine's current reason and estimate of `j` (pending, or ended by the driver).
  const auto record_status = [&](JobIndex j) {
    const JobStatus& st = engine->status(j);
    record(j, st.reason, st.reserved_start < kInfiniteTime ? st.reserved_start : -1);
  };
  std::vector<JobIndex> interrupted;
  std::vector<const Job*> interrupted_jobs;
  std::vector<Placement> interrupted_placements;

  // The live driver's calls, shared by the events file and the failure model. Each keeps the
  // checker's books in step with the engine's.
  const auto drain_node = [&](NodeIndex n) -> Status {
    GANTRY_RETURN_IF_ERROR(engine->Drain(n, now));
    checker.OnDrain(n);
    return Status::Ok();
  };
  const auto up_node = [&](NodeIndex n) -> Status {
    GANTRY_RETURN_IF_ERROR(engine->Up(n, now));
    checker.OnUp(n);
    return Status::Ok();
  };
  // An interrupted run (node down, preemption) ends now: the work since its last checkpoint is
  // lost; the next run resumes from it after the restart cost. A victim signalled at
  // `final_checkpoint` (GraceTime, >= 0) saved a final checkpoint then, if the job checkpoints
  // at all: it loses only the work done since. Returns the GPU-seconds of work lost.
  const auto lose_run = [&](JobIndex j, Time final_checkpoint) {
    const Job& job = jobs[j];
    JobOutcome& o = result.outcomes[j];
    // Under a launch latency a run may end between its decision and its start.
    const Duration elapsed = std::max<Duration>(0, now - o.start);
    const Duration overhead = std::min(elapsed, restart_penalty[j]);
    // The start booked the whole restart cost; give back what this run did not get to.
    const Duration booked = std::min(restart_penalty[j], o.end - o.start);
    const Duration useful = elapsed - overhead;
    const Duration interval = job.checkpoint_interval > 0 ? job.checkpoint_interval : ckpt.interval;
    Duration saved = interval > 0 ? useful / interval * interval : 0;
    if (interval > 0 && final_checkpoint >= 0) {
      const Duration at_signal =
          std::max<Duration>(0, final_checkpoint - o.start - restart_penalty[j]);
      saved = std::max(saved, std::min(useful, at_signal));
    }
    work_saved[j] = std::min(job.run_time, work_saved[j] + saved);
    restart_penalty[j] = job.restart_cost > 0 ? job.restart_cost : ckpt.restart_cost;
    const double gpus = GpusUsed(job);
    const double lost = gpus * static_cast<double>(useful - saved);
    result.lost_gpu_seconds += lost;
    const double unused_restart = gpus * static_cast<double>(booked - overhead);
    result.restart_gpu_seconds -= unused_restart;
    if (after_preemption[j]) result.preemption_restart_gpu_seconds -= unused_restart;
    if (now > o.start) result.interrupted_runs.push_back({j, o.start, now});
    o.start = o.end = -1;
    o.killed_at_limit = o.backfilled = false;
    end_running(job);
    return lost;
  };
  // Down: the jobs running there end now and go back to the queue with their submit time. Work
  // since the last checkpoint is lost; the next run resumes from it after the restart cost.
  const auto down_node = [&](NodeIndex n) -> Status {
    interrupted.clear();
    GANTRY_RETURN_IF_ERROR(engine->Down(n, now, &interrupted));
    if (options.check_invariants) {
      interrupted_jobs.clear();
      interrupted_placements.clear();
      for (JobIndex j : interrupted) {
        interrupted_jobs.push_back(&jobs[j]);
        interrupted_placements.push_back(engine->placement(j));
      }
      GANTRY_RETURN_IF_ERROR(checker.OnDown(n, interrupted_jobs, interrupted_placements));
    } else {
      checker.OnDrain(n);  // keeps the node marked unavailable, as OnDown does
    }
    for (JobIndex j : interrupted) {
      const Job& job = jobs[j];
      JobOutcome& o = result.outcomes[j];
      lose_run(j, -1);
      after_preemption[j] = false;
      signalled_at[j] = -1;  // a signalled victim on the node is interrupted, not preempted
      keep_for_preemptor(j);
      if (o.requeues >= options.max_requeues) {
        // Slurm's MaxBatchRequeue: interrupted once too often, the job is held, not requeued.
        // It also bounds a run whose failures come faster than its jobs can finish.
        o.held = true;
        continue;
      }
      ++o.requeues;
      ++result.requeues;
      record(j, Reason::kNodeDown, -1);
      GANTRY_RETURN_IF_ERROR(engine->Requeue(j, now));
      record_status(j);
      pending_by_types.Pending(job, 1);
      ++pending;
    }
    return Status::Ok();
  };
  // Preempted: the run ends as an interrupted one does, and the job is always requeued (as
  // Kueue requeues an evicted workload); its preemptions are counted, not its requeues.
  const auto make_interruptible = [&] {
    if (!interruptible) {
      interruptible = true;
      work_saved.assign(jobs.size(), 0);
      restart_penalty.assign(jobs.size(), 0);
    }
  };
  const auto preempt_job = [&](JobIndex j, Time final_checkpoint) -> Status {
    make_interruptible();
    const Job& job = jobs[j];
    if (options.check_invariants) checker.OnFinish(job, engine->placement(j));
    const double lost = lose_run(j, final_checkpoint);
    result.preemption_lost_gpu_seconds += lost;
    result.outcomes[j].preemption_lost_gpu_seconds += lost;
    after_preemption[j] = true;
    ++result.outcomes[j].preemptions;
    ++result.preemptions;
    record(j, Reason::kPreempted, -1);
    GANTRY_RETURN_IF_ERROR(engine->Requeue(j, now));
    record_status(j);
    pending_by_types.Pending(job, 1);
    ++pending;
    return Status::Ok();
  };
  const auto cancel_job = [&](JobIndex j) -> Status {
    const Job& job = jobs[j];
    JobOutcome& o = result.outcomes[j];
    const JobStatus::Phase phase = engine->status(j).phase;
    if (phase == JobStatus::Phase::kPending) {
      pending_by_types.Pending(job, -1);
      --pending;
      end_wait(j);
    } else if (phase == JobStatus::Phase::kRunning) {
      if (options.check_invariants) {
        GANTRY_RETURN_IF_ERROR(checker.OnCancelRunning(job, engine->placement(j)));
      }
      signalled_at[j] = -1;
      keep_for_preemptor(j);
      end_running(job);
      o.end = std::max(now, o.start);
      o.killed_at_limit = false;
    } else {
      return Status::Ok();  // it ended before the cancel came: scancel of a finished job
    }
    GANTRY_RETURN_IF_ERROR(engine->Cancel(j, now));
    record_status(j);
    o.cancelled = true;
    return Status::Ok();
  };

  // The failure model: every node's next failure or repair, in time order.
  struct ModelEvent {
    Time at;
    NodeIndex node;
    bool repair;
    bool operator>(const ModelEvent& o) const {
      return at != o.at ? at > o.at : node != o.node ? node > o.node : repair > o.repair;
    }
  };
  std::priority_queue<ModelEvent, std::vector<ModelEvent>, std::greater<>> model_events;
  std::vector<NodeFailureStream> streams;
  std::vector<bool> is_spare;
  std::set<NodeIndex> spare_pool;  // idle spares, lowest index brought in first
  int64_t nodes_failed = 0, model_events_since_start = 0;
  const auto node_count = static_cast<NodeIndex>(cluster.nodes().size());
  const FailureModel& fm = options.failures;
  if (fm.enabled) {
    if (fm.mtbf <= 0) return InvalidArgument("failure model: mtbf must be positive");
    if (fm.spares < 0 || fm.spares >= node_count) {
      return InvalidArgument("failure model: " + std::to_string(fm.spares) +
                             " spares leave no node of the " + std::to_string(node_count) +
                             " to schedule on");
    }
    is_spare.assign(node_count, false);
    streams.reserve(node_count);
    for (NodeIndex n = 0; n < node_count; ++n) {
      streams.emplace_back(fm, n);
      model_events.push({first + streams.back().NextUptime(), n, false});
    }
    for (NodeIndex n = node_count - fm.spares; n < node_count; ++n) {
      GANTRY_RETURN_IF_ERROR(drain_node(n));
      is_spare[n] = true;
      spare_pool.insert(n);
    }
  }
  const auto apply_model_event = [&](const ModelEvent& ev) -> Status {
    const NodeIndex n = ev.node;
    NodeFailureStream& stream = streams[n];
    if (!ev.repair) {
      const bool health = stream.NextIsHealthEvent();
      if (health) {
        ++result.health_events;
        // A node someone else (the events file) took down stays down.
        if (engine->node_state(n) == NodeState::kUp) GANTRY_RETURN_IF_ERROR(drain_node(n));
      } else {
        ++result.node_failures;
        GANTRY_RETURN_IF_ERROR(down_node(n));
      }
      ++nodes_failed;
      if (is_spare[n]) {
        spare_pool.erase(n);  // a failed spare is no spare
      } else if (!spare_pool.empty()) {
        const NodeIndex spare = *spare_pool.begin();
        spare_pool.erase(spare_pool.begin());
        is_spare[spare] = false;
        GANTRY_RETURN_IF_ERROR(up_node(spare));
        ++result.spare_swaps;
      }
      is_spare[n] = false;
      model_events.push({now + stream.NextRepair(), n, true});
      return Status::Ok();
    }
    --nodes_failed;
    if (static_cast<int>(spare_pool.size()) < fm.spares) {
      // Back as a spare: idle and out of scheduling until a node fails.
      if (engine->node_state(n) == NodeState::kDown) GANTRY_RETURN_IF_ERROR(up_node(n));
      if (engine->node_state(n) == NodeState::kUp) GANTRY_RETURN_IF_ERROR(drain_node(n));
      is_spare[n] = true;
      spare_pool.insert(n);
    } else if (engine->node_state(n) != NodeState::kUp) {
      GANTRY_RETURN_IF_ERROR(up_node(n));
    }
    model_events.push({now + stream.NextUptime(), n, false});
    return Status::Ok();
  };
  // Failures go on while jobs may still run. With nothing running and nothing left to submit,
  // a waiting job can only start once failed nodes return; the guard ends a run whose waiting
  // jobs cannot start even then (e.g. too big for the cluster without its spares).
  const auto model_matters = [&] {
    if (!fm.enabled || model_events.empty()) return false;
    if (next_submit < order.size() || running > 0 || next_event < events.size()) return true;
    return pending > 0 && nodes_failed > 0 &&
           model_events_since_start < 100 * static_cast<int64_t>(node_count) + 1000;
  };

  bool sprio_done = options.sprio == nullptr;
  const auto take_sprio = [&] {
    const auto name_of = [](const std::vector<std::string>& table, int32_t i) {
      return i >= 0 && static_cast<size_t>(i) < table.size() ? table[i] : std::to_string(i);
    };
    for (const Job& job : jobs) {
      if (engine->status(job.index).phase != JobStatus::Phase::kPending) continue;
      options.sprio->push_back(MakeSprioRow(engine->PriorityTerms(job.index, options.sprio_at),
                                            job.id, name_of(workload.queues, job.queue),
                                            name_of(workload.users, job.user)));
    }
    sprio_done = true;
  };

  // Something happened between ticks that the next tick's decisions must see.
  bool tick_owed = false;
  while (next_submit < order.size() || !finishes.empty() || next_event < events.size() ||
         model_matters() || tick_owed) {
    // A running job passing the profile's minimum run time may be preempted: a cycle then.
    const Time wakeup = tick_at_or_after(engine->NextWakeup(now));
    const Time next_tick = tick_at_or_after(now + 1);
    now = kInfiniteTime;
    if (next_submit < order.size()) now = jobs[order[next_submit]].submit;
    if (tick_owed) now = std::min(now, next_tick);
    if (!finishes.empty()) now = std::min(now, finishes.top().first);
    if (next_event < events.size()) now = std::min(now, events[next_event].at);
    if (model_matters()) now = std::min(now, model_events.top().at);
    // Only while jobs run (a wake-up is a running job coming of age), so the loop still ends.
    if (!finishes.empty()) now = std::min(now, wakeup);
    // Everything at or before the sprio instant has happened: its state is the instant's.
    if (!sprio_done && now > options.sprio_at) take_sprio();

    // Account the interval [prev, now) during which the state was constant.
    if (now > prev) {
      const double dt = static_cast<double>(now - prev);
      result.busy_gpu_seconds += dt * (static_cast<double>(busy) / 1000.0);
      result.total_wait_job_seconds += dt * static_cast<double>(pending);
      result.frag_wait_job_seconds += dt * static_cast<double>(pending_by_types.FragWaiting(power));
      result.fragmented_gpu_seconds += dt * fragmentation.total();
      result.energy_joules += dt * static_cast<double>(power.cluster_mw()) / 1000.0;
      while (next_sample < now) {
        result.samples.push_back(sample_at(next_sample));
        next_sample += sample_every;
        if (static_cast<int>(result.samples.size()) >= 2 * options.target_samples) {
          // Long drain after the last submit: halve the resolution and keep going.
          std::vector<TimeSample> kept;
          for (size_t i = 0; i < result.samples.size(); i += 2)
            kept.push_back(std::move(result.samples[i]));
          result.samples = std::move(kept);
          sample_every *= 2;
          next_sample = result.samples.back().t + sample_every;
        }
      }
      prev = now;
    }

    while (!finishes.empty() && finishes.top().first == now) {
      const JobIndex j = finishes.top().second;
      finishes.pop();
      // A finish planned for a run that a cancel or a node going down ended earlier is stale
      // (a requeued run always ends later than the run it replaces).
      if (end_seen(result.outcomes[j].end) != now ||
          engine->status(j).phase != JobStatus::Phase::kRunning) {
        continue;
      }
      const Job& job = jobs[j];
      if (signalled_at[j] >= 0 && result.outcomes[j].end < natural_end[j]) {
        // A signalled victim at the end of its GraceTime: preempted, with its final checkpoint.
        GANTRY_RETURN_IF_ERROR(engine->Finish(j, now));
        const Time signal = signalled_at[j];
        signalled_at[j] = -1;
        GANTRY_RETURN_IF_ERROR(preempt_job(j, signal));
        keep_for_preemptor(j);
        continue;
      }
      signalled_at[j] = -1;  // signalled, but it completed within its GraceTime
      if (options.check_invariants) checker.OnFinish(job, engine->placement(j));
      GANTRY_RETURN_IF_ERROR(engine->Finish(j, now));
      end_running(job);
      keep_for_preemptor(j);
      ++processed;
    }
    while (next_submit < order.size() && jobs[order[next_submit]].submit == now) {
      const Job& job = jobs[order[next_submit++]];
      GANTRY_RETURN_IF_ERROR(engine->Submit(job, now));
      record_status(job.index);
      pending_by_types.Pending(job, 1);
      ++pending;
      ++processed;
    }
    while (next_event < events.size() && events[next_event].at == now) {
      const ClusterEvent& e = events[next_event++];
      ++processed;
      ++result.cluster_events;
      Status st;
      switch (e.kind) {
        case ClusterEvent::Kind::kDrain:
          st = drain_node(e.index);
          break;
        case ClusterEvent::Kind::kUp:
          st = up_node(e.index);
          break;
        case ClusterEvent::Kind::kDown:
          st = down_node(e.index);
          break;
        case ClusterEvent::Kind::kCancel:
          st = cancel_job(e.index);
          break;
      }
      GANTRY_RETURN_IF_ERROR(st.WithContext("events line " + std::to_string(e.line) + " (" +
                                            ClusterEventName(e.kind) + " " + e.target + ")"));
    }
    while (model_matters() && model_events.top().at == now) {
      const ModelEvent ev = model_events.top();
      model_events.pop();
      ++processed;
      ++model_events_since_start;
      GANTRY_RETURN_IF_ERROR(apply_model_event(ev).WithContext(
          "failure model, node " + cluster.nodes()[ev.node].name + " at t=" + std::to_string(now)));
    }

    if (tick_at_or_after(now) != now) {
      tick_owed = true;
      continue;
    }
    tick_owed = false;
    starts.clear();
    engine->Schedule(now, &starts);
    if (!starts.empty()) model_events_since_start = 0;
    for (const StartDecision& d : starts) {
      const Job& job = jobs[d.job];
      if (d.reason == Reason::kPreempting) {
        // GraceTime: each victim runs on until its grace end (or its own end, if sooner);
        // the preemptor's GPUs that no victim holds are booked for it now.
        make_interruptible();
        Placement held;
        for (const Slot& slot : d.placement) {
          int from_victims = 0;
          for (JobIndex v : d.preempted) {
            if (run_shared_gpu[v] >= 0) continue;  // gives back no whole GPU (the engine's)
            for (const Slot& vs : started_on[v]) {
              if (vs.node == slot.node) from_victims += vs.gpus;
            }
          }
          if (slot.gpus > from_victims) held.push_back({slot.node, slot.gpus - from_victims});
        }
        checker.Hold(held, 1);
        held_for[d.job] = std::move(held);
        planned_for[d.job] = d.placement;
        waiting_preemptors.push_back(d.job);
        for (JobIndex v : d.preempted) {
          JobOutcome& vo = result.outcomes[v];
          signalled_at[v] = now;
          signalled_for[v] = d.job;
          const Time grace_end = engine->status(v).grace_end;
          if (vo.end > grace_end) {
            vo.end = grace_end;
            finishes.push({end_seen(vo.end), v});
          }
        }
        continue;
      }
      end_wait(d.job);
      for (JobIndex victim : d.preempted) GANTRY_RETURN_IF_ERROR(preempt_job(victim, -1));
      if (options.check_invariants) {
        GANTRY_RETURN_IF_ERROR(checker.OnStart(job, now, d.placement, d.shared_gpu));
      }
      JobOutcome& o = result.outcomes[d.job];
      const Duration limit = std::max<Duration>(job.time_limit, 1);
      // A requeued job resumes from its last checkpoint after paying the restart cost; each
      // run gets the whole time limit again, as a requeued Slurm job does.
      const Duration to_run =
          interruptible ? restart_penalty[d.job] + job.run_time - work_saved[d.job] : job.run_time;
      o.killed_at_limit = to_run > limit;
      record(d.job, d.reason, -1);
      o.start = now + options.launch_latency;
      if (o.first_start < 0) o.first_start = o.start;
      if (now == job.submit) o.reason = {};  // it never waited for a decision
      o.end = o.start + std::min(to_run, limit);
      natural_end[d.job] = o.end;
      if (interruptible && restart_penalty[d.job] > 0) {
        const double restart =
            GpusUsed(job) * static_cast<double>(std::min(restart_penalty[d.job], o.end - now));
        result.restart_gpu_seconds += restart;
        if (after_preemption[d.job]) result.preemption_restart_gpu_seconds += restart;
      }
      o.nodes_spanned = static_cast<int32_t>(d.placement.size());
      o.span_level = SpanLevel(cluster, d.placement);
      o.backfilled = d.reason == Reason::kStartedBackfill;
      finishes.push({end_seen(o.end), d.job});
      pending_by_types.Pending(job, -1);
      --pending;
      ++running;
      busy += MilliGpus(job);
      team_busy[job.team] += MilliGpus(job);
      started_on[d.job] = d.placement;
      run_start[d.job] = now;
      const int32_t shared = d.shared_gpu;
      bool turns_busy = true;
      if (shared >= 0) {
        run_shared_gpu[d.job] = shared;
        if (static_cast<size_t>(shared) >= shares_on_gpu.size())
          shares_on_gpu.resize(shared + 1, 0);
        turns_busy = shares_on_gpu[shared]++ == 0;
      }
      if (turns_busy) {
        pending_by_types.Busy(d.placement, 1);
        fragmentation.Busy(d.placement, 1);
        power.Add(d.placement, +1);
      }
      for (const Slot& slot : d.placement) {
        for (DomainIndex dom = cluster.nodes()[slot.node].domain;
             dom >= 0 && !domain_peak_mw.empty(); dom = cluster.domains()[dom].parent) {
          domain_peak_mw[dom] = std::max(domain_peak_mw[dom], power.domain_mw(dom));
        }
      }
    }
    result.peak_watts =
        std::max(result.peak_watts, static_cast<double>(power.cluster_mw()) / 1000.0);
    // A waiting preemptor whose placement could not be used any more is back in its queue.
    for (size_t i = 0; i < waiting_preemptors.size();) {
      const JobIndex p = waiting_preemptors[i];
      if (engine->status(p).reason != Reason::kPreempting) {
        end_wait(p);
      } else {
        ++i;
      }
    }
    for (JobIndex j : engine->status_changes()) {
      if (options.check_invariants) {
        GANTRY_RETURN_IF_ERROR(InvariantChecker::CheckPending(jobs[j], engine->status(j), now));
      }
      if (engine->status(j).phase == JobStatus::Phase::kPending) record_status(j);
    }
    if (options.check_invariants) {
      for (const StartDecision& d : starts) {
        GANTRY_RETURN_IF_ERROR(checker.CheckFree(d.placement, engine->free_index()));
      }
      GANTRY_RETURN_IF_ERROR(checker.CheckTeamUsage(*engine));
    }
    if (options.progress && processed >= next_progress) {
      options.progress(total_events ? static_cast<double>(processed) / total_events : 1.0);
      next_progress = processed + std::max<int64_t>(1, total_events / 200);
    }
  }
  result.samples.push_back(sample_at(prev));
  if (!sprio_done) take_sprio();
  if (options.progress) options.progress(1.0);
  for (size_t j = 0; j < jobs.size(); ++j) result.outcomes[j].energy_kwh = job_joules[j] / 3.6e6;
  for (DomainIndex d : power.capped_domains()) {
    result.domain_power.push_back({cluster.domains()[d].name, cluster.power().domain_cap_watts[d],
                                   static_cast<double>(domain_peak_mw[d]) / 1000.0});
  }

  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  result.perf.wall_seconds = wall;
  result.perf.events = processed;
  result.perf.cycles = engine->stats().cycles;
  result.perf.events_per_second = wall > 0 ? static_cast<double>(processed) / wall : 0;
  result.perf.peak_rss_kb = PeakRssKb();
  Summarize(result);
  return result;
}

}  // namespace gantry
