// The trace-driven, discrete-event simulator: one of the engine's two drivers.
//
// It replays a workload's submissions against a simulated cluster and clock: at every instant
// with events it delivers finishes, then submissions, to the Engine, runs one scheduling cycle,
// and turns each start into a future finish (at the job's true run time, or its time limit if
// that comes first: the job is killed there, as Slurm would). Cluster events (events.h) reach
// the engine through the live driver's calls: drain, down (the jobs running there end, their
// work so far is lost, and they are requeued to run again in full), up, and cancel. At one
// instant finishes come first, then submissions, then cluster events in file order (so a cancel
// may name a job submitted at that very instant); the scheduling cycle runs last -- at every such
// instant, or only at the ticks of a live driver's cycle (SimOptions::cycle).
// Single-threaded and deterministic: the same inputs give the same SimResult (except SimPerf,
// which measures wall time).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/status.h"
#include "gantry/report/result.h"
#include "gantry/sched/profile.h"
#include "gantry/sched/sprio.h"
#include "gantry/sim/events.h"
#include "gantry/sim/failures.h"
#include "gantry/workload/job.h"

namespace gantry {

struct SimOptions {
  // Check the invariants after every event (no GPU double-booked, gangs whole and in shape,
  // allowed GPU types, no start before submit, quotas held, engine's free index consistent).
  // Default: on in debug builds. A violation ends the run with an Internal error.
  bool check_invariants =
#ifdef NDEBUG
      false;
#else
      true;
#endif
  int target_samples = 500;  // time-series points for the report (about)
  // Node and job events to replay, sorted by time, resolved (ResolveClusterEvents).
  std::vector<ClusterEvent> events;
  // Seeded node failures, health drains, repairs and hot spares (off unless enabled).
  FailureModel failures;
  // What of an interrupted job's work survives (by events or failures), and its restart cost.
  CheckpointModel checkpoints;
  // Times a job may be requeued after a node failure before it is held instead (Slurm's
  // MaxBatchRequeue, whose default is 5).
  int max_requeues = 5;
  // Called now and then with the fraction of events done (for progress bars).
  std::function<void(double)> progress;
  // When `sprio` is set: the priority breakdown of every job pending at instant `sprio_at`
  // (after everything at or before it happened), in job order, as `sprio -l` shows it
  // (gantry/sched/sprio.h). Factor values are those of the last priority recalculation.
  Time sprio_at = 0;
  std::vector<SprioRow>* sprio = nullptr;
  // Jobs whose whole reason history to keep in SimResult::history (gantry sim --explain). Every
  // job's last reason and first estimate are kept in its JobOutcome regardless; histories are
  // kept only for these, so that memory stays bounded on large traces.
  std::vector<JobIndex> history_of;
  // The live driver's rhythm (gantry sim --cycle, --launch-latency). gantryd observes the
  // resource manager and decides once per cycle, and a released job runs a moment after the
  // decision; the simulator by default decides at every event and starts a job at its decision.
  // With `cycle` > 0 the engine decides only at ticks (the multiples of `cycle` in trace time),
  // and a job's end reaches the engine at the first tick at or after it (its GPUs stay taken
  // until then, as gantryd's engine keeps them until its poll sees the job gone), or
  // `end_latency` seconds after it if the resource manager reports ends that late. A decided
  // job starts `launch_latency` seconds after its decision and runs its run time from there:
  // its start, wait and end are the ones the resource manager would record. Submissions,
  // cluster events and failures still act at their own instants. Default: all 0, the
  // event-driven simulator.
  Duration cycle = 0;
  Duration launch_latency = 0;
  Duration end_latency = 0;
};

// Runs `workload` (resolved against `cluster`; `teams` from ResolveWorkload) under `profile`.
Result<SimResult> Simulate(const Cluster& cluster, const std::vector<Team>& teams,
                           const Workload& workload, const Profile& profile,
                           const SimOptions& options);

}  // namespace gantry
