// Cycle start instants on the wall clock (include/gantry/control/cycle_clock.h).
#include "gantry/control/cycle_clock.h"

#include <cmath>

namespace gantry::control {

double SecondsToNextCycle(double now, double interval, double offset) {
  const double phase = std::fmod(offset, interval);
  const double into = std::fmod(now - phase, interval);  // in (-interval, interval)
  const double since = into < 0 ? into + interval : into;
  // Exactly on a cycle instant: now. Rounding may leave `since` a hair under `interval`.
  const double wait = since == 0 ? 0 : interval - since;
  return wait >= interval ? 0 : wait;
}

}  // namespace gantry::control
