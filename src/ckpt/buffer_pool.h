// HostBufferPool: the bounded, reused host memory that asynchronous save snapshots tensors
// into. Buffers are chunk-sized, page-aligned, allocated on first use up to the bound and kept
// for later saves (so a steady-state save touches no fresh pages). Several small chunks may
// share one buffer; a buffer returns to the pool when its last chunk is written.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "gantry/common/thread_annotations.h"

namespace gantry::ckpt {

class HostBufferPool {
 public:
  static constexpr uint64_t kHugePage = 2ull << 20;

  struct Buffer {
    char* data = nullptr;
    // Guarded by the pool's mu_. Not GUARDED_BY: an attribute in a nested struct cannot name
    // the enclosing object's mutex.
    int refs = 0;
  };

  HostBufferPool(uint64_t buffer_bytes, uint64_t total_bytes)
      : buffer_bytes_(buffer_bytes),
        max_buffers_(std::max<uint64_t>(1, total_bytes / std::max<uint64_t>(1, buffer_bytes))) {}
  ~HostBufferPool() {
    for (auto& b : all_) std::free(b->data);
  }
  HostBufferPool(const HostBufferPool&) = delete;
  HostBufferPool& operator=(const HostBufferPool&) = delete;

  uint64_t buffer_bytes() const { return buffer_bytes_; }
  uint64_t max_buffers() const { return max_buffers_; }
  uint64_t capacity_bytes() const { return buffer_bytes_ * max_buffers_; }

  // A free buffer with one reference, waiting for one to be released if all are in use.
  Buffer* Acquire() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    while (free_.empty() && all_.size() >= max_buffers_) cv_.Wait(mu_);
    Buffer* b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {
      auto owned = std::make_unique<Buffer>();
      // Huge-page alignment (and the hint) make the first touch of a fresh buffer 512 times
      // fewer page faults; page alignment alone would let a local tier write with O_DIRECT.
      const uint64_t size = (buffer_bytes_ + kHugePage - 1) / kHugePage * kHugePage;
      owned->data = static_cast<char*>(std::aligned_alloc(kHugePage, size));
      if (owned->data == nullptr) throw std::bad_alloc();
      ::madvise(owned->data, size, MADV_HUGEPAGE);  // a hint: failure changes nothing
      b = owned.get();
      all_.push_back(std::move(owned));
    }
    b->refs = 1;
    return b;
  }
  void AddRef(Buffer* b) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    ++b->refs;
  }
  void Release(Buffer* b) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (--b->refs == 0) {
      free_.push_back(b);
      cv_.NotifyOne();
    }
  }
  // Bytes allocated so far (the pool's real memory cost).
  uint64_t allocated_bytes() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return all_.size() * buffer_bytes_;
  }

 private:
  const uint64_t buffer_bytes_;
  const uint64_t max_buffers_;
  mutable Mutex mu_;
  CondVar cv_;
  std::vector<std::unique_ptr<Buffer>> all_ GUARDED_BY(mu_);
  std::vector<Buffer*> free_ GUARDED_BY(mu_);
};

}  // namespace gantry::ckpt
