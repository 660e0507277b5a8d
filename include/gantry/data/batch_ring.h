// BatchRing: a file of shared memory (in /dev/shm) that one process, a DataLoader worker, writes
// packed batches into, and another, the training process, reads them from in place. Only where
// a block lies (its offset, sequence number and size) crosses the DataLoader's pipe, so each
// batch's bytes are written once, by the worker's gather, where through the pipe they would be
// copied three more times (into the pipe, out of it, and into the pickled bytes object), and
// they land in pages the training process has touched before instead of in a fresh block.
//
//   producer:  GANTRY_ASSIGN_OR_RETURN(auto ring, BatchRing::Create(path, 64 << 20));
//              std::optional<BatchRing::Block> b = ring->Allocate(n);  // nullopt: no room
//              ... fill b->data ...; ring->Ref(b->offset) for each descriptor sent
//   consumer:  GANTRY_ASSIGN_OR_RETURN(auto ring, BatchRing::Open(path));
//              GANTRY_ASSIGN_OR_RETURN(BatchRing::Block b, ring->Adopt(offset, seq, size));
//              ... read b.data ...; ring->Unref(b.offset) when done
//
// Each block carries a reference count in the shared file; the producer reuses a block's space
// once its count is zero, taking the lowest free space that holds the next block, and a block
// still held (a batch the training loop keeps) is never written over: with no room left,
// Allocate says so rather than wait, and the caller sends its batch the ordinary way. A
// reference that is never dropped (a descriptor lost with a DataLoader that was shut down)
// keeps its block's space for the life of its producer: less room, never a wrong byte. A descriptor
// whose block is gone or was reused fails Adopt (DataLoss), never reads another batch's bytes: its
// sequence number and size are checked.
//
// Create maps every page of the ring writable at once (MADV_POPULATE_WRITE where the kernel has
// it), rather than a fault per page during the first lap of blocks: on a shadow-paged VM those
// faults slowed the worker enough to keep a training loop waiting (docs/performance.md).
//
// One producer per ring: Allocate is thread-safe, and meant for the process that created the
// ring (a forked child must make its own). Ref, Unref and Adopt are thread- and process-safe.
// The producer's BatchRing removes the file when it is destroyed; a consumer's mapping stays
// valid after that for as long as the consumer holds the BatchRing.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "gantry/common/status.h"

namespace gantry::data {

class BatchRing {
 public:
  struct Block {
    uint64_t offset = 0;  // of the block's record in the file: what a descriptor names
    uint64_t seq = 0;     // the producer's count of blocks, from 1
    char* data = nullptr;
    uint64_t size = 0;
  };

  // Bytes of a block's record ahead of its data, and the alignment of every record.
  static constexpr uint64_t kRecordBytes = 64;
  // The smallest ring Create makes.
  static constexpr uint64_t kMinCapacity = uint64_t{64} << 10;

  // A new ring of `capacity` bytes (rounded down to a multiple of 64) in a new file at `path`
  // (AlreadyExists if there is one), its space reserved up front: ResourceExhausted where the
  // file system (a container's small /dev/shm) has not that much free.
  static Result<std::shared_ptr<BatchRing>> Create(const std::string& path, uint64_t capacity);
  // The ring another process created at `path`, to adopt the blocks it sends.
  static Result<std::shared_ptr<BatchRing>> Open(const std::string& path);

  ~BatchRing();
  BatchRing(const BatchRing&) = delete;
  BatchRing& operator=(const BatchRing&) = delete;

  // A block of `size` bytes holding one reference, or nullopt when there is no room for it
  // anywhere but over blocks still referenced.
  std::optional<Block> Allocate(uint64_t size);
  // One reference more, or one less, to the block at `offset`.
  void Ref(uint64_t offset);
  void Unref(uint64_t offset);
  // The block at `offset` that a descriptor (offset, seq, size) names, which takes over the
  // reference the descriptor held. DataLoss when no such block is there.
  Result<Block> Adopt(uint64_t offset, uint64_t seq, uint64_t size);

  const std::string& path() const { return path_; }
  uint64_t capacity() const { return capacity_; }
  bool producer() const { return producer_; }
  // The process that created the ring (from the file's header).
  pid_t producer_pid() const;
  // Producer: bytes of the blocks not yet reclaimed (for tests).
  uint64_t used_bytes();

 private:
  BatchRing(std::string path, char* base, uint64_t capacity, bool producer);
  void Reclaim();  // with mu_ held

  const std::string path_;
  char* const base_;
  const uint64_t capacity_;
  const bool producer_;
  const pid_t creator_;  // the producer's getpid() at creation: only it removes the file

  std::mutex mu_;                      // the producer's allocation state:
  std::map<uint64_t, uint64_t> live_;  // offset -> length of every record not reclaimed
  uint64_t used_ = 0;                  // their lengths' sum
  uint64_t seq_ = 0;
};

}  // namespace gantry::data
