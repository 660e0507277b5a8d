// ParallelCopy: many (to, from, size) pieces copied as one job by the calling thread and a few
// helper threads, its bytes taken in 256 KiB units by whichever thread is free (pieces cut
// where a unit ends), so a helper that wakes late costs the caller nothing but its help.
//
// One core's memcpy does not saturate a machine's memory bandwidth: on the 2-vCPU VM of
// docs/performance.md one thread copies 9-11 GB/s, two 16-19 GB/s. A data loader that packs a
// batch of large samples into one block spends most of its time in that copy, so splitting it
// is worth a helper's wake-up once a share is large (for 128 KiB shares it was not: the reader
// ran at 0.62-0.67 of its rate); below `min_share` bytes per thread the caller copies alone.
//
//   ParallelCopy copy(1);                       // the caller and one helper
//   copy.Run(pieces, 1 << 20);                  // returns when every byte is copied
//
// Run is for one caller at a time (a reader's thread); the helpers are idle between jobs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace gantry {

class ThreadPool;

// `size` bytes to `to`: from memory at `from`, or, where `fd` is a file's (>= 0), read from it
// at `file_offset` (pread), straight to where they go rather than through a buffer of its own.
struct CopyPiece {
  char* to;
  const char* from;
  size_t size;
  int fd = -1;
  uint64_t file_offset = 0;
};

class ParallelCopy {
 public:
  // `helpers` threads besides the caller; 0 copies on the caller only (no thread is started).
  explicit ParallelCopy(int helpers);
  ~ParallelCopy();
  ParallelCopy(const ParallelCopy&) = delete;
  ParallelCopy& operator=(const ParallelCopy&) = delete;

  int helpers() const { return helpers_; }

  // Copies every piece; asks min(helpers, total / min_share - 1) helpers, and returns when
  // every byte is copied (a helper may still be waking then, with nothing left to do). Pieces
  // must not overlap one another's destinations. False when a file piece's read failed or
  // found the file shorter than it (the destination then holds what was read, not the file's
  // bytes); always true for pieces from memory.
  [[nodiscard]] bool Run(std::span<const CopyPiece> pieces, size_t min_share) const;

  // Threads a loader's copy is worth splitting over here: one helper where the process may run
  // on two or more cores (sched_getaffinity), else none.
  static int DefaultHelpers();

 private:
  int helpers_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace gantry
