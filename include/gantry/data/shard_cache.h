// ShardCache: one dataset's view of a node-local directory of whole dataset shards, shared by
// every process on the node that reads the dataset (and, for the byte budget, by every dataset
// cached in the same directory). The loader (loader.h) fetches a shard from its sources once
// per node and reads it from here afterwards.
//
// Layout (docs/data.md "Node-local shard cache"):
//   DIR/.evict-lock        flock(2): one eviction-and-publish at a time on the node
//   DIR/ID/URL             the dataset's URL as its store names it, for people (ID: 16 hex
//                          digits of the xxh64 of that URL and the version's fingerprint)
//   DIR/ID/.fetch-lock     byte i write-locked while shard i is being fetched
//   DIR/ID/.pin-lock       byte i read-locked while shard i is in some reader's window
//   DIR/ID/I.NAME          shard I's stored bytes, then a 16-byte trailer (xxh3-64, magic)
//   DIR/ID/.tmp-*          a shard being written
// The locks are open-file-description locks (F_OFD_SETLK): per open file, so they work between
// threads as between processes, and the kernel drops them when a process dies.
//
// Protocol: a reader pins shard i (PinShard) before looking it up, takes the fetch lock to
// download it (so two processes never both download one shard: the second waits and then finds
// it), and publishes with Put: write a temporary file, fsync, take the evict lock, evict least
// recently used unpinned shards (any dataset) until the new one fits the budget, rename, fsync
// the directory. A shard that cannot fit because everything else is pinned is ResourceExhausted
// and the caller serves it without caching it. Get checks the trailer's checksum on every hit
// and deletes a damaged copy (DataLoss), so the caller fetches it again.
//
//   GANTRY_ASSIGN_OR_RETURN(auto cache, ShardCache::Open({"/nvme/gantry-data", 100 << 30}, url));
//   GANTRY_ASSIGN_OR_RETURN(ShardCache::Pin pin, cache->PinShard(3));
//   Result<std::string> bytes = cache->Get(3, "shard.00003.mds");
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "gantry/common/status.h"
#include "gantry/common/thread_annotations.h"
#include "gantry/data/shard_bytes.h"

namespace gantry::data {

struct ShardCacheOptions {
  std::string dir;  // created if missing
  // Bytes of cached shards (trailers included) the whole directory may hold. Default: 0, no
  // limit.
  uint64_t capacity_bytes = 0;
};

// What Put and eviction did, for metrics.
struct ShardCacheCounters {
  uint64_t evictions = 0;
  uint64_t evicted_bytes = 0;
  uint64_t damaged = 0;  // cached copies whose checksum failed (deleted)
};

class ShardCache {
 public:
  // What a cached shard costs beyond its bytes (the trailer), against capacity_bytes.
  static constexpr uint64_t kTrailerBytes = 16;

  // Opens (creating) the directory and this dataset's folder in it, and removes temporary
  // files older than an hour (left by a process that died mid-write). `fingerprint` names the
  // dataset's version (the loader passes its shards' names, sizes, hashes and version tags): a
  // dataset rewritten under the same URL gets another folder, and LRU eviction retires the old
  // one.
  // `dataset_url` is one name per dataset: the loader passes its store's (ObjectStore::url(),
  // links resolved), so two spellings of one folder share its copies.
  static Result<std::unique_ptr<ShardCache>> Open(const ShardCacheOptions& options,
                                                  std::string_view dataset_url,
                                                  std::string_view fingerprint = {});
  ~ShardCache();
  ShardCache(const ShardCache&) = delete;
  ShardCache& operator=(const ShardCache&) = delete;

  // Keeps shard i from being evicted (by any process) while held. Pins nest.
  class Pin {
   public:
    Pin() = default;
    Pin(Pin&& o) noexcept : cache_(o.cache_), shard_(o.shard_) { o.cache_ = nullptr; }
    Pin& operator=(Pin&& o) noexcept;
    ~Pin();

   private:
    friend class ShardCache;
    Pin(ShardCache* cache, uint32_t shard) : cache_(cache), shard_(shard) {}
    ShardCache* cache_ = nullptr;
    uint32_t shard_ = 0;
  };
  Result<Pin> PinShard(uint32_t shard) EXCLUDES(mu_);

  // Held while this thread fetches shard i; other fetchers of it (any process) wait.
  class FetchLock {
   public:
    FetchLock(FetchLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    FetchLock& operator=(FetchLock&&) = delete;
    ~FetchLock();

   private:
    friend class ShardCache;
    explicit FetchLock(int fd) : fd_(fd) {}
    int fd_ = -1;
  };
  Result<FetchLock> LockFetch(uint32_t shard);

  // Shard i's bytes (marked recently used). NotFound when it is not cached; DataLoss when the
  // cached copy was damaged, after deleting it.
  Result<std::string> Get(uint32_t shard, std::string_view name);
  // The same, mapped instead of read (shard_bytes.h): the trailer's checksum is checked over the
  // mapping, and the bytes stay valid after the file is evicted (unlinked) or replaced, for as
  // long as the returned bytes live. Read into memory when no mapping guard is free.
  Result<std::shared_ptr<const ShardBytes>> Map(uint32_t shard, std::string_view name);
  // Publishes shard i (see the protocol above). ResourceExhausted when it cannot fit.
  Status Put(uint32_t shard, std::string_view name, std::string_view bytes);

  // Bytes of cached shards in the whole directory, from listing it.
  Result<uint64_t> UsedBytes() const;
  // Where shard i is (or would be) cached.
  std::string PathOf(uint32_t shard, std::string_view name) const;
  const std::string& dataset_dir() const { return dataset_dir_; }
  ShardCacheCounters counters() const EXCLUDES(mu_);

 private:
  ShardCache(ShardCacheOptions options, std::string dataset_dir)
      : options_(std::move(options)), dataset_dir_(std::move(dataset_dir)) {}
  void Unpin(uint32_t shard) EXCLUDES(mu_);
  // Deletes least recently used unpinned shards until `incoming` more bytes fit. Requires the
  // evict lock.
  Status MakeRoom(uint64_t incoming) EXCLUDES(mu_);

  const ShardCacheOptions options_;
  const std::string dataset_dir_;
  int pin_fd_ = -1;    // this object's open file of .pin-lock; its read locks are our pins
  int evict_fd_ = -1;  // DIR/.evict-lock
  mutable Mutex mu_;
  std::map<uint32_t, int> pins_ GUARDED_BY(mu_);  // shard -> pins held through pin_fd_
  ShardCacheCounters counters_ GUARDED_BY(mu_);
};

}  // namespace gantry::data
