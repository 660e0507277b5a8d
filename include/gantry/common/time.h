// Time in Gantry: whole seconds since an epoch chosen by the caller (a trace's first submit, or
// the Unix epoch for live clusters), and the clocks that supply "now".
//
// The scheduling engine never reads a clock itself: drivers pass `now` in. The simulator uses a
// SimulatedClock it advances; the live control plane uses RealClock. The data layer (cache,
// ckpt) takes a Clock for everything protocol-shaped: polling for other ranks, commit
// timeouts, GC grace periods; on a SimulatedClock a sleeping poller advances the clock itself,
// so a ten-minute commit timeout is tested in microseconds. Both are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
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
  // Seconds since the epoch (wall time: comparable with file and object mtimes).
  virtual Time Now() const = 0;
  // Milliseconds on a clock that never goes backwards, for deadlines and polling.
  virtual int64_t NowMillis() const = 0;
  // Blocks the caller for `ms` (RealClock) or advances simulated time by `ms` (SimulatedClock).
  virtual void SleepForMillis(int64_t ms) = 0;
};

class RealClock final : public Clock {
 public:
  Time Now() const override;
  int64_t NowMillis() const override;
  void SleepForMillis(int64_t ms) override;
};

// The process's RealClock, for components whose options leave the clock unset.
Clock& DefaultClock();

// Time that moves only when told: AdvanceTo/AdvanceMillis, or a caller sleeping on it (which
// returns at once, having moved the clock forward by the sleep).
class SimulatedClock final : public Clock {
 public:
  explicit SimulatedClock(Time start = 0) : now_ms_(start * 1000) {}
  Time Now() const override { return now_ms_.load(std::memory_order_relaxed) / 1000; }
  int64_t NowMillis() const override { return now_ms_.load(std::memory_order_relaxed); }
  void SleepForMillis(int64_t ms) override { AdvanceMillis(ms); }
  void AdvanceTo(Time t) { now_ms_.store(t * 1000, std::memory_order_relaxed); }
  void AdvanceMillis(int64_t ms) { now_ms_.fetch_add(ms, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_ms_;
};

// "3d 04:05:06" style rendering for humans; "-" for kInfiniteTime.
std::string FormatDuration(Duration seconds);

}  // namespace gantry
