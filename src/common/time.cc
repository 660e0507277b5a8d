#include "gantry/common/time.h"

#include <chrono>
#include <cstdio>
#include <thread>

namespace gantry {

Time RealClock::Now() const {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t RealClock::NowMillis() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void RealClock::SleepForMillis(int64_t ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

Clock& DefaultClock() {
  static RealClock clock;
  return clock;
}

std::string FormatDuration(Duration s) {
  if (s >= kInfiniteTime) return "-";
  const char* sign = s < 0 ? "-" : "";
  if (s < 0) s = -s;
  char buf[64];
  const int64_t d = s / 86400, h = (s / 3600) % 24, m = (s / 60) % 60, sec = s % 60;
  if (d > 0) {
    std::snprintf(buf, sizeof buf, "%s%lldd %02lld:%02lld:%02lld", sign, static_cast<long long>(d),
                  static_cast<long long>(h), static_cast<long long>(m),
                  static_cast<long long>(sec));
  } else {
    std::snprintf(buf, sizeof buf, "%s%02lld:%02lld:%02lld", sign, static_cast<long long>(h),
                  static_cast<long long>(m), static_cast<long long>(sec));
  }
  return buf;
}

}  // namespace gantry
