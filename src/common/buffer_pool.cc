#include "gantry/common/buffer_pool.h"

#include <pthread.h>
#include <sys/mman.h>

#include <cerrno>
#include <new>
#include <string>

namespace gantry {

BufferPool& BufferPool::Get() {
  static BufferPool* pool = [] {
    auto* p = new BufferPool();
    pthread_atfork(nullptr, nullptr, [] {
      // A forked child: a parent thread may have held the mutex at the fork. The idle
      // buffers are the child's copies; forgotten (they stay mapped), not reused.
      new (&Get().mu_) std::mutex();
      Get().idle_.clear();
      Get().idle_bytes_ = 0;
    });
    return p;
  }();
  return *pool;
}

Result<std::pair<char*, uint64_t>> BufferPool::Take(uint64_t n) {
  const uint64_t cap = (n + kUnit - 1) / kUnit * kUnit;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = idle_.lower_bound(cap);
    if (it != idle_.end() && it->first <= 2 * cap) {
      const std::pair<char*, uint64_t> got{it->second, it->first};
      idle_bytes_ -= it->first;
      idle_.erase(it);
      in_use_.fetch_add(got.second);
      return got;
    }
  }
  void* p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return StatusFromErrno(errno, "a buffer of " + std::to_string(cap));
  madvise(p, cap, MADV_HUGEPAGE);
  in_use_.fetch_add(cap);
  return std::pair<char*, uint64_t>{static_cast<char*>(p), cap};
}

void BufferPool::Give(char* p, uint64_t cap) {
  in_use_.fetch_sub(cap);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_bytes_ + cap <= kMaxIdle) {
      idle_.emplace(cap, p);
      idle_bytes_ += cap;
      return;
    }
  }
  munmap(p, cap);
}

uint64_t BufferPool::idle_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_bytes_;
}

}  // namespace gantry
