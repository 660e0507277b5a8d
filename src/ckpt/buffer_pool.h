// HostBufferPool: the bounded, reused host memory that asynchronous save snapshots tensors
// into. Buffers are chunk-sized, page-aligned, allocated on first use up to the bound and kept
// for later saves (so a steady-state save touches no fresh pages). Several small chunks may
// share one buffer; a buffer returns to the pool when its last chunk is written.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

namespace gantry::ckpt {

class HostBufferPool {
 public:
  static constexpr uint64_t kHugePage = 2ull << 20;

  struct Buffer {
    char* data = nullptr;
    int refs = 0;  // guarded by the pool's mutex
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
  Buffer* Acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !free_.empty() || all_.size() < max_buffers_; });
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
  void AddRef(Buffer* b) {
    std::lock_guard<std::mutex> lock(mu_);
    ++b->refs;
  }
  void Release(Buffer* b) {
    std::lock_guard<std::mutex> lock(mu_);
    if (--b->refs == 0) {
      free_.push_back(b);
      cv_.notify_one();
    }
  }
  // Bytes allocated so far (the pool's real memory cost).
  uint64_t allocated_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return all_.size() * buffer_bytes_;
  }

 private:
  const uint64_t buffer_bytes_;
  const uint64_t max_buffers_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Buffer>> all_;  // guarded by mu_
  std::vector<Buffer*> free_;                 // guarded by mu_
};

}  // namespace gantry::ckpt
