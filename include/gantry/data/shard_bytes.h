// ShardBytes: one shard's bytes, read-only, shared by the parsed shard and every sample (and
// Python memoryview) that points into them: either a string in memory (a remote fetch, a
// decompressed shard), a read-only mapping of a local file (a file:// dataset, a node-local
// cache entry), so reading a local shard copies nothing and touches only the pages used, or a
// local file read into memory reused from shards dropped before (ReadFile), or such a file whose
// bytes are read only as they are asked for (OpenFile).
//
//   GANTRY_ASSIGN_OR_RETURN(std::shared_ptr<ShardBytes> b, ShardBytes::MapFile(path, {}));
//   Parse(b->view());
//   if (b->damaged()) return DataLoss(...);   // the file was cut short under the mapping
//
// A mapped file that another process truncates would raise SIGBUS on the next access to a page
// past its new end and kill the process. Every mapping is registered with a SIGBUS handler that
// replaces the pages from the faulting one to the mapping's end with zero pages, marks the
// mapping damaged() and lets the access continue; faults outside Gantry's mappings go to the
// handler installed before (chained; re-installed on top at each mapping and EnsureGuard when
// someone, e.g. Python's faulthandler, replaced it since; a handler on top that re-raises the
// signal after printing, as faulthandler does, gets the fault repaired too, after its message).
// Readers check damaged() after verifying and before each
// sample they hand out, and fail loudly naming the shard (loader.h). Bytes of a file rewritten
// in place at the same size are not detected after the mapping was verified: datasets are
// expected to be immutable while read (the cache's files are, by its protocol: published by
// rename, evicted by unlink, never rewritten).
//
// The last holder of a mapping gives it back to one process-wide thread that unmaps it (tearing
// down a populated shard's page tables costs ~150 us per 16 MiB, which would otherwise land on
// the training loop that drops the last batch of a shard); it stays guarded until then.
//
// Thread-safe (immutable after creation; damaged() is atomic). Fork-safe: a forked child (a
// DataLoader worker) unmaps what it inherited as given back, on a thread of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/common/parallel_copy.h"
#include "gantry/common/status.h"

namespace gantry::data {

// Whether every page of the open file's first `len` bytes is in the page cache: cachestat(2)
// where the kernel has it (Linux 6.5; 25 us for a 16 MiB file), else mincore over a mapping
// never touched (87 us: docs/performance.md, "the page cache asked once per shard"). False
// when neither can tell. `cachestat` false asks mincore only (a test compares the two).
bool WhollyInPageCache(int fd, uint64_t len, bool cachestat = true);
// Whether WhollyInPageCache still asks cachestat: false once the kernel lacked it or refused it.
bool PageCacheCheckUsesCachestat();

struct MapOptions {
  // Fault every page in at map time (MAP_POPULATE): the I/O and page-table work happens on the
  // thread that maps (the read-ahead's), not on the consumer's first touch.
  bool populate = true;
};

class ShardBytes {
 public:
  static std::shared_ptr<const ShardBytes> FromString(std::string bytes);
  // Maps the whole file read-only (shared with the page cache, madvise WILLNEED). NotFound when
  // it does not exist; ResourceExhausted when no guard slot is free (the caller reads it
  // instead: an unguarded mapping could crash the process).
  static Result<std::shared_ptr<ShardBytes>> MapFile(const std::string& path,
                                                     const MapOptions& options);
  // Reads the whole file into memory that earlier shards were read into, once they were
  // dropped (a process-wide pool keeps up to 256 MiB of it): reused memory costs no first touch
  // on the consumer's thread, where a new mapping's pages can (docs/performance.md, "the first
  // touch of a mapped page"), at the price of one copy on the reading thread. NotFound when it
  // does not exist; ResourceExhausted when it is larger than max_bytes; DataLoss when it is
  // shorter than its size said by the time it is read.
  static Result<std::shared_ptr<ShardBytes>> ReadFile(const std::string& path, uint64_t max_bytes);
  // ReadFile without the read: the file stays open, and its bytes come into view() only as Fill
  // asks for them (a parse of the shard asks for its headers), or go from the file straight to
  // where a caller copies them (AppendCopyPieces). A batch that packs a large member then costs
  // one copy of it, from the page cache to the batch, where a shard read whole costs two
  // (docs/performance.md, "large members read straight into their batch"). Gaps shorter than
  // `min_gap` are worth no read of their own: FillGapsBelow reads them. A file not wholly in
  // the page cache (mincore) is read whole at once, as ReadFile would: from disk, reading it
  // here, on the read-ahead's thread, is faster than each member on the consumer's; so is one
  // opened while 256 others with bytes left in their files are held in this process (each
  // holds its file open). Errors as ReadFile's.
  static Result<std::shared_ptr<ShardBytes>> OpenFile(const std::string& path, uint64_t max_bytes,
                                                      uint64_t min_gap);
  ~ShardBytes();
  ShardBytes(const ShardBytes&) = delete;
  ShardBytes& operator=(const ShardBytes&) = delete;

  std::string_view view() const { return {data_, size_}; }
  const char* data() const { return data_; }
  uint64_t size() const { return size_; }
  bool mapped() const { return guard_ >= 0; }
  // The file the bytes are mapped from was cut short under the mapping: some of view()'s pages
  // now read as zeros. Always false for bytes in memory.
  bool damaged() const;

  // Every byte of view() is there: true but for an OpenFile shard with bytes not read yet.
  bool complete() const;
  // Reads what of [offset, offset + n) (within view()) is not there yet, and some bytes after
  // it: more the longer the reads follow one another, so a walk over many small members ends
  // up reading in large pieces and one over large members reads little beyond each header.
  // DataLoss when the file is shorter than it was (then damaged() is true); Ok when complete().
  // Thread-safe; bytes already there are never written again.
  Status Fill(uint64_t offset, uint64_t n) const;
  Status Fill(std::string_view part) const {  // `part` lies within view()
    return Fill(static_cast<uint64_t>(part.data() - data_), part.size());
  }
  // Reads every run of unread bytes shorter than OpenFile's min_gap (each stretch of them
  // between large gaps in one read), and becomes complete() when no gap is left, closing the
  // file then. For the thread that made the shard, before it shares it.
  Status FillGapsBelow() const;
  // Appends the pieces that copy `part` (within view()) to `to`: from memory where it was read,
  // from the file where not (ParallelCopy reads those with pread).
  void AppendCopyPieces(std::string_view part, char* to, std::vector<CopyPiece>& out) const;
  // Bytes of view() not read yet (0 when complete()).
  uint64_t unread_bytes() const;
  // OpenFile's min_gap (0 for the other kinds).
  uint64_t min_gap() const;
  // Narrows view() to its first n bytes (n <= size()): e.g. the cache's trailer off. Call before
  // sharing.
  void Truncate(uint64_t n) {
    if (n < size_) size_ = n;
  }

  // Puts the SIGBUS guard back on top if another handler replaced it since (MapFile does this
  // too); one sigaction(2) query when it is in place. For callers that hand mapped bytes to code
  // that may install handlers of its own between mappings (the Python binding, per sample).
  static void EnsureGuard();

  // Mappings alive in this process (after waiting for those given back to be unmapped), and how
  // many were damaged since it started (for tests).
  static uint64_t LiveMappings();
  static uint64_t DamagedMappings();
  // Memory of dropped ReadFile shards kept for the next (for tests), and memory of ReadFile
  // shards still held (whole 2 MiB units).
  static uint64_t IdleReadBufferBytes();
  static uint64_t ReadBufferBytesInUse();

  // Whether the first touch of a page mapped a moment ago costs this process about a cache
  // miss, as on bare metal and hardware-paged VMs, or an exit to the hypervisor (~2-5 us a
  // 4 KiB page on a shadow-paged VM, which MAP_POPULATE does not prevent): the loader's default
  // between mapping local shards and reading them (ShardSourceOptions::map_files). Measured once
  // per process, the first time it is asked: 64 pages of anonymous memory mapped with
  // MAP_POPULATE, then touched; the fastest of three tries, cheap below 0.5 us a page.
  static bool FirstTouchIsCheap();
  // The measurement behind it: microseconds per page, the fastest of three tries.
  static double FirstTouchMicros();

 private:
  struct Unread;  // OpenFile's file and what of it is read
  ShardBytes();
  std::string owned_;
  const char* data_ = nullptr;
  uint64_t size_ = 0;
  void* map_ = nullptr;  // the mapping (page aligned) and its length
  uint64_t map_len_ = 0;
  int guard_ = -1;          // the SIGBUS guard slot, or -1 for bytes in memory
  char* pooled_ = nullptr;  // ReadFile's buffer, given back to its pool
  uint64_t pooled_cap_ = 0;
  std::unique_ptr<Unread> unread_;  // OpenFile's, else null
};

}  // namespace gantry::data
