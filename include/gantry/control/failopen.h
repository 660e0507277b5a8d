// Fail-open: if gantryd stops deciding for longer than a configured time, the jobs of the
// Gantry-managed partitions fall back to Slurm's own scheduling instead of waiting, held, for a
// daemon that is gone.
//
// gantryd writes a heartbeat file after every successful cycle: one line, "TIME AFTER" (Unix
// seconds of the cycle, and the fail-open limit in seconds; 0: fail-open is off). Two readers
// act on it once TIME is more than AFTER seconds old:
//   - job_submit.lua (inside slurmctld; the file's path in GANTRY_HEARTBEAT_FILE) stops holding
//     new jobs, so Slurm schedules them itself;
//   - `gantry failopen` (a cron job or systemd timer on the controller host) releases the jobs
//     already held, without pinning nodes, so Slurm places them.
// No file, or AFTER 0, means fail-open is off: jobs stay held until gantryd returns. When it
// returns it adopts the jobs Slurm started (Controller: a job first seen running is adopted) and
// holds new ones again as soon as its heartbeat is fresh. docs/slurm.md, "Fail-open".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gantry/common/status.h"
#include "gantry/common/time.h"
#include "gantry/slurm/slurm.h"

namespace gantry::control {

struct Heartbeat {
  Time time = -1;                // when gantryd last completed a cycle (Unix seconds)
  Duration fail_open_after = 0;  // seconds of silence before fail-open; 0: never
};

// Writes the heartbeat beside `path` and renames it into place, so a reader (job_submit.lua,
// inside slurmctld) never sees half a line.
Status WriteHeartbeat(const std::string& path, const Heartbeat& heartbeat);
// NotFound when there is no file; DataLoss when it is not "TIME AFTER".
Result<Heartbeat> ReadHeartbeat(const std::string& path);
// True when fail-open is on and gantryd has been silent for longer than its limit at `now`.
bool FailOpenDue(const Heartbeat& heartbeat, Time now);

// The jobs fail-open releases: pending and held (priority 0) in a managed partition (every
// partition when `partitions` is empty) and asking for GPUs, by id.
std::vector<int64_t> JobsToRelease(const std::vector<slurm::SlurmJob>& jobs,
                                   const std::vector<std::string>& partitions);

}  // namespace gantry::control
