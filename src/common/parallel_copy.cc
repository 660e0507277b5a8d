#include "gantry/common/parallel_copy.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include "gantry/common/thread_pool.h"

namespace gantry {
namespace {

// The job's bytes are taken in units of this size, by whichever thread is free: a helper that
// is late to wake (a busy or oversubscribed machine) leaves its share to the caller instead of
// making it wait, and the caller waits at most for the units helpers are copying.
constexpr size_t kUnit = size_t{256} << 10;

// Copies the bytes [begin, end) of the pieces laid end to end.
void CopyRange(std::span<const CopyPiece> pieces, size_t begin, size_t end) {
  size_t at = 0;  // where the current piece starts in the concatenation
  for (const CopyPiece& p : pieces) {
    const size_t from = std::max(begin, at);
    const size_t to = std::min(end, at + p.size);
    if (from < to) std::memcpy(p.to + (from - at), p.from + (from - at), to - from);
    at += p.size;
    if (at >= end) return;
  }
}

struct Job {
  std::span<const CopyPiece> pieces;
  size_t total = 0;
  size_t units = 0;
  std::atomic<size_t> next{0};  // the next unit to take
  std::atomic<size_t> done{0};  // units copied

  // Takes and copies units until none is left.
  void Work() {
    for (size_t u = next.fetch_add(1); u < units; u = next.fetch_add(1)) {
      CopyRange(pieces, u * kUnit, std::min(total, (u + 1) * kUnit));
      if (done.fetch_add(1) + 1 == units) done.notify_one();
    }
  }
};

}  // namespace

ParallelCopy::ParallelCopy(int helpers) : helpers_(std::max(0, helpers)) {
  if (helpers_ > 0) pool_ = std::make_unique<ThreadPool>(helpers_);
}

ParallelCopy::~ParallelCopy() = default;

void ParallelCopy::Run(std::span<const CopyPiece> pieces, size_t min_share) const {
  size_t total = 0;
  for (const CopyPiece& p : pieces) total += p.size;
  const size_t shares =
      std::min<size_t>(helpers_ + 1, std::max<size_t>(1, total / std::max<size_t>(1, min_share)));
  if (shares <= 1) {
    for (const CopyPiece& p : pieces) {
      if (p.size != 0) std::memcpy(p.to, p.from, p.size);
    }
    return;
  }
  // Shared with the helpers, which may start after the caller has taken every unit: they then
  // find none left and touch nothing else (the pieces may be gone by then).
  auto job = std::make_shared<Job>();
  job->pieces = pieces;
  job->total = total;
  job->units = (total + kUnit - 1) / kUnit;
  for (size_t k = 1; k < shares; ++k) pool_->Submit([job] { job->Work(); });
  job->Work();
  // Every unit is taken; wait for those a helper is still copying.
  for (size_t d = job->done.load(); d < job->units; d = job->done.load()) job->done.wait(d);
}

int ParallelCopy::DefaultHelpers() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set) >= 2 ? 1 : 0;
}

}  // namespace gantry
