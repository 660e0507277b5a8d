#include "gantry/common/progress.h"

#include <unistd.h>

#include <algorithm>

#include "gantry/common/units.h"

namespace gantry {

namespace {
constexpr int kBarWidth = 30;
}  // namespace

ProgressBar::ProgressBar(std::string label, bool enabled, Unit unit, std::FILE* out)
    : label_(std::move(label)), enabled_(enabled), unit_(unit), out_(out) {}

ProgressBar::~ProgressBar() {
  std::lock_guard<std::mutex> lock(mu_);
  if (drawn_) {
    std::fputs("\r\033[K", out_);
    std::fflush(out_);
  }
}

bool ProgressBar::StderrIsTerminal() { return ::isatty(STDERR_FILENO) != 0; }

std::string ProgressBar::Render(const std::string& label, int percent, Unit unit, uint64_t done,
                                uint64_t total) {
  percent = std::clamp(percent, 0, 100);
  const int fill = percent * kBarWidth / 100;
  std::string line = label + " [" + std::string(fill, '=') + std::string(kBarWidth - fill, ' ') +
                     "] " +
                     std::string(percent < 10    ? 2
                                 : percent < 100 ? 1
                                                 : 0,
                                 ' ') +
                     std::to_string(percent) + "%";
  if (unit == kBytes) line += "  " + FormatBytes(done) + " / " + FormatBytes(total);
  return line;
}

void ProgressBar::Update(uint64_t done, uint64_t total) {
  if (!enabled_) return;
  const int percent =
      total == 0 ? 100 : static_cast<int>(std::min<uint64_t>(done, total) * 100 / total);
  Draw(percent, done, total);
}

void ProgressBar::UpdateFraction(double fraction) {
  if (!enabled_) return;
  Draw(static_cast<int>(std::clamp(fraction, 0.0, 1.0) * 100), 0, 0);
}

std::function<void(uint64_t, uint64_t)> ProgressBar::Callback() {
  if (!enabled_) return {};
  return [this](uint64_t done, uint64_t total) { Update(done, total); };
}

void ProgressBar::Draw(int percent, uint64_t done, uint64_t total) {
  std::lock_guard<std::mutex> lock(mu_);
  if (percent == last_) return;
  last_ = percent;
  drawn_ = true;
  std::fprintf(out_, "\r\033[K%s", Render(label_, percent, unit_, done, total).c_str());
  std::fflush(out_);
}

}  // namespace gantry
