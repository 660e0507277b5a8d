// ProgressBar: the one progress line every long command draws on a terminal (a simulation, a
// transfer, a checkpoint verify), so they look alike and none re-implements the redraw rules.
//
// The line is redrawn in place ("\r", then clear to end of line) only when the whole percent
// changes, and erased when the bar is destroyed, so what a command prints afterwards starts on a
// clean line. A disabled bar (stderr is not a terminal, or --json) draws nothing.
//
//   ProgressBar bar("verify step 100", ProgressBar::StderrIsTerminal(), ProgressBar::kBytes);
//   engine.Verify(100, bar.Callback());
//
// Thread-safe: Update and the callbacks may be called from many threads at once (a transfer's
// parts complete on a pool). The bar must outlive every callback it hands out.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>

namespace gantry {

class ProgressBar {
 public:
  // What `done` and `total` count: shown as "1.50 GiB / 3.00 GiB" for kBytes, only the percent
  // for kFraction.
  enum Unit { kFraction, kBytes };

  ProgressBar(std::string label, bool enabled, Unit unit = kFraction, std::FILE* out = stderr);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // True when stderr is a terminal: the usual `enabled` argument.
  static bool StderrIsTerminal();

  void Update(uint64_t done, uint64_t total);
  void UpdateFraction(double fraction);  // 0..1
  // Update as a function, for the engines' progress hooks; empty when the bar is disabled, so a
  // caller that checks for a hook skips the bookkeeping.
  std::function<void(uint64_t, uint64_t)> Callback();

  // The text of one redraw, without the leading "\r\033[K" (for tests and other sinks):
  // "verify step 100 [=========           ]  30%  1.00 MiB / 3.33 MiB".
  static std::string Render(const std::string& label, int percent, Unit unit, uint64_t done,
                            uint64_t total);

 private:
  void Draw(int percent, uint64_t done, uint64_t total);

  const std::string label_;
  const bool enabled_;
  const Unit unit_;
  std::FILE* const out_;
  std::mutex mu_;
  bool drawn_ = false;  // guarded by mu_
  int last_ = -1;       // guarded by mu_: the percent drawn last
};

}  // namespace gantry
