// ChunkStore: a content-addressed chunk store spanning ordered tiers (memory -> local dir ->
// shared dir / S3), each an ObjectStore, with LRU eviction between watermarks, pinning,
// write-through or write-back, read-through with promotion, verification and repair of rotted
// copies, blobs described by manifests, a source chain for reads that includes peers' agents,
// and the one mark-and-sweep garbage collector of the chunk namespace.
//
// The store owns the chunk namespace: every user of it (blobs here, checkpoints in src/ckpt,
// datasets next) reads and writes chunks through it, and tells GC which chunks it references
// through a RootProvider (gantry/cache/roots.h) instead of GC knowing its key layout. A user
// that schedules its own tiering (the checkpoint engine writes a whole save to the local tier
// and then drains it) uses the per-tier calls (PutChunkToTier, CopyChunk, DropCopy); their
// zero-copy paths (ObjectStore::PutParts/GetParts) are kept inside this API.
//
// Invariants (docs/storage.md "Chunk store" explains each mechanism):
// - Eviction (and DropCopy) never deletes a tier's copy of a chunk unless a copy exists in a
//   lower tier (one that is durable, if the evicting tier is), checked with Head on the lower
//   tier, so the only copy of a chunk that has not reached a durable tier is never dropped.
//   Tiers that overlap on disk (the same or nested directories, however spelled) are refused
//   at Open: a Head on the "other" tier would find the very copy being deleted.
// - Garbage collection deletes only chunks that no root of any registered kind references,
//   that no writer in this process has pinned, and that are older than `gc_grace_seconds`. Writers
//   always (re)write a chunk before the manifest that references it, so a writer in another process
//   that finishes its blob within the grace period never loses a chunk.
// - Processes sharing a directory tier serialize eviction and GC with flock(2) on a lock file
//   in the tier directory; chunk puts are atomic in the posix backend, so they need no lock.
//
// Thread-safe: any number of threads may read and write; write-back drains on one background
// thread. The store owns its tiers' ObjectStores (shared with the caller if passed in).
//
//   ChunkStoreOptions o;
//   o.tiers = {{.name = "mem", .url = "mem://cache", .capacity_bytes = 1 << 30},
//              {.name = "nvme", .url = "file:///nvme/cache", .capacity_bytes = 100ull << 30},
//              {.name = "s3", .url = "s3://bkt/cache", .durable = true, .codec = Codec::kZstd}};
//   GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<ChunkStore> cs, ChunkStore::Open(std::move(o)));
//   GANTRY_ASSIGN_OR_RETURN(Manifest m, cs->PutBlob("datasets/shard-100", bytes));
//   GANTRY_ASSIGN_OR_RETURN(std::string back, cs->GetBlob("datasets/shard-100"));
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gantry/cache/chunk.h"
#include "gantry/common/metrics.h"
#include "gantry/common/status.h"
#include "gantry/common/thread_annotations.h"
#include "gantry/common/time.h"
#include "gantry/storage/object_store.h"

namespace gantry {

struct TierOptions {
  // Names the tier in metrics labels and error messages ("mem", "nvme", "s3").
  std::string name;
  // Opened with OpenObjectStore unless `store` is set.
  std::string url;
  std::shared_ptr<ObjectStore> store;
  // Bytes of stored chunks (headers included) the tier may hold. Default: 0, unlimited.
  uint64_t capacity_bytes = 0;
  // When usage would exceed high * capacity, evict least recently used chunks down to
  // low * capacity. Defaults: 0.9 and 0.7 (a pass frees a fifth of the tier, so passes are rare).
  double high_watermark = 0.9;
  double low_watermark = 0.7;
  // A durable tier holds the copy of record (S3, a replicated shared file system).
  bool durable = false;
  // Verify each chunk read from this tier against its id. Default: on for every backend that
  // can rot (everything but "memory").
  std::optional<bool> verify;
  // Codec for chunks written to this tier. Default: none (memory and NVMe tiers are faster
  // than zstd's decoder; compress where bytes cost money or network).
  Codec codec = Codec::kNone;
  int zstd_level = 3;
  // Lock file shared with other processes using the same tier. Default: "<dir>/.gantry-lock"
  // for file:// tiers (shared between processes), none otherwise. A tier directory this process
  // may only read opens without creating it: reads work; eviction and GC, which need the lock,
  // fail with PermissionDenied.
  std::optional<std::string> lock_path;
};

enum class WriteMode {
  kWriteThrough,  // PutChunk writes every tier down to the first durable one before returning
  // PutChunk writes the top tier; a background thread copies to durable tiers. A chunk that
  // does not fit in the top tier (full of pinned or undrained chunks) is written through.
  kWriteBack,
};

struct ChunkStoreOptions {
  std::vector<TierOptions> tiers;  // fastest first; at least one
  // Default: 4 MiB (docs/storage.md "Chunk store" says why).
  uint64_t chunk_size = kDefaultChunkSize;
  WriteMode write_mode = WriteMode::kWriteThrough;
  // Write-back: raw bytes accepted but not yet durable; writers block beyond it. Default 256 MiB.
  uint64_t max_drain_backlog_bytes = 256ull << 20;
  // Copy chunks found in a slower tier into every faster tier. Default: on.
  bool promote_on_read = true;
  // GC never deletes a chunk younger than this. Default: one hour.
  int64_t gc_grace_seconds = 3600;
  // Peer agents' base URLs ("http://node7:7070"), read-only sources a ChunkReader tries after
  // the cache tiers and before the durable ones.
  std::vector<std::string> peers;
  // Every peer request: connect and total time. A peer that times out is skipped for the rest
  // of the reader's operation.
  int peer_timeout_ms = 5000;
  // "Now" for GC grace periods. Default: the real clock.
  Clock* clock = nullptr;
  // Where metrics go. Default: a registry owned by the store.
  MetricsRegistry* metrics = nullptr;
  // For opening tier URLs (S3 endpoint, credentials).
  StoreOptions store_options;
};

// The manifest of a blob, stored as JSON at "manifests/<name>" in the manifest tier (the first
// durable tier, else the last tier):
//   {"version":1,"name":"datasets/a","size":10485760,"chunk_size":4194304,
//    "chunks":[{"id":"<32 hex>","size":4194304},...]}
struct ManifestChunk {
  ChunkId id;
  uint64_t size = 0;
};
struct Manifest {
  std::string name;
  uint64_t size = 0;
  uint64_t chunk_size = 0;
  std::vector<ManifestChunk> chunks;

  std::string ToJson() const;
  // InvalidArgument naming `what` (the object) and the bad field.
  static Result<Manifest> FromJson(std::string_view json, std::string_view what);
};

struct TierStats {
  std::string name;
  bool durable = false;
  uint64_t capacity_bytes = 0;
  // As this process knows them (refreshed by every eviction pass on a shared tier). Tracked only
  // for tiers with a capacity: an unlimited tier (S3) is not indexed in memory, and shows 0.
  uint64_t used_bytes = 0;
  uint64_t chunks = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t evictions = 0;
  uint64_t corrupt = 0;   // copies that failed verification
  uint64_t repaired = 0;  // corrupt copies rewritten from another tier
};

struct ChunkStoreStats {
  std::vector<TierStats> tiers;
  uint64_t drain_backlog_bytes = 0;
  uint64_t drained_chunks = 0;
  uint64_t promotions = 0;
};

struct GcReport {
  uint64_t manifests = 0;          // blob manifests read
  std::vector<std::string> kinds;  // root kinds marked from (registered providers)
  uint64_t referenced_chunks = 0;
  uint64_t deleted_chunks = 0;  // summed over tiers
  uint64_t deleted_bytes = 0;
  uint64_t kept_young = 0;   // unreferenced but inside the grace period
  uint64_t kept_pinned = 0;  // unreferenced but pinned or awaiting drain in this process
  // One line per damaged root a RootProvider skipped (the GC went on without it): the chunks
  // only it names are not kept.
  std::vector<std::string> warnings;
};

struct VerifyReport {
  uint64_t checked = 0;
  uint64_t corrupt = 0;
  uint64_t repaired = 0;
  // Chunks a blob manifest references that no tier holds: damage as much as a corrupt copy.
  uint64_t missing = 0;
  std::vector<std::string> errors;  // one line per copy that could not be repaired
};

// Where a ChunkReader found a chunk.
enum class ChunkSource { kCache, kPeer, kDurable };

// Bytes [src_offset, src_offset + length) of a chunk's raw bytes, copied to `dst`.
struct ChunkCopy {
  uint64_t src_offset = 0;
  uint64_t length = 0;
  char* dst = nullptr;
};

class ChunkStore {
 public:
  static Result<std::unique_ptr<ChunkStore>> Open(ChunkStoreOptions options);
  // Drains write-back (errors are logged to the metrics, not returned; call Flush first to see
  // them), then stops the drain thread.
  ~ChunkStore();
  ChunkStore(const ChunkStore&) = delete;
  ChunkStore& operator=(const ChunkStore&) = delete;

  // Stores one chunk (any size; blobs use chunk_size) and returns its id.
  Result<ChunkId> PutChunk(std::string_view data);
  // The chunk's raw bytes from the fastest tier that has a good copy. A copy failing
  // verification is counted, skipped and rewritten from the good one. NotFound if no tier has
  // it; IoError "corrupt chunk <id> in tier <name>" if every copy is bad.
  Result<std::string> GetChunk(const ChunkId& id);

  // Pinned chunks are never evicted or collected by this process. Pins nest (counted).
  void Pin(const ChunkId& id) EXCLUDES(mu_);
  void Unpin(const ChunkId& id) EXCLUDES(mu_);
  class PinGuard {
   public:
    PinGuard(ChunkStore& store, const ChunkId& id) : store_(&store), id_(id) { store.Pin(id); }
    ~PinGuard() {
      if (store_ != nullptr) store_->Unpin(id_);
    }
    PinGuard(PinGuard&& o) noexcept : store_(o.store_), id_(o.id_) { o.store_ = nullptr; }
    PinGuard(const PinGuard&) = delete;
    PinGuard& operator=(const PinGuard&) = delete;
    PinGuard& operator=(PinGuard&&) = delete;

   private:
    ChunkStore* store_;
    ChunkId id_;
  };

  // Streams a blob in: chunks are written (and pinned) as data arrives, the manifest last, at
  // Commit. Not thread-safe itself; destroying it uncommitted unpins its chunks (GC takes them
  // after the grace period).
  class BlobWriter {
   public:
    ~BlobWriter();
    BlobWriter(BlobWriter&&) = delete;
    Status Append(std::string_view data);
    Result<Manifest> Commit();
    const std::vector<ManifestChunk>& chunks() const { return manifest_.chunks; }

   private:
    friend class ChunkStore;
    BlobWriter(ChunkStore& store, std::string name);
    Status WriteChunk(std::string_view data);

    ChunkStore& store_;
    Manifest manifest_;
    std::string pending_;  // bytes of a chunk not yet full
    std::vector<ChunkId> pinned_;
    bool committed_ = false;
  };
  // The name must be a valid object key (ValidateKey).
  Result<std::unique_ptr<BlobWriter>> NewBlobWriter(std::string_view name);

  Result<Manifest> PutBlob(std::string_view name, std::string_view data);
  Result<std::string> GetBlob(std::string_view name);
  Result<Manifest> GetManifest(std::string_view name);
  Result<std::vector<std::string>> ListBlobs();
  // Deletes the manifest only; its chunks go at the next GC (other manifests may share them).
  Status DeleteBlob(std::string_view name);

  // Waits until write-back has drained everything accepted so far; the first drain error since
  // the last Flush, if any.
  Status Flush() EXCLUDES(mu_);

  // --- Per-tier calls, for users that schedule their own tiering. Tiers are indexed as in
  // options().tiers. None of them takes a pin: the caller pins what GC must not take.
  int num_tiers() const { return static_cast<int>(tiers_.size()); }
  // The first durable tier, else the last one.
  int durable_tier() const;
  // The tier holding roots (manifests): the first durable tier, else the last.
  ObjectStore& root_store() { return *tiers_[ManifestTier()]->store; }
  // Writes a chunk whose id the caller computed (`id` == HashChunk(raw)) to one tier, making
  // room first. A tier storing raw chunks gets header and payload without joining them
  // (PutParts). ResourceExhausted when the tier is full.
  Status PutChunkToTier(int tier, const ChunkId& id, std::string_view raw);
  // Copies a chunk from tier `from` to tier `to`, verifying it first: a damaged copy (DataLoss)
  // must not become the copy of record, where later readers would trust it.
  Status CopyChunk(int from, int to, const ChunkId& id);
  // Deletes the tier's copy once a Head on a durable tier below it proves another copy exists;
  // FailedPrecondition (nothing deleted) without that proof, or if the chunk is pinned (pin
  // before writing a chunk to a tier that DropCopy may clean). Serialized with eviction and GC.
  Status DropCopy(int tier, const ChunkId& id);
  // OK if a durable tier holds the chunk; NotFound (or the Head's error) otherwise.
  Status HasDurableCopy(const ChunkId& id);
  // The chunk's raw bytes from one tier, verified (DataLoss if the copy is damaged).
  Result<std::string> GetChunkFromTier(int tier, const ChunkId& id);
  // Chunk ids in one tier with their mtimes (listing).
  Result<std::vector<ObjectInfo>> ListChunks(int tier);
  // What one tier holds, from listing it (a fresh process has no counters of its own): chunk
  // copies, their stored bytes, and blob manifests (of any tier, not only the manifest tier).
  struct TierContents {
    uint64_t chunks = 0;
    uint64_t chunk_bytes = 0;
    uint64_t blob_manifests = 0;
  };
  Result<TierContents> ListTierContents(int tier);

  // One operation's source chain for reads: the cache tiers, then the peers, then the durable
  // tiers. A peer that fails for anything but a missing chunk, or serves a damaged copy, is
  // dropped for the rest of the reader's life, so a hung peer costs one timeout, not one per
  // chunk. Thread-safe; lives no longer than its store.
  class ChunkReader {
   public:
    // Fills `copies` from the chunk of `size` raw bytes. A whole-chunk copy of a raw stored
    // chunk goes straight into the destination (GetParts: preadv on a directory, the socket on
    // a peer) and is verified there. `corrupt` counts copies that failed verification. NotFound
    // / DataLoss naming every source when none has a good copy.
    Result<ChunkSource> ReadInto(const ChunkId& id, uint64_t size,
                                 std::span<const ChunkCopy> copies, uint64_t* corrupt);

   private:
    friend class ChunkStore;
    struct Source {
      std::string name;
      ObjectStore* store = nullptr;
      std::unique_ptr<ObjectStore> owned;  // peers
      ChunkSource kind = ChunkSource::kCache;
      bool raw_copies = true;  // no codec: whole chunks can be read in place
      bool verify = true;
      std::atomic<bool> dead{false};
    };
    explicit ChunkReader(ChunkStore& store) : store_(store) {}
    ChunkStore& store_;
    std::vector<std::unique_ptr<Source>> sources_;
  };
  Result<std::unique_ptr<ChunkReader>> NewReader();

  // Records in the root tier that roots of `kind` live in this namespace (idempotent), so a GC
  // in a process without that kind's provider refuses to sweep instead of deleting its chunks.
  Status DeclareRootKind(std::string_view kind);
  // Mark-and-sweep over every tier (see the class comment): marks from the blob manifests and
  // every registered RootProvider. FailedPrecondition (nothing deleted) if the namespace
  // declares a root kind with no provider in this process.
  Result<GcReport> CollectGarbage();
  // Reads every chunk of every tier, verifies it, and with `repair` rewrites bad copies from a
  // good one (or deletes them when a durable good copy exists elsewhere). Chunks that a blob
  // manifest references and no tier holds are counted as missing.
  Result<VerifyReport> Verify(bool repair);
  // Runs an eviction pass on every tier with a capacity.
  Status EnforceCapacity();

  ChunkStoreStats Stats() const EXCLUDES(mu_);
  std::string PrometheusText() const { return metrics_->PrometheusText(); }
  MetricsRegistry& metrics() { return *metrics_; }
  const ChunkStoreOptions& options() const { return options_; }

 private:
  struct Entry {
    uint64_t bytes = 0;       // stored size
    int64_t last_access = 0;  // ns since the epoch; LRU order
  };
  struct Tier {
    TierOptions opt;
    std::shared_ptr<ObjectStore> store;
    bool verify = true;
    int lock_fd = -1;
    // Set when the lock file could not be opened because the directory is read-only to this
    // process: reads work, eviction, GC and dropping copies fail with PermissionDenied (this).
    std::string lock_unavailable;
    Mutex evict_mu;  // one eviction pass at a time in this process (flock across them)
    // Guarded by ChunkStore::mu_. Not GUARDED_BY: an attribute in a nested struct cannot name
    // the enclosing object's mutex, so these two are checked by review, not by clang.
    std::unordered_map<ChunkId, Entry, ChunkIdHash> entries;
    uint64_t used = 0;
    // Metrics (owned by the registry).
    Counter* hits;
    Counter* misses;
    Counter* bytes_read;
    Counter* bytes_written;
    Counter* evictions;
    Counter* corrupt;
    Counter* repaired;
    Counter* skipped_full;
    Gauge* used_gauge;
    Histogram* get_latency;
    Histogram* put_latency;
  };

  explicit ChunkStore(ChunkStoreOptions options);
  Status Init();
  int ManifestTier() const;
  int FirstDurableTier() const;  // -1 if none

  // Puts an encoded chunk into one tier (making room first) and indexes it.
  Status WriteToTier(int tier, const ChunkId& id, std::string_view stored);
  // PutChunk, optionally pinning the chunk before any tier sees it (BlobWriter).
  Result<ChunkId> PutChunkImpl(std::string_view data, bool pin);
  // Blocks until none of `ids` awaits the write-back drain; IoError if one never reached the
  // durable tier.
  Status WaitDurable(const std::vector<ChunkId>& ids) EXCLUDES(mu_);
  // Evicts until `incoming` more bytes fit under the high watermark; ResourceExhausted if the
  // tier cannot fit them even after evicting everything it may.
  Status MakeRoom(int tier, uint64_t incoming) EXCLUDES(mu_);
  bool HasCopyBelow(int tier, const ChunkId& id);
  void Touch(int tier, const ChunkId& id, uint64_t bytes) EXCLUDES(mu_);
  void Forget(int tier, const ChunkId& id) EXCLUDES(mu_);
  bool IsProtected(const ChunkId& id) const REQUIRES(mu_);
  void DrainLoop() EXCLUDES(mu_);
  // Requires the tier's evict_mu (and flock); not REQUIRES: callers name the tier by index.
  Status ResyncFromListing(int tier) EXCLUDES(mu_);

  Status CheckTiersDoNotOverlap() const;

  ChunkStoreOptions options_;
  Clock* clock_ = nullptr;
  std::unique_ptr<MetricsRegistry> owned_metrics_;
  MetricsRegistry* metrics_;
  std::vector<std::unique_ptr<Tier>> tiers_;
  Counter* promotions_;
  Counter* drained_;
  Counter* drain_errors_;
  Gauge* backlog_gauge_;

  mutable Mutex mu_;
  CondVar drain_cv_;    // wakes the drain thread
  CondVar backlog_cv_;  // wakes writers waiting for backlog room and Flush
  std::unordered_map<ChunkId, int, ChunkIdHash> pins_ GUARDED_BY(mu_);
  std::unordered_set<ChunkId, ChunkIdHash> pending_ GUARDED_BY(mu_);
  std::deque<std::pair<ChunkId, uint64_t>> drain_queue_ GUARDED_BY(mu_);
  uint64_t backlog_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t in_flight_ GUARDED_BY(mu_) = 0;  // chunks popped but not yet drained
  Status drain_error_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  Mutex gc_mu_;  // one CollectGarbage at a time in this process; guards no member
  std::thread drain_thread_;
};

}  // namespace gantry
