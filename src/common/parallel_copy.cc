#include "gantry/common/parallel_copy.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <vector>

#include "gantry/common/thread_pool.h"

namespace gantry {
namespace {

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
  // Shares end on 64-byte boundaries of the concatenation, so two threads never write one
  // cache line (where pieces are laid out contiguously, as a packed block's are).
  auto bound = [&](size_t k) {
    return k == shares ? total : std::min(total, (total * k / shares + 63) / 64 * 64);
  };
  std::vector<std::future<void>> running;
  running.reserve(shares - 1);
  for (size_t k = 1; k < shares; ++k) {
    running.push_back(
        pool_->Submit([pieces, b = bound(k), e = bound(k + 1)] { CopyRange(pieces, b, e); }));
  }
  CopyRange(pieces, 0, bound(1));
  for (std::future<void>& f : running) f.get();
}

int ParallelCopy::DefaultHelpers() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set) >= 2 ? 1 : 0;
}

}  // namespace gantry
