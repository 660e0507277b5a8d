// The live control plane's durable state: every job gantryd accepted, where it stands, the
// decision that placed it, and an append-only log of what happened, in one SQLite database
// (WAL, synchronous=FULL).
//
// The rule it serves: nothing is acted on before it is durable. A job is recorded before the
// engine sees it; a start decision is recorded (phase kStarting) before the resource manager is
// told; so a gantryd killed at any instant finds, on restart, every job it ever accepted and,
// for each decision, whether it may have reached the resource manager. Whoever restarts
// reconciles kStarting and kRunning jobs with what the resource manager reports (a held job was
// never started; a running one is adopted) -- see Reconcile in this header.
//
// One process owns a database at a time: Open takes an exclusive lock (flock on PATH.lock) and
// a second Open fails with FailedPrecondition instead of two daemons deciding for one cluster.
// Each method is one transaction; the store is safe to call from several threads.
//
//   GANTRY_ASSIGN_OR_RETURN(auto store, StateStore::Open("/var/lib/gantry/state.db"));
//   store->AddJob(record, now);                 // durable: now the engine may see it
//   store->Decide(id, placement, now);          // durable: now Slurm may be told
//   store->Started(id, now);                    // Slurm reports it running
//   store->Finish(id, now, "completed");
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gantry/common/status.h"
#include "gantry/common/time.h"

namespace gantry::control {

enum class JobPhase : uint8_t {
  kPending,   // accepted, waiting for the engine
  kStarting,  // a start decision is durable; the resource manager may or may not have it yet
  kRunning,   // the resource manager reports it running
  kDone,      // ended (completed, failed, cancelled, timed out)
};
const char* JobPhaseName(JobPhase p);

struct NodeGpus {
  std::string node;  // node name, as the cluster spec and the resource manager spell it
  int gpus = 0;
  bool operator==(const NodeGpus&) const = default;
};

// A job as gantryd keeps it: the request by names (indices are per engine lifetime and are
// rebuilt on every start), its phase and its placement.
struct JobRecord {
  std::string id;  // stable: the resource manager's job id
  std::string user;
  std::string team;
  std::string queue;
  std::vector<std::string> gpu_types;  // any of these; empty: any type
  Time submit = 0;
  int gpus = 0;
  int gpus_per_node = 0;
  int nodes = 0;
  Duration time_limit = 0;
  int qos = 0;  // the engine's QoS level (the cluster spec's level of qos_name, when it has one)
  // Its QOS by name as the resource manager reports it (Slurm's QOS); empty: none reported.
  std::string qos_name;
  Duration checkpoint_interval = 0;
  Duration restart_cost = 0;
  // The data it declared (#GANTRY --dataset / --checkpoint in its batch script): dataset URLs
  // gantryd stages onto its nodes before it starts, and where its checkpoints live.
  std::vector<std::string> datasets;
  std::string checkpoint;

  JobPhase phase = JobPhase::kPending;
  std::vector<NodeGpus> placement;  // kStarting and kRunning
  Time decided = -1;                // when the current placement was decided
  Time started = -1;                // when it was last reported running
  Time ended = -1;
  std::string end_reason;
  int requeues = 0;
};

// A preemption with a grace time under way: `victims` were signalled at `signalled` and run on
// until `grace_end`; then (or when they end before) they are requeued and `preemptor` starts on
// `placement`. Recorded before the first signal goes out, so a restarted gantryd carries it on
// (Controller::Open) instead of forgetting it and preempting again.
struct GracePreemption {
  std::string preemptor;
  std::vector<std::string> victims;
  std::vector<NodeGpus> placement;
  Time signalled = 0;
  Time grace_end = 0;
  // Victims of an earlier preemption by the same preemptor that still run, each with its own
  // grace end: held again then, and nobody waits for them. There are some only when a restart
  // could not restore that preemption and the preemptor, decided anew, preempted again.
  std::vector<std::pair<std::string, Time>> earlier;
};

struct StoreEvent {
  int64_t seq = 0;  // increasing, never reused
  Time time = 0;
  std::string job;   // empty for cluster events
  std::string kind;  // "submit", "decide", "start", "requeue", "finish", or a driver's own
  std::string detail;
};

// InvalidArgument naming `what` when `other` (links and ".." resolved) is one of the files
// SQLite keeps for the state database at `state_path`: the database, or its -wal, -shm or
// -journal. A daemon that writes another file there by renaming a new one onto it (a
// heartbeat, a port file) would replace the database.
Status CheckNotStateFile(const std::string& state_path, const std::string& other,
                         const std::string& what);

class StateStore {
 public:
  // Opens or creates the database at `path` (its directory must exist). FailedPrecondition when
  // another process holds it; DataLoss when the file is not a Gantry state database (or is
  // damaged); PermissionDenied / IoError as the file system says.
  static Result<std::unique_ptr<StateStore>> Open(const std::string& path);
  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  // Records a new job in phase kPending (its phase and placement fields are ignored).
  // AlreadyExists for a known id; InvalidArgument for an empty id or a non-positive GPU count.
  Status AddJob(const JobRecord& job, Time now);
  // kPending -> kStarting with `placement`. FailedPrecondition in any other phase.
  Status Decide(const std::string& id, const std::vector<NodeGpus>& placement, Time now);
  // kStarting -> kRunning (kRunning again: no-op). `placement`, when not empty, replaces the
  // decided one (what the resource manager reports is the truth).
  Status Started(const std::string& id, Time now, const std::vector<NodeGpus>& placement = {});
  // kStarting or kRunning -> kPending (placement cleared, requeues + 1); `why` goes to the log.
  Status Requeue(const std::string& id, Time now, const std::string& why);
  // Any phase but kDone -> kDone with `reason`. FailedPrecondition when already done.
  Status Finish(const std::string& id, Time now, const std::string& reason);
  // Records a preemption under way (replacing one of the same preemptor). InvalidArgument
  // without a preemptor or victims.
  Status AddPreemption(const GracePreemption& p);
  // Forgets the preemption of `preemptor` (it started, or ended); OK when there is none.
  Status EndPreemption(const std::string& preemptor);
  // Every preemption recorded and not ended, by preemptor id.
  Result<std::vector<GracePreemption>> Preemptions() const;
  // Appends a cluster or driver event (node down, a refused start, ...) to the log.
  Status LogEvent(Time now, const std::string& job, const std::string& kind,
                  const std::string& detail);

  // Runs `fn`, whose writes (the calls above) become one transaction: one fsync for all of
  // them, none durable until Batch returns OK. A write that fails inside undoes only itself
  // (fn sees its error and may go on); fn's own error rolls every write back. Reads inside see
  // the batch's writes; other threads' calls wait until it ends. Used by the control loop to
  // record a cycle's observations, and its decisions, at the cost of one commit each.
  Status Batch(const std::function<Status()>& fn);

  // NotFound for an unknown id. Jobs not yet done are answered from memory.
  Result<JobRecord> Get(const std::string& id) const;
  // The same without a copy for a job not yet done (the store's immutable record, shared).
  Result<std::shared_ptr<const JobRecord>> GetRef(const std::string& id) const;
  // Every job not yet done, by submit time then id.
  Result<std::vector<JobRecord>> ActiveJobs() const;
  // The same, without copying: each record is immutable and shared with the store until the
  // job changes (a change makes a new record), so a caller can tell which jobs changed since it
  // last looked by comparing pointers. Outside a batch this copies no record and sorts nothing.
  Result<std::vector<std::shared_ptr<const JobRecord>>> ActiveJobRefs() const;
  // Events with seq > after_seq, oldest first, at most `limit`.
  Result<std::vector<StoreEvent>> Events(int64_t after_seq, int limit) const;
  // Jobs per phase (index: JobPhase).
  Result<std::vector<int64_t>> CountByPhase() const;
  // The nodes each of `ids` was seen running on, in any of its runs (its `start` events): what
  // a restarted gantryd knows of where a requeued job's saves may lie. One pass over the log.
  Result<std::map<std::string, std::set<std::string>>> StartedOn(
      const std::set<std::string>& ids) const;

  const std::string& path() const;

 private:
  class Impl;
  explicit StateStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// What the resource manager reports of a job on restart.
enum class ObservedState : uint8_t {
  kUnknown,   // it has no record of the job (purged, or never submitted there)
  kHeld,      // held: it has not started and will not until released
  kReleased,  // released onto pinned nodes, not running yet (starts as soon as they are free)
  kRunning,   // running
  kFinished,  // ended: completed, failed, cancelled, timed out
};

// What a restarted gantryd does with a job it had not seen finish, given what it recorded and
// what the resource manager reports. The rules (docs/control.md, "Restart"):
//                      observed kHeld    kReleased   kRunning  kFinished  kUnknown
//   recorded kPending             resubmit  adopt       adopt     finish     lost
//   recorded kStarting            requeue   adopt       adopt     finish     lost
//   recorded kRunning             requeue   hold-again  adopt     finish     lost
// (requeue: the release never happened, or the resource manager put it back on hold, so it
// goes back to pending; adopt from kPending: an administrator released it by hand; hold-again:
// a job seen running is pending again because the resource manager requeued it on its own
// (its node failed), so it is held and decided anew; lost: finished, with the reason that it
// vanished)
// so no job is lost, none starts twice, and none stays held forever.
enum class RecoveryAction : uint8_t { kResubmit, kRequeue, kAdopt, kFinish, kLost, kHoldAgain };
RecoveryAction Reconcile(JobPhase recorded, ObservedState observed);
const char* RecoveryActionName(RecoveryAction a);

}  // namespace gantry::control
