// The scheduling engine: a pure, deterministic library that, given the cluster, the teams, the
// jobs submitted and finished so far and the time, decides which jobs start where, and says why
// every other job still waits.
//
// Drivers own time and reality: the simulator (sim/) calls Submit/Finish/Schedule with a
// simulated clock; the live control plane will call them with the real clock and bind starts
// through Slurm. The engine never reads a clock, never does I/O and never uses randomness, so
// the same calls give the same decisions. Jobs are owned by the caller and must outlive the
// engine. Not thread-safe: one serial scheduling loop drives it.
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
#include "gantry/sched/free_index.h"
#include "gantry/sched/plugin.h"
#include "gantry/sched/profile.h"
#include "gantry/workload/job.h"

namespace gantry {

// Why a job is where it is; Slurm's reason codes are the model.
enum class Reason : uint8_t {
  kNone,             // not yet considered
  kPriority,         // higher-priority jobs go first; not examined this cycle
  kResources,        // highest-priority blocked job: waits for GPUs, holds a reservation
  kQuota,            // its team's quota is used up (Slurm: AssocGrpGRES)
  kReservation,      // would delay a higher-priority job's reservation, cannot backfill
  kTopology,         // enough GPUs are free but not inside one allowed topology domain
  kStartedHead,      // started in priority order
  kStartedBackfill,  // started early by backfill without delaying any reservation
};
const char* ReasonName(Reason r);

struct StartDecision {
  JobIndex job;
  Time time;
  Placement placement;
  Reason reason;  // kStartedHead or kStartedBackfill
};

struct JobStatus {
  enum class Phase : uint8_t { kUnknown, kPending, kRunning, kDone };
  Phase phase = Phase::kUnknown;
  Reason reason = Reason::kNone;
  Time reserved_start = kInfiniteTime;  // planned start (kResources / conservative reservations)
  JobIndex blocked_by = -1;  // for kReservation: the job whose reservation it would delay
  Time start = -1;
  Time expected_end = -1;  // start + time limit
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
                                                const Profile& profile);
  ~Engine();

  // Adds a pending job. job.team indexes the teams given to Create; job.gpu_type_mask must be
  // resolved (ResolveWorkload).
  Status Submit(const Job& job, Time now);
  // The job ended (completed, failed, or killed at its limit): its GPUs are free again.
  Status Finish(JobIndex job, Time now);
  // Runs one scheduling cycle at `now` and appends the jobs it starts. Cheap when nothing
  // changed since the previous cycle.
  void Schedule(Time now, std::vector<StartDecision>* starts);

  const JobStatus& status(JobIndex job) const;
  const Placement& placement(JobIndex job) const;
  // A sentence for a human: why this job waits (or why it started where it did).
  std::string Explain(JobIndex job) const;

  const FreeIndex& free_index() const;
  const std::vector<Team>& teams() const;
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
