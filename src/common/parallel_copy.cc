#include "gantry/common/parallel_copy.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>

#include "gantry/common/thread_pool.h"

namespace gantry {

// The job's bytes are taken in units of this size, by whichever thread is free: a helper that
// is late to wake (a busy or oversubscribed machine) leaves its share to the caller instead of
// making it wait, and the caller waits at most for the units helpers are copying.
constexpr size_t kCopyUnit = size_t{256} << 10;

// One job's units, shared with the helpers, which may start after the caller has taken every
// unit: they then find none left and touch nothing else (the pieces may be gone by then).
struct CopyJob {
  std::span<const CopyPiece> pieces;
  size_t total = 0;
  size_t units = 0;
  std::atomic<size_t> next{0};      // the next unit to take
  std::atomic<size_t> done{0};      // units copied
  std::atomic<bool> failed{false};  // a file read failed or came short

  CopyJob(std::span<const CopyPiece> p, size_t bytes)
      : pieces(p), total(bytes), units((bytes + kCopyUnit - 1) / kCopyUnit) {}

  // Takes and copies units until none is left.
  void Work();
  // Work, then waits for the units other threads are copying; false when a read failed.
  bool Join() {
    Work();
    for (size_t d = done.load(); d < units; d = done.load()) done.wait(d);
    return !failed.load();
  }
};

namespace {

// Copies n bytes of piece p from its offset k; false when its file read failed or came short.
bool CopyPart(const CopyPiece& p, size_t k, size_t n) {
  if (p.fd < 0) {
    std::memcpy(p.to + k, p.from + k, n);
    return true;
  }
  size_t got = 0;
  while (got < n) {
    const ssize_t r =
        pread(p.fd, p.to + k + got, n - got, static_cast<off_t>(p.file_offset + k + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

// Copies the bytes [begin, end) of the pieces laid end to end; false when a file read failed.
bool CopyRange(std::span<const CopyPiece> pieces, size_t begin, size_t end) {
  size_t at = 0;  // where the current piece starts in the concatenation
  bool ok = true;
  for (const CopyPiece& p : pieces) {
    const size_t from = std::max(begin, at);
    const size_t to = std::min(end, at + p.size);
    if (from < to) ok = CopyPart(p, from - at, to - from) && ok;
    at += p.size;
    if (at >= end) break;
  }
  return ok;
}

}  // namespace

void CopyJob::Work() {
  for (size_t u = next.fetch_add(1); u < units; u = next.fetch_add(1)) {
    if (!CopyRange(pieces, u * kCopyUnit, std::min(total, (u + 1) * kCopyUnit))) {
      failed.store(true);
    }
    if (done.fetch_add(1) + 1 == units) done.notify_one();
  }
}

ParallelCopy::ParallelCopy(int helpers) : helpers_(std::max(0, helpers)) {
  if (helpers_ > 0) pool_ = std::make_unique<ThreadPool>(helpers_);
}

ParallelCopy::~ParallelCopy() = default;

bool ParallelCopy::Run(std::span<const CopyPiece> pieces, size_t min_share) const {
  size_t total = 0;
  for (const CopyPiece& p : pieces) total += p.size;
  const size_t shares =
      std::min<size_t>(helpers_ + 1, std::max<size_t>(1, total / std::max<size_t>(1, min_share)));
  if (shares <= 1) {
    bool ok = true;
    for (const CopyPiece& p : pieces) {
      if (p.size != 0) ok = CopyPart(p, 0, p.size) && ok;
    }
    return ok;
  }
  auto job = std::make_shared<CopyJob>(pieces, total);
  for (size_t k = 1; k < shares; ++k) pool_->Submit([job] { job->Work(); });
  return job->Join();
}

ParallelCopy::Started::~Started() {
  if (job_ != nullptr) (void)job_->Join();
}

bool ParallelCopy::Started::copied() const {
  return job_ == nullptr || job_->done.load() == job_->units;
}

ParallelCopy::Started& ParallelCopy::Started::operator=(Started&& other) noexcept {
  if (this != &other) {
    if (job_ != nullptr) (void)job_->Join();
    job_ = std::move(other.job_);
  }
  return *this;
}

ParallelCopy::Started ParallelCopy::Start(std::span<const CopyPiece> pieces) const {
  size_t total = 0;
  for (const CopyPiece& p : pieces) total += p.size;
  Started started;
  started.job_ = std::make_shared<CopyJob>(pieces, total);
  if (total == 0) return started;
  for (int k = 0; k < helpers_; ++k) pool_->Submit([job = started.job_] { job->Work(); });
  return started;
}

bool ParallelCopy::Finish(Started& job) {
  if (job.job_ == nullptr) return true;
  const std::shared_ptr<CopyJob> taken = std::move(job.job_);
  return taken->Join();
}

int ParallelCopy::DefaultHelpers() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set) >= 2 ? 1 : 0;
}

}  // namespace gantry
