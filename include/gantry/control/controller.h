// The control loop of gantryd: the scheduling engine driven with the real clock against a
// resource manager (Slurm, through src/slurm, behind the ResourceManager interface below), with
// every job and decision made durable in the StateStore before it is acted on.
//
// One Cycle: observe the nodes (drain, down and up become engine events; the jobs a down node
// interrupted are held again in the resource manager, recorded as requeued and decided anew),
// then the jobs (new held jobs are recorded, then submitted to the engine; a job first seen
// running -- started while gantryd was away, e.g. by Slurm after fail-open -- is recorded and
// adopted where it runs; jobs it reports running confirm a decision; ended ones are finished),
// then run one engine cycle and, for each start, record the decision and only then tell the
// resource manager. A start the resource manager refuses goes back to the engine as pending
// (its age kept), with the refusal in the event log. Open rebuilds the engine after a restart
// from the store and what the resource manager reports (StateStore's Reconcile rules), so a
// gantryd killed at any instant loses no job, starts none twice and leaves none held forever.
//
// Preemption (a profile whose admission or preemption plugin preempts): the victims of a start
// are held again in the resource manager (which stops them) and decided anew, keeping their
// age, before the preemptor is released. With a grace time the victims are first signalled
// (set_preempt_signal) and run on; when the grace time is over, or when one ends on its own
// before (it saved its checkpoint and exited), it is held again and requeued, and the engine
// starts the preemptor in a later cycle. A victim its user cancels stays cancelled. The
// preemption (preemptor, victims, placement, grace end) is recorded in the store before the
// first signal, so a gantryd restarted during the grace time carries it on: the engine waits
// for the same victims (Engine::RestorePreempting), which are requeued at the original grace
// end, or at once if it passed or they exited meanwhile; nobody is signalled twice. A signalled
// victim is requeued at its grace end even when its preemptor is gone (cancelled) or the engine
// cannot restore the preemption (Engine::RestoreSignalled keeps it out of every later choice).
//
// With a Stager (set_stager), jobs that declared datasets have them staged onto the nodes the
// reservation plan expects them to run on while they wait, and a decided one is released only
// once its data is there (or staging failed, or the wait ran out). A gantryd restarted while a
// job waits finds it decided but still held, and decides it anew (Reconcile's requeue).
//
// Not thread-safe: one loop calls it; other threads read only Snapshot() and call
// RequestCancel (which touches only the store and the resource manager, both thread-safe) and
// ExplainNow (which waits for the engine between cycles).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/metrics.h"
#include "gantry/common/status.h"
#include "gantry/common/time.h"
#include "gantry/control/overview.h"
#include "gantry/control/stager.h"
#include "gantry/control/state_store.h"
#include "gantry/sched/data_locality.h"
#include "gantry/sched/engine.h"
#include "gantry/sched/profile.h"

namespace gantry::control {

// A job as the resource manager reports it.
struct RmJob {
  // id, user, team (the account), queue (the partition), GPU types, shape, time limit, submit:
  // the request as submitted. Phase fields are ignored.
  JobRecord request;
  ObservedState state = ObservedState::kHeld;  // never kUnknown: an unknown job is not listed
  std::vector<NodeGpus> placement;  // kReleased, kRunning: where it (will) run; kFinished: ran
  Time start = -1;                  // kRunning: since when
  std::string end_state;            // kFinished: "completed", "failed", ...
  // kRunning: its processes are being stopped (Slurm's COMPLETING) -- a run ending, or one
  // Gantry requeued that has not let go of its nodes yet.
  bool stopping = false;
  // False when the resource manager will not requeue it (Slurm's --no-requeue): no preemption
  // picks it as a victim (JobRequest::preemptible).
  bool requeueable = true;
};

// A node as the resource manager reports it, in the engine's terms.
struct RmNode {
  std::string name;
  // kUp: takes jobs; kDrained: takes no new jobs, its jobs go on (drain, draining, drained, and
  // not responding, which Slurm either recovers or turns into down); kDown: its jobs are gone.
  NodeState state = NodeState::kUp;
  std::string rm_state;  // the resource manager's own words, e.g. "mixed+DRAIN"
  std::string reason;    // why it is drained or down, as the administrator wrote it
};

// What gantryd needs of a resource manager.
class ResourceManager {
 public:
  virtual ~ResourceManager() = default;
  // Every job in the partitions Gantry manages that the resource manager still knows.
  virtual Result<std::vector<RmJob>> Jobs() = 0;
  // Every node it knows, with its state.
  virtual Result<std::vector<RmNode>> Nodes() = 0;
  // Starts a held job on exactly these nodes. FailedPrecondition or NotFound when refused (the
  // job is no longer held, a node is unsuitable); other codes are transient failures.
  virtual Status Start(const std::string& id, const std::vector<NodeGpus>& placement) = 0;
  // Stops the job if it runs and makes it held again (a job the resource manager already put
  // back in its queue is just held), so that the engine decides afresh where it runs.
  // FailedPrecondition or NotFound when the job has ended; PermissionDenied when the job may
  // not be requeued (Slurm: --no-requeue) and runs on untouched (one that may not be requeued
  // but is not running yet is just held); other codes are transient.
  virtual Status Requeue(const std::string& id) = 0;
  // Cancels the job. Called from the API's threads: must be safe to call concurrently with
  // the loop's calls. NotFound or FailedPrecondition when the job has ended.
  virtual Status Cancel(const std::string& id) = 0;
  // Sends `signal` ("TERM", "USR1", ...) to a running job's processes, as Slurm's GraceTime
  // does to a preempted job so that it saves a final checkpoint. NotFound or
  // FailedPrecondition when it no longer runs.
  virtual Status Signal(const std::string& id, const std::string& signal) = 0;
};

// One dataset of a job on one of its nodes, as its agent last reported staging it.
struct StagingView {
  std::string node;
  std::string dataset;
  std::string state;  // "queued", "staging", "done", "failed", "unreachable"; "": not asked yet
  int64_t bytes_done = 0;
  int64_t bytes_total = 0;
  std::string error;
};

// A job as the API shows it: the record plus the engine's view (why it waits, when it may start).
struct JobView {
  JobRecord record;
  std::string reason;  // the engine's reason code, e.g. "Resources", "Quota", "StartedHead"
  // A sentence for a human. In a published snapshot it is the sentence as of the cycle in which
  // the job's reason, start estimate or record last changed (built only then, not for every
  // pending job every cycle); Controller::ExplainNow builds it afresh.
  std::string explain;
  Time estimated_start = -1;  // pending: the start the reservation plan promises; -1: none yet
  // Staging of its declared datasets onto the nodes it is planned or decided to run on; empty
  // when it declared none, or no nodes are known yet.
  std::vector<StagingView> staging;
  // Decided, and held back until its data is on its nodes, until then at the latest; -1: not
  // waiting for data.
  Time data_wait_until = -1;
};

// What the control loop publishes after each cycle, for readers on other threads (the API):
// immutable once published.
// A node as the API shows it.
struct NodeView {
  std::string name;
  std::string state;     // the engine's: "up", "drained" or "down"
  std::string rm_state;  // the resource manager's words ("idle", "mixed+DRAIN"); empty: unknown
  std::string reason;    // why drained or down
  std::string gpu_type;
  int gpus = 0;
  int gpus_used = 0;                 // booked by the active jobs placed there
  std::string domain;                // innermost topology domain; empty when flat
  std::vector<std::string> domains;  // every enclosing domain, innermost first
  std::vector<std::string> jobs;     // ids of the active jobs placed there
};

// A team's standing as the API shows it.
struct TeamView {
  std::string name;
  int quota_gpus = -1;  // -1: unlimited
  double shares = 1;
  int running_gpus = 0;  // GPUs of its running jobs, as the engine books them
  int running_jobs = 0;
  int pending_jobs = 0;
  int pending_gpus = 0;
  double gpu_seconds = 0;  // GPU-seconds of its active jobs since they started
};

struct ControlSnapshot {
  Time time = -1;  // the cycle's time; -1 before the first
  int64_t cycles = 0;
  // Every active job, by submit time then id. A job's view is shared with earlier snapshots
  // while nothing about it changed, so publishing a cycle copies pointers, not jobs.
  std::vector<std::shared_ptr<const JobView>> jobs;
  std::vector<NodeView> nodes;  // every node of the cluster spec, in its order
  std::vector<TeamView> teams;  // the spec's teams, then "(other)" when it has jobs
  Profile profile;              // the scheduling profile in use
  int total_gpus = 0;
  int busy_gpus = 0;
  Overview overview;  // occupancy per domain, team usage and its history, recent decisions

  // The job with this id, null when none. The index is built on the first call on this
  // snapshot (one pass over `jobs`; readers on other threads wait for it), O(1) after that;
  // a snapshot nobody asks costs nothing. `jobs` must not change after the first call.
  const JobView* Find(std::string_view id) const;
  // The pending jobs in the order the plan expects them to start: by estimated start (none
  // last), then submit time, then id. Built on the first call, like Find's index.
  const std::vector<const JobView*>& Queue() const;

 private:
  mutable std::once_flag by_id_once_;
  mutable std::unordered_map<std::string_view, const JobView*> by_id_;
  mutable std::once_flag queue_once_;
  mutable std::vector<const JobView*> queue_;
};

struct CycleReport {
  int observed = 0;          // jobs the resource manager listed
  int submitted = 0;         // new jobs recorded and given to the engine
  int started = 0;           // start decisions made durable and sent
  int refused = 0;           // starts the resource manager refused (back to pending)
  int confirmed = 0;         // decisions the resource manager now reports running
  int finished = 0;          // jobs seen ending
  int requeued = 0;          // jobs interrupted by a node going down, held again to be decided anew
  int node_changes = 0;      // nodes whose state changed (drain, down, up)
  int waiting_for_data = 0;  // decided jobs held back until their data is on their nodes
  int preempted = 0;         // running jobs preempted (requeued, or signalled with a grace time)
};

class Controller {
 public:
  // Builds the engine from `store` and `rm` (restart recovery) at `now`. `store` and `rm` are
  // borrowed and must outlive the controller. Teams are the cluster spec's; a job whose team
  // the spec does not name runs in a shared team with the spec's default quota.
  static Result<std::unique_ptr<Controller>> Open(const Cluster& cluster, const Profile& profile,
                                                  StateStore* store, ResourceManager* rm, Time now);
  ~Controller();

  Status Cycle(Time now, CycleReport* report = nullptr);

  // Cancels job `id` on behalf of `by` (for the log): records the request, then cancels it in
  // the resource manager; the next cycle sees it ended, finishes it in the store and cancels it
  // in the engine. Safe to call from any thread (the API's). NotFound for a job the store does
  // not hold or that has ended; the resource manager's code when it refuses.
  Status RequestCancel(const std::string& id, const std::string& by, Time now);

  // The latest published snapshot; safe to call from any thread.
  std::shared_ptr<const ControlSnapshot> Snapshot() const;
  // Where the loop records its metrics (queue depth per team and reason, decisions, refusals,
  // cycle latency, busy GPUs per topology domain); null: none. Borrowed; set before cycling.
  void set_metrics(MetricsRegistry* metrics);
  // Stages the declared datasets of jobs onto the nodes they will run on (borrowed; null: no
  // staging, the default). A decided job that declared data is released to the resource
  // manager once its data is on all its nodes, once staging failed (it then reads from the
  // source), or after `wait_for_data` seconds, whichever comes first; meanwhile its GPUs stay
  // booked, as Slurm's burst buffer stage-in holds a job's nodes. 0: never hold a job back
  // (staging then happens only ahead of time, from the reservation plan). Set before cycling.
  void set_stager(Stager* stager, Duration wait_for_data);
  // The signal a preempted job gets when the profile's preemption has a grace time (Slurm's
  // GraceTime sends SIGTERM); default "TERM". Set before cycling.
  void set_preempt_signal(const std::string& signal);

  const Engine& engine() const;
  // The engine's status of the job with this id; NotFound when the engine has no such job.
  Result<JobStatus> JobStatusOf(const std::string& id) const;
  // Engine::Explain for this id. Loop thread only.
  Result<std::string> Explain(const std::string& id) const;
  // The same from any thread (the API's, for GET /v1/jobs/{id}): waits while a cycle runs,
  // then asks the engine. NotFound when the engine has no such job.
  Result<std::string> ExplainNow(const std::string& id) const;
  // How many job views (each with its sentence) publishing has built so far: a view is built
  // when a job is new or its record, reason or estimate changed, not every cycle.
  int64_t views_built() const;

 private:
  class Impl;
  explicit Controller(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry::control
