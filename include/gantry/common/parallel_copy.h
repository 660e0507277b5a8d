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
//
// Start hands a job to the helpers alone and returns at once, so they copy while the caller
// does other work (a loader's caller runs the training loop's Python between batches); Finish
// then has the caller take whatever units are left and wait for the rest:
//
//   ParallelCopy::Started job = copy.Start(pieces);  // the pieces must outlive Finish
//   ...                                               // the helpers copy meanwhile
//   bool ok = copy.Finish(job);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace gantry {

class ThreadPool;
struct CopyJob;

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

  // A job handed to the helpers by Start, finished by Finish (or by its destructor, which
  // waits for it the same way: the pieces it copies may go right after).
  class Started {
   public:
    Started() = default;
    ~Started();
    Started(Started&&) noexcept = default;
    Started& operator=(Started&&) noexcept;
    Started(const Started&) = delete;
    Started& operator=(const Started&) = delete;

    // A job not yet finished: one Start gave, that Finish has not taken.
    bool pending() const { return job_ != nullptr; }
    // Every byte of it is copied (by the helpers, where Finish has not run): Finish would
    // return at once.
    bool copied() const;

   private:
    friend class ParallelCopy;
    std::shared_ptr<CopyJob> job_;
  };

  // Hands every piece to the helpers and returns without copying any: they begin at once, and
  // the caller finishes the job with Finish. With no helpers, Finish copies it all.
  [[nodiscard]] Started Start(std::span<const CopyPiece> pieces) const;
  // The caller copies the units the helpers have not taken, then waits for those they are
  // copying. As Run, false when a file piece's read failed or came short. A job never started
  // (or finished already) is true and copies nothing.
  [[nodiscard]] static bool Finish(Started& job);

  // Threads a loader's copy is worth splitting over here: one helper where the process may run
  // on two or more cores (sched_getaffinity), else none.
  static int DefaultHelpers();

 private:
  int helpers_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace gantry
