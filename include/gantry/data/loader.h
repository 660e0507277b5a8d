// Reading a dataset in its global order (order.h): a ShardSource opens one shard at a time
// through the MDS and WebDataset readers, and a SampleIterator yields one reader's (rank's or
// DataLoader worker's) samples, shard by shard, from any position of the epoch.
//
//   GANTRY_ASSIGN_OR_RETURN(DatasetLocation d, LocateDataset("s3://bkt/train", {}));
//   GANTRY_ASSIGN_OR_RETURN(auto source, OpenShardSource(std::move(d), {}));
//   GANTRY_ASSIGN_OR_RETURN(EpochOrder order, ResumeOrder(source->shard_samples(), state));
//   GANTRY_ASSIGN_OR_RETURN(SampleIterator it,
//                           SampleIterator::Create(*source, order, slot, state.consumed));
//   Sample s;
//   while (true) {
//     GANTRY_ASSIGN_OR_RETURN(bool more, it.Next(s));
//     if (!more) break;
//     Train(s.Find("jpg"));
//   }
//
// A resume reads no sample before its start: the iterator's first read is the shard holding
// its first position, and it holds at most the shards overlapping one shuffle window (those
// its next positions can come from), dropping each once the window has passed its end.
//
// Shards come from the dataset's URL, or from further sources (fallback_urls: a peer, the
// durable tier) when the first one lacks a shard or holds a damaged copy, and through a
// node-local ShardCache (shard_cache.h) when one is configured: fetched once per node, shared by
// every process on it, pinned while in a reader's window. A SampleIterator reads ahead: it
// fetches the next shards its positions need on background threads, as many as measured
// throughput calls for (ReadAheadOptions). What it did is counted in LoaderMetrics.
//
// ShardSource::Read is thread-safe (the read-ahead threads call it); a SampleIterator is a
// movable value for one thread. Samples hold their shard's bytes (and its cache pin) alive.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/common/metrics.h"
#include "gantry/common/status.h"
#include "gantry/data/dataset.h"
#include "gantry/data/loader_metrics.h"
#include "gantry/data/order.h"
#include "gantry/data/shard_bytes.h"
#include "gantry/data/shard_cache.h"

namespace gantry::data {

struct SampleField {
  std::string_view name;      // MDS column, or WebDataset field ("jpg", "seg.png")
  std::string_view encoding;  // MDS column encoding ("int", "str", ...); empty for WebDataset
  std::string_view bytes;     // the stored bytes (a view into the shard)
};

// One shard, read whole. Owns the bytes its samples' fields point into.
class LoadedShard {
 public:
  virtual ~LoadedShard() = default;
  virtual uint64_t size() const = 0;
  // Sample i (< size()): its key ("" when it has none; MDS: the "__key__" column when there is
  // one) and its fields in stored order. InvalidArgument for a sample whose layout is damaged.
  virtual Status Get(uint64_t i, std::string& key, std::vector<SampleField>& fields) const = 0;
  // The bytes every field's bytes point into (a mapped file, or memory), kept alive by this.
  // Default: empty bytes (a shard whose fields point elsewhere; never damaged).
  virtual const std::shared_ptr<const ShardBytes>& bytes() const;
  // Hints that sample i is read soon, in steps a sample apart (0, 1, 2: each reads what the
  // step before asked for): a shuffled read lands on a different shard at every sample, so
  // every level of a sample's record was a cache miss the reader waited for. No-op by default;
  // reads nothing that Get(i) would not read.
  virtual void Prefetch(uint64_t /*i*/, int /*step*/) const {}
  // What keeps the node-local cache's copy of this shard from eviction while this shard lives;
  // null when the shard was not cached. Held alone (the shard and its bytes dropped) it keeps
  // the copy pinned for as long as the holder wants: staging for a waiting job (stage.h).
  virtual std::shared_ptr<const void> cache_pin() const { return nullptr; }
};

// A dataset's shards, as its index (MDS) or listing (WebDataset) names them.
class ShardSource {
 public:
  virtual ~ShardSource() = default;
  virtual DatasetFormat format() const = 0;
  // Samples per shard, in the dataset's order: what EpochOrder is built from.
  virtual const std::vector<uint64_t>& shard_samples() const = 0;
  virtual std::string ShardName(uint32_t shard) const = 0;
  // Fetches and parses one shard: from the cache when it holds an intact copy, else from the
  // first source holding one of the size (and hash, where the index records one) it should
  // have, caching it. NotFound names a shard no source has; DataLoss names one that every source
  // holding it has damaged (with each source's problem). A WebDataset shard holding another
  // number of samples than shard_samples() says is DataLoss (the order depends on it, so no
  // sample is skipped or invented). Thread-safe.
  virtual Result<std::shared_ptr<const LoadedShard>> Read(uint32_t shard) = 0;
  // Where this source counts what it reads (never null for sources OpenShardSource made).
  virtual LoaderMetrics* metrics() { return nullptr; }
};

struct ShardSourceOptions {
  ReadLimits limits;
  bool verify_hashes = false;  // MDS: check the digests the index records, on every read
  // WebDataset: samples per shard, when known (an earlier run's shard_samples(), or
  // `gantry data inspect --json --shards`). Empty: every shard is read once at open to count
  // them, because a tar holds no index (through the cache when one is configured, so a staged
  // dataset is counted from the cache, and the count leaves every shard cached). Must have one
  // entry per shard.
  std::vector<uint64_t> wds_shard_samples;
  // WebDataset without wds_shard_samples: called (shards counted, shards) as the open counts,
  // and checked between shards (Cancelled once set). Both may be empty/null.
  DataProgress open_progress;
  const std::atomic<bool>* cancel = nullptr;
  // The node-local shard cache; an empty dir means none (every read goes to the sources).
  ShardCacheOptions cache;
  // Further sources of the same shards under the same keys, tried in order after the dataset's
  // own URL for a shard missing or damaged there: e.g. a peer's agent ("http://node7:7070/..."),
  // then the durable tier. http:// sources count as peers in the metrics, others as durable.
  std::vector<std::string> fallback_urls;
  StoreOptions store_options;  // for opening fallback_urls
  // Metrics: series labelled {dataset: the URL, job} in this registry. Default:
  // MetricsRegistry::Default().
  MetricsRegistry* metrics = nullptr;
  std::string job = DefaultJobId();
  // Local shards (a file:// source, the node-local cache) are mapped read-only instead of read
  // into memory (shard_bytes.h): no copy, pages shared through the page cache by every worker
  // and process, only the pages a reader touches faulted in its page tables. False: read; a
  // file:// source's shards into memory reused from shards dropped before
  // (ShardBytes::ReadFile), one copy on the read-ahead's thread instead of the first touch of
  // each mapped page on the consumer's, which a shadow-paged VM makes expensive
  // (docs/performance.md, "the first touch of a mapped page"). Unset (the default): cached
  // copies are mapped, and a file:// source's shards are mapped where a page's first touch is
  // cheap (ShardBytes::FirstTouchIsCheap) and read where it is not, as long as the shards this
  // process holds read stay within read_budget_bytes (a window of many shards would otherwise
  // hold them all in the process's own memory); the rest are mapped. With packed_batches, a
  // dataset whose samples average large_member_bytes or more is read (its large members left in
  // the file, below) on any machine: that beats mapping even where the first touch is cheap.
  std::optional<bool> map_files;
  uint64_t read_budget_bytes = uint64_t{256} << 20;
  // A local shard read into memory (not mapped, not cached, no hash to check; WebDataset's
  // uncompressed tars) is read without its members of at least this many bytes
  // (ShardBytes::OpenFile): a packed batch reads such a member from the file straight into the
  // batch (one copy, not two), and a sample handed out whole reads it into the shard's memory
  // then. 0: shards are read whole.
  uint64_t large_member_bytes = uint64_t{64} << 10;
  // The consumer takes packed batches (NextBatch with UnreadFields::kLeave into one block), which
  // read large members straight from the file. Where samples are handed out one by one, a
  // mapping's zero-copy view is the faster default (docs/performance.md, "2026-12-06,
  // 15:26-16:19 UTC").
  bool packed_batches = false;
};

// Takes over the dataset's store. MDS reads index.json; WebDataset counts samples unless told.
Result<std::unique_ptr<ShardSource>> OpenShardSource(DatasetLocation dataset,
                                                     const ShardSourceOptions& options);

struct Sample {
  uint64_t position = 0;  // its global position in the epoch
  SampleRef ref;          // its shard and index in the dataset
  std::string key;
  std::vector<SampleField> fields;
  std::shared_ptr<const LoadedShard> shard;  // keeps the fields' bytes alive

  // The field's bytes, or nullptr when the sample has none by that name.
  const SampleField* Find(std::string_view name) const;
};

// How far a SampleIterator reads ahead. The depth in use (shards fetched or being fetched
// that the consumer has not reached yet) follows measured throughput:
//   depth = clamp(ceil(fetch_seconds / consume_seconds) + 1, 1, max_shards)
// where fetch_seconds is the moving average time to fetch and parse one shard and
// consume_seconds the moving average time the consumer spends on one shard's worth of its
// positions (not counting its stalls): enough shards in flight that the next is ready when the
// consumer gets there, plus one. It starts at min(2, max_shards) before anything is measured.
// When the order is shuffled, the depth is also at least the shards one window spans (capped
// at max_shards): a shuffled window needs all its shards at once, right after its boundary.
// The shards read ahead are held in memory (and pinned in the cache) until consumed.
struct ReadAheadOptions {
  uint32_t max_shards = 4;  // 0: no read-ahead, each shard is fetched when first needed
  uint32_t threads = 2;     // fetches in flight at once (at most max_shards)
};
// The rule above: the depth for the measured averages (seconds per shard), at least 1.
uint32_t ReadAheadDepth(double fetch_seconds, double consume_seconds, uint32_t max_shards);

// What NextBatch does with the bytes of a field that its shard has not read yet (a large
// member of a local shard, ShardSourceOptions::large_member_bytes).
enum class UnreadFields {
  kRead,   // reads them into the shard's memory first: every field's bytes are there
  kLeave,  // leaves them: the caller copies each field out with ShardBytes::AppendCopyPieces,
           // or Fills it before reading it in place
};

// One reader's samples of one epoch: the positions SlotPositions gives `slot` from `start`,
// each read from the shard EpochOrder names.
class SampleIterator {
 public:
  // `source` must outlive the iterator. InvalidArgument for a bad slot, start past the epoch's
  // end, or an order built for another number of shards than the source has.
  static Result<SampleIterator> Create(ShardSource& source, const EpochOrder& order,
                                       const Slot& slot, uint64_t start,
                                       const ReadAheadOptions& read_ahead = {});
  SampleIterator(SampleIterator&&) noexcept;
  SampleIterator& operator=(SampleIterator&&) noexcept;
  ~SampleIterator();  // stops the read-ahead (waits for fetches in flight)

  // Fills `out` with the next sample and returns true, or returns false at the end of this
  // reader's share. An error (a missing or damaged shard) leaves the iterator where it was, so
  // Next may be called again (the shard is fetched again).
  Result<bool> Next(Sample& out);
  // Up to out.size() samples, as that many calls of Next would give them, into out[0, *read);
  // fewer only at the end of this reader's share. The loader's metrics count them once for the
  // whole call rather than per sample (a clock read and three counter updates per sample were
  // 4-5% of reading 4 KiB samples in process). An error leaves the *read samples before it in
  // out, and the iterator where Next would have left it.
  Status NextBatch(std::span<Sample> out, uint64_t* read,
                   UnreadFields unread = UnreadFields::kRead);
  // NextBatch for a caller reading ahead of its need (a reader that packs the next batch while
  // its consumer works on this one): it never waits for a shard, nor fetches one. It stops
  // before the first sample whose shard is neither held nor fetched by the read-ahead already,
  // which leaves *read anywhere from 0 to out.size() with no error and the iterator at that
  // sample: the next NextBatch waits for its shard.
  Status NextReadyBatch(std::span<Sample> out, uint64_t* read,
                        UnreadFields unread = UnreadFields::kRead);

  // Stops the read-ahead and waits for its fetches in flight (what the destructor does); Next
  // then fetches each shard when it needs it.
  void StopReadAhead();

  uint64_t remaining() const { return positions_.size() - next_; }
  uint64_t shards_read() const { return shards_read_; }  // fetches, over the iterator's life
  size_t shards_held() const { return held_.size(); }
  size_t max_shards_held() const { return max_held_; }
  // Shards this iterator fetched itself because its read-ahead had not planned them yet.
  uint64_t read_ahead_misses() const;

 private:
  class ReadAhead;
  SampleIterator(ShardSource& source, EpochOrder order, SlotPositions positions);
  Status ReadBatch(std::span<Sample> out, uint64_t* read, UnreadFields unread, bool wait);
  // Next without the metrics' sample count; false at the end, and, not waiting, at a sample
  // whose shard is not here yet.
  Result<bool> NextSample(Sample& out, UnreadFields unread, bool wait);
  // The shard, from the read-ahead or fetched here; counts the consumer's stall.
  Result<std::shared_ptr<const LoadedShard>> Obtain(uint32_t shard);
  // Non-empty shards overlapping the window that starts at shard-order position `window_start`.
  uint32_t ShardsInWindow(uint64_t window_start) const;
  // The sample at positions_[k], computed once for the few k around next_ (Next asks for
  // next_ .. next_ + 2 for its prefetch hints, and serves them later).
  SampleRef RefAt(uint64_t k);
  // The held shard, or nullptr.
  const LoadedShard* HeldShard(uint32_t shard) const;

  ShardSource* source_;
  EpochOrder order_;
  SlotPositions positions_;
  uint64_t next_ = 0;
  std::map<uint32_t, std::shared_ptr<const LoadedShard>> held_;  // by dataset shard
  uint64_t shards_read_ = 0;
  size_t max_held_ = 0;
  std::unique_ptr<EpochOrder> order_heap_;  // the read-ahead's view of the order
  std::unique_ptr<ReadAhead> ahead_;
  uint64_t last_window_ = UINT64_MAX;    // the window the read-ahead was last told about
  uint64_t pruned_window_ = UINT64_MAX;  // the window held_ was last pruned for
  static constexpr size_t kRefRing = 4;  // > the prefetch's 3 steps ahead
  std::array<SampleRef, kRefRing> ref_ring_{};
  std::array<uint64_t, kRefRing> ref_ring_at_{};  // k + 1 of the ref in each slot; 0: none
  uint64_t read_ahead_misses_ = 0;                // of read-aheads stopped before
  int64_t last_next_ns_ = 0;      // when Next last returned (0: not yet), for active time
  int64_t last_shard_ns_ = 0;     // when the consumer last reached a new shard
  double stall_since_shard_ = 0;  // stall seconds since then
};

}  // namespace gantry::data
