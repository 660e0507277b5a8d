// Time in Gantry: whole seconds since an epoch chosen by the caller (a trace's first submit, or
// the Unix epoch for live clusters), and the clocks that supply "now".
//
// The scheduling engine never reads a clock itself: drivers pass `now` in. The simulator uses a
// SimulatedClock it advances; the live control plane uses RealClock. Both are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <string>

namespace gantry {

using Time = int64_t;      // seconds
using Duration = int64_t;  // seconds
inline constexpr Time kInfiniteTime = std::numeric_limits<Time>::max() / 4;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Time Now() const = 0;
};

class RealClock final : public Clock {
 public:
  Time Now() const override;
};

class SimulatedClock final : public Clock {
 public:
  explicit SimulatedClock(Time start = 0) : now_(start) {}
  Time Now() const override { return now_.load(std::memory_order_relaxed); }
  void AdvanceTo(Time t) { now_.store(t, std::memory_order_relaxed); }

 private:
  std::atomic<Time> now_;
};

// "3d 04:05:06" style rendering for humans; "-" for kInfiniteTime.
std::string FormatDuration(Duration seconds);

}  // namespace gantry
