// The as-recorded pseudo-profile: a site's history replayed as it happened, to measure how far
// the simulator's profiles are from it.
//
// For traces that record when each job really started (sacct Start, Helios start_time, openb
// scheduled_time, SWF wait time: Job::recorded_start), ReplayRecorded makes the SimResult the
// trace itself describes: every job starts at its recorded start and runs its recorded run time.
// No scheduling decision is taken, so the engine is not involved (and cannot be: a replay obeys
// no capacity, quota or placement rule, it only reports what happened). Jobs the trace records
// no start for are reported (RecordedReplay::jobs_without_start) and left unstarted, never
// given an invented start. SetReplayError (gantry/report/result.h) then compares other runs of
// the same workload with it, job by job. Deterministic; thread-compatible.
//
//   Result<SimResult> recorded = ReplayRecorded(cluster, teams, workload, options);
//   Result<SimResult> fifo = Simulate(cluster, teams, workload, fifo_profile, options);
//   SetReplayError(*fifo, *recorded);  // fifo->summary.replay_error
#pragma once

#include <string_view>
#include <vector>

#include "gantry/cluster/cluster.h"
#include "gantry/common/status.h"
#include "gantry/report/result.h"
#include "gantry/sim/simulator.h"
#include "gantry/workload/job.h"

namespace gantry {

// The name `gantry sim --profile` takes for the replay; it shadows any profile of that name.
inline constexpr std::string_view kAsRecordedProfile = "as-recorded";

// Ok when `workload` can be replayed: it has no jobs, or some job has a recorded start; else
// InvalidArgument naming the trace format (drivers check it before running anything).
Status CheckRecordedStarts(const Workload& workload);

// Replays `workload`'s recorded starts on `cluster` (used only for its GPU count: utilisation,
// and peak_busy_gpus above it says the history ran on a larger cluster than the one given).
// From `options` only target_samples and progress are used: node events, failures and
// checkpoints are what-ifs, and the history already contains whatever happened. Fails as
// CheckRecordedStarts does.
Result<SimResult> ReplayRecorded(const Cluster& cluster, const std::vector<Team>& teams,
                                 const Workload& workload, const SimOptions& options);

}  // namespace gantry
