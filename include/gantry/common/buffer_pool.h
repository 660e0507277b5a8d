// BufferPool: large buffers of anonymous memory, kept once given back so that the next buffer
// of about the same size is memory already touched.
//
// Fresh memory costs its first touch: zeroing, page tables, and on a shadow-paged VM an exit
// to the hypervisor per 4 KiB page (docs/performance.md, "the first touch of a mapped page").
// A loader that reads each shard, or packs each batch, into a new buffer pays that for every
// byte it hands out; one that reuses buffers pays it once. Buffers are mappings in 2 MiB units
// with MADV_HUGEPAGE, so even a new one is touched a huge page at a time where the kernel
// allows it. Process-wide and thread-safe; a forked child forgets the parent's idle buffers.
//
//   auto [p, cap] = *BufferPool::Get().Take(n);   // at least n bytes, cap of them usable
//   ...
//   BufferPool::Get().Give(p, cap);               // kept for reuse, up to kMaxIdle
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "gantry/common/status.h"

namespace gantry {

class BufferPool {
 public:
  static constexpr uint64_t kUnit = uint64_t{2} << 20;
  static constexpr uint64_t kMaxIdle = uint64_t{256} << 20;  // kept for reuse; beyond, unmapped

  // The process's pool; never destroyed (buffers may be given back during exit).
  static BufferPool& Get();

  // A buffer of at least n bytes (n > 0) and its capacity: an idle one no more than twice as
  // large, else a new mapping.
  Result<std::pair<char*, uint64_t>> Take(uint64_t n);
  // Gives back a buffer Take gave, with its capacity.
  void Give(char* p, uint64_t cap);

  uint64_t idle_bytes();
  uint64_t in_use() const { return in_use_.load(); }  // bytes of buffers taken, not given back

 private:
  BufferPool() = default;

  std::atomic<uint64_t> in_use_{0};
  std::mutex mu_;
  std::multimap<uint64_t, char*> idle_;  // by capacity
  uint64_t idle_bytes_ = 0;
};

}  // namespace gantry
