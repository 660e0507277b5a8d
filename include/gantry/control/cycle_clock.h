// When gantryd's cycles begin: at fixed instants of the wall clock, `offset` seconds into
// every `interval`, rather than wherever the daemon happened to start.
//
// Slurm stamps a job's submission, start and end in whole seconds, and gantryd stamps each
// decision with the second its cycle began. A cycle whose phase within the second is left to
// chance sees a job submitted at 10.9 either in the cycle stamped 10 or in the one stamped 11,
// and a release it makes at 20.95 starts a job Slurm stamps 21 -- so two runs of one workload
// get different stamps, and a simulator replaying the accounting (whole seconds) cannot know
// which. A fixed phase early in the second keeps a whole second's events and the cycle that
// acts on them in one stamp, run after run (docs/performance.md, "One engine, two drivers").
#pragma once

namespace gantry::control {

// gantryd's --cycle-offset unless told otherwise: a quarter into the second leaves room before
// the cycle for the second's submissions and after it for its releases to start in that
// second (measured in docs/performance.md).
inline constexpr double kDefaultCycleOffsetSeconds = 0.25;

// Seconds from wall-clock instant `now` (seconds since the epoch, fractional) to the next
// instant t >= now with t mod interval == offset mod interval. interval > 0.
double SecondsToNextCycle(double now, double interval, double offset);

}  // namespace gantry::control
