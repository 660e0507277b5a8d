// The scheduling engine: a pure, deterministic library that, given the cluster, the teams, the
// jobs submitted and finished so far and the time, decides which jobs start where, and says why
// every other job still waits.
//
// Drivers own time and reality: the simulator (sim/) calls Submit/Finish/Schedule with a
// simulated clock; the live control plane will call them with the real clock and bind starts
// through Slurm. The engine never reads a clock, never does I/O and never uses randomness, so
// the same calls give the same decisions. Job requests are owned by the caller and must outlive
// the engine. Not thread-safe: one serial scheduling loop drives it.
//
// The engine's job is a JobRequest (workload/job_request.h): what a user asked for (shape, GPU
// types, time limit, team, QoS, submit time, id). The trace's record with the true run time
// (workload/job.h) is the simulator's; no engine or plugin source includes it, so they cannot
// name a run time. Oracle plugins get true run times through EngineOptions::oracle, which only
// the simulator sets.
//
// Besides Submit/Finish, a live driver reports what happens to jobs and nodes: Cancel (pending
// or running), Drain/Down/Up of a node (Down ends the jobs running there and returns them, for
// the driver to Requeue or fail), and Adopt (after a driver restart: this job already runs
// there since then).
//
// Preemption: an admission plugin that decides job by job (the "kueue" plugin: ClusterQueues,
// cohorts, reclaim, fair sharing) may admit a job only after some running jobs end. The engine
// first checks that the job would then fit on nodes (the victims' GPUs counted free); only then
// does it end the victims (status kDone, reason kPreempted, preempted_by the job) and start
// the job. The victims come back to the driver in that job's StartDecision::preempted, as Down
// returns its interrupted jobs: the driver Requeues them (they keep their submit time) or
// fails them. A job no state of the cluster could ever admit (larger than anything its team
// could get) stays pending with reason kQuota; Explain says so.
//
// The profile's preemption plugin (plugin.h) orders admission's victims (checkpoint-aware:
// cheapest first) and protects young runs (minimum run time); it may also offer victims by
// priority or QoS for the highest-priority job that does not fit, of which the engine ends the
// fewest, in its order, with which the job fits on nodes. With GraceTime the victims are not
// ended at once: they are signalled (status().grace_end), keep running and keep their GPUs,
// and the engine returns a StartDecision with reason kPreempting and the planned placement.
// The GPUs of that placement not held by victims are booked for the preemptor at once, so no
// other job takes them, and so is its quota: until the victims end, both they and the
// preemptor count in admission's books (an admission plugin that names victims is told of each
// signal, AdmissionPlugin::OnJobSignalled, and never names that job again). When the driver has
// reported every victim ended (Finish: reason kPreempted; the driver Requeues it unless it
// completed; Cancel or Down also count), the next cycle starts the preemptor on that placement,
// before anything else. If the placement can no longer be used (a node went down or was
// drained meanwhile), the job goes back to its queue.
//
//   auto engine = Engine::Create(cluster, teams, profile);
//   engine->Submit(job, now);
//   std::vector<StartDecision> starts;
//   engine->Schedule(now, &starts);   // starts[i].placement says where
//   engine->Finish(job.index, later);
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/status.h"
#include "gantry/common/time.h"
#include "gantry/sched/data_locality.h"
#include "gantry/sched/free_index.h"
#include "gantry/sched/plugin.h"
#include "gantry/sched/profile.h"
#include "gantry/sched/registry.h"
#include "gantry/workload/job_request.h"

namespace gantry {

// Why a job is where it is; Slurm's reason codes are the model. Every pending job has one at
// every instant: a job the last cycle did not examine is kPriority (kQuota when its team is at
// its quota), whatever an earlier cycle said.
enum class Reason : uint8_t {
  kNone,       // not yet considered
  kPriority,   // higher-priority jobs go first; not examined this cycle
  kResources,  // highest-priority blocked job: waits for GPUs, holds a reservation
  kQuota,      // its team's quota is used up (Slurm: AssocGrpGRES)
  // Its ClusterQueue's own quota (and borrowing limit) would admit it, but the cohort's other
  // queues use what it could borrow or what it lent (Kueue: insufficient unused quota in cohort)
  kCohort,
  kReservation,  // would delay a higher-priority job's reservation, cannot backfill
  kTopology,     // enough GPUs are free but not inside one allowed topology domain
  // Enough GPUs of its types are free in total, but no nodes have room for its per-node shape
  // (gpus_per_node on each of `nodes` nodes): the free GPUs are scattered.
  kFragmentation,
  kStartedHead,      // started in priority order
  kStartedBackfill,  // started early by backfill without delaying any reservation
  kAdopted,          // running when the driver (re)started; told to the engine by Adopt
  kCancelled,        // ended by Cancel
  kNodeDown,         // ended because a node it ran on went down; the driver may Requeue it
  kPreempted,        // ended so that a job admission preferred could start; may be Requeued
  kPower,            // where it fits, starting would put the cluster or a domain over a power cap
  kPreempting,       // its victims were signalled (GraceTime); it starts once they have ended
};
const char* ReasonName(Reason r);

struct StartDecision {
  JobIndex job;
  Time time;
  Placement placement;
  Reason reason;  // kStartedHead or kStartedBackfill; kPreempting: not a start (below)
  // Running jobs the engine ended (reason kPreempted) so that this one could start, in the
  // order they were chosen; the driver Requeues or fails them. Empty without preemption.
  std::vector<JobIndex> preempted;
  // With GraceTime (reason kPreempting) the job has not started: `preempted` were signalled and
  // keep running, each until its status().grace_end (its QOS's GraceTime, else the profile's),
  // `victims_end_by` the latest of them; the driver tells the engine when each ends (Finish).
  // `placement` is where the job will start, in a later decision, in the first cycle after the last
  // victim ended. -1 for a start.
  Time victims_end_by = -1;
  // A share's start: the shared GPU it joined (Engine::shared_gpu as of this start; a job
  // preempted later in the same cycle no longer has one). -1 otherwise.
  int32_t shared_gpu = -1;
};

struct JobStatus {
  enum class Phase : uint8_t { kUnknown, kPending, kRunning, kDone };
  Phase phase = Phase::kUnknown;
  Reason reason = Reason::kNone;
  // The start estimate (squeue --start): when the reservation plan expects the job to start if
  // running jobs end at their time limits. kInfiniteTime: no estimate, because the plan does not
  // cover the job: backfill none has no plan; EASY plans only the highest-priority blocked job
  // (the head); conservative plans every job the cycle examines (up to max_jobs); under both,
  // the first job of a cycle waiting for the cluster's power cap has its power reservation's
  // time (power's reserve: true); a job waiting for quota, or one no end of running jobs would make
  // room for, has none. Recomputed by every cycle that examines the job.
  Time reserved_start = kInfiniteTime;
  JobIndex blocked_by = -1;  // for kReservation: the job whose reservation it would delay
  Time start = -1;
  Time expected_end = -1;      // start + time limit
  JobIndex preempted_by = -1;  // for kPreempted: the job that started in its place
  // A running job signalled for preemption (GraceTime): it must end by then; preempted_by names
  // the preemptor. -1 otherwise.
  Time grace_end = -1;
};

// A node's availability for new placements. Jobs already running on a drained node go on.
enum class NodeState : uint8_t { kUp, kDrained, kDown };

struct EngineOptions {
  // True run times, for oracle profiles; null in a live driver (an oracle profile is then a
  // FailedPrecondition error from Create). Borrowed; must outlive the engine.
  const RuntimeOracle* oracle = nullptr;
  // Where profile plugin names are resolved; null means PluginRegistry::Builtin().
  const PluginRegistry* registry = nullptr;
  // The names behind JobRequest::user and ::queue, passed to plugins (PluginContext). Borrowed.
  const std::vector<std::string>* users = nullptr;
  const std::vector<std::string>* queues = nullptr;
  // What each node's local tier holds of each job's declared data (JobRequest::datasets), for
  // the "data-locality" score; the driver updates it between cycles (a DataLocalityMap). Null:
  // nothing is known, and the score changes no placement. Borrowed; must outlive the engine.
  const DataLocality* data_locality = nullptr;
};

// One weighted term of a pending job's priority (sprio's breakdown): the factor's name, its
// weight in the profile and its value in [0, 1] as of the last priority recalculation (the age
// factor's as of `now`).
struct PriorityTerm {
  std::string factor;
  double weight = 0;
  double value = 0;
};

struct EngineStats {
  int64_t cycles = 0;
  int64_t jobs_examined = 0;
  int64_t placements_tried = 0;
  int64_t reservations_computed = 0;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Create(const Cluster& cluster, std::vector<Team> teams,
                                                const Profile& profile,
                                                const EngineOptions& options = {});
  ~Engine();

  // Adds a pending job. The request must outlive the engine. job.team indexes the teams given to
  // Create; job.gpu_type_mask must be resolved (ResolveWorkload).
  Status Submit(const JobRequest& job, Time now);
  // The job ended (completed, failed, or killed at its limit): its GPUs are free again.
  Status Finish(JobIndex job, Time now);
  // Withdraws a pending or running job (a running job's GPUs are free again). Its status becomes
  // kDone with reason kCancelled. FailedPrecondition when it is neither pending nor running.
  Status Cancel(JobIndex job, Time now);

  // Drain: the node takes no new jobs; those running on it go on. Fails on a down node.
  Status Drain(NodeIndex node, Time now);
  // Down: the node is gone. Every job running on it ends now (reason kNodeDown; its GPUs on other
  // nodes are free again) and is appended to `interrupted` in job index order, for the driver to
  // Requeue or fail. Downing a down node is a no-op.
  Status Down(NodeIndex node, Time now, std::vector<JobIndex>* interrupted);
  // Up: the node takes jobs again (after Drain or Down).
  Status Up(NodeIndex node, Time now);
  NodeState node_state(NodeIndex node) const;
  // A job ended by Down or by preemption goes back to pending, keeping its submit time (and so
  // its age).
  Status Requeue(JobIndex job, Time now);
  // The driver changed JobRequest::preemptible of a job it gave the engine (which reads the
  // driver's request in place): the next Schedule runs a cycle even if nothing else changed,
  // since a blocked job may now find its victims.
  void PreemptibleChanged();

  // A restarted driver tells the engine that `job` has been running on `placement` since
  // `start`: the engine books it as running (GPUs, team usage, expected end at start + limit)
  // without scheduling it. The placement must fit the job's shape and GPU types and free GPUs
  // of nodes that are not down (a drained node's GPUs may be adopted). Quotas are not enforced:
  // what runs, runs, and counts against the team. Errors (InvalidArgument, FailedPrecondition)
  // leave the engine unchanged.
  Status Adopt(const JobRequest& job, const Placement& placement, Time start, Time now);
  // A restarted driver tells the engine that pending `preemptor` waits for `victims` (running,
  // adopted), which were signalled for it (GraceTime) to end by `grace_end`, to start on
  // `placement`: the engine stands as if it had signalled them itself (victims out of the
  // preemption plugin's candidates, the placement's other GPUs and the preemptor's quota
  // booked; it starts in the first cycle after the last victim ended). FailedPrecondition when
  // the preemptor is not pending, a victim is not running or was signalled, or the GPUs of the
  // placement that no victim holds are not free on nodes that are up; InvalidArgument for a bad
  // slot. An error leaves the engine unchanged. Every victim gets `grace_end` (the driver keeps
  // one per preemption, the latest): a victim whose QOS gave it a shorter GraceTime may run on
  // until then after a restart, never shorter than it was told.
  Status RestorePreempting(JobIndex preemptor, const std::vector<JobIndex>& victims,
                           const Placement& placement, Time grace_end, Time now);
  // A restarted driver tells the engine that running `victims` were signalled (GraceTime) for a
  // preemption it cannot restore -- its preemptor is gone, or RestorePreempting refused it: they
  // end by `grace_end` and are never offered to the preemption plugin again (a victim is
  // signalled once, and its grace end never moves later), as a victim whose waiting preemptor
  // was cancelled stands. Nobody waits for them and nothing is booked on their GPUs.
  // FailedPrecondition when a victim is not a running whole-GPU job that was not signalled; an
  // error leaves the engine unchanged.
  Status RestoreSignalled(const std::vector<JobIndex>& victims, Time grace_end, Time now);

  // Runs one scheduling cycle at `now` and appends the jobs it starts. Cheap when nothing
  // changed since the previous cycle.
  void Schedule(Time now, std::vector<StartDecision>* starts);
  // When a cycle could next start or preempt without any other event: the first instant after
  // `now` a running job passes the profile's minimum run time while jobs wait (it may then be
  // preempted). kInfiniteTime when there is none. A driver calls Schedule then.
  Time NextWakeup(Time now) const;

  const JobStatus& status(JobIndex job) const;
  // The pending jobs whose reason or start estimate the last Schedule call changed (a job may
  // appear twice), so that a driver can record reason histories without scanning every pending
  // job. Submit and Requeue set reason Priority (Quota when the team is known to be at its
  // quota); a job stays out of this list until a cycle changes that.
  const std::vector<JobIndex>& status_changes() const;
  const Placement& placement(JobIndex job) const;
  // Where the reservation plan expects a pending job to start, at status(job).reserved_start:
  // the nodes and GPUs a live driver stages the job's data onto while it waits. Non-empty only
  // while reserved_start is finite (empty under backfill none, for a job waiting for quota, once
  // it starts or is cancelled). Conservative backfill plans every examined job's placement;
  // a waiting preemptor's (GraceTime) is where it will start. EASY plans the head's through the
  // profile's placement plugin on the GPUs free now plus those of every running job expected to
  // end by its estimate, computed on the first call after a cycle that (re)computed the
  // reservation or backfilled a job that outlives it, from the state at that call (a walk and a
  // placement search, so the simulator, which never asks, does not pay for them); a driver asks
  // after Schedule. Also empty, with a finite estimate, when the plugin finds no placement on
  // those GPUs (a topology span limit). An expectation: jobs that end early, new arrivals and
  // scores that change meanwhile (data locality) may move the actual start. Not safe to call
  // concurrently with anything else (it may compute).
  const Placement& planned_placement(JobIndex job) const;
  // A sentence for a human: why this job waits (or why it started where it did).
  std::string Explain(JobIndex job) const;
  // The terms of a submitted job's priority at `now`, one per factor of the profile, in profile
  // order. Empty for an unknown job.
  std::vector<PriorityTerm> PriorityTerms(JobIndex job, Time now) const;

  const FreeIndex& free_index() const;
  // GPUs shared by fractional jobs (JobRequest::gpu_milli in 1..999), and the shared GPU a
  // running share is on (-1 for any other job). A share's placement is one slot {node, 1}; its
  // GPU is out of free_index() from its first share to the end of its last.
  const SharedGpus& shared_gpus() const;
  int32_t shared_gpu(JobIndex job) const;
  const std::vector<Team>& teams() const;
  // What a team's running jobs hold, as admission charges it (MilliGpus: a share its gpu_milli,
  // 1000 per whole GPU); team_running_gpus rounds it up to whole GPUs. Jobs signalled for
  // preemption count until they end; a preemptor waiting for them (GraceTime) does not yet.
  int64_t team_running_milli(int team) const;
  int team_running_gpus(int team) const;
  int64_t pending_count() const;
  int64_t running_count() const;
  const EngineStats& stats() const;
  const Profile& profile() const;

 private:
  class Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry
