#include "gantry/control/cycle_clock.h"

#include <gtest/gtest.h>

namespace gantry::control {
namespace {

TEST(CycleClock, WaitsForTheOffsetIntoTheNextInterval) {
  EXPECT_NEAR(SecondsToNextCycle(100.0, 1.0, 0.25), 0.25, 1e-9);
  EXPECT_NEAR(SecondsToNextCycle(100.1, 1.0, 0.25), 0.15, 1e-9);
  EXPECT_NEAR(SecondsToNextCycle(100.3, 1.0, 0.25), 0.95, 1e-9);
  EXPECT_NEAR(SecondsToNextCycle(100.25, 1.0, 0.25), 0.0, 1e-9);
  // Intervals other than a second: instants offset + k * interval.
  EXPECT_NEAR(SecondsToNextCycle(100.0, 2.0, 0.5), 0.5, 1e-9);
  EXPECT_NEAR(SecondsToNextCycle(101.0, 2.0, 0.5), 1.5, 1e-9);
  EXPECT_NEAR(SecondsToNextCycle(10.05, 0.2, 0.1), 0.05, 1e-9);
}

TEST(CycleClock, AnOffsetOfAnIntervalOrMoreWrapsAround) {
  EXPECT_NEAR(SecondsToNextCycle(100.0, 1.0, 1.25), 0.25, 1e-9);
  EXPECT_NEAR(SecondsToNextCycle(100.0, 1.0, -0.75), 0.25, 1e-9);
}

TEST(CycleClock, NeverWaitsAWholeIntervalOrMore) {
  // Instants at a real clock's resolution, around a cycle instant: the wait is always in
  // [0, interval), and lands on the phase.
  for (int i = 0; i < 2000; ++i) {
    const double now = 1.7e9 + i * 0.000731;
    const double wait = SecondsToNextCycle(now, 1.0, 0.25);
    ASSERT_GE(wait, 0.0) << i;
    ASSERT_LT(wait, 1.0) << i;
    const double at = now + wait;
    const double frac = at - static_cast<double>(static_cast<long long>(at));
    ASSERT_NEAR(frac, 0.25, 1e-5) << i;
  }
}

}  // namespace
}  // namespace gantry::control
