// StageDataset (include/gantry/data/stage.h): the loader's read path (OpenShardSource with a
// cache, then Read of each shard), driven shard by shard with progress, cancellation and the
// capacity rule.
#include "gantry/data/stage.h"

#include <utility>

#include "gantry/common/metrics.h"
#include "gantry/data/dataset.h"
#include "gantry/data/loader.h"
#include "gantry/data/mds.h"

namespace gantry::data {
namespace {

// Bytes that came from a source: the loader counts every fetch by where it came from.
uint64_t Fetched(const DataStats& s) { return s.bytes_peer + s.bytes_durable; }

Status Named(const std::string& url, const Status& s) {
  return Status(s.code(), "stage " + url + ": " + s.message());
}

}  // namespace

Result<StageProgress> StageDataset(const std::string& url, const StageOptions& options) {
  if (options.cache.dir.empty()) {
    return InvalidArgument("stage " + url + ": no shard cache directory given");
  }
  const auto cancelled = [&] { return options.cancel != nullptr && options.cancel->load(); };
  StoreOptions store_options = options.store_options;
  store_options.create_root = false;  // a mistyped file:// URL must not become an empty dataset
  Result<DatasetLocation> located = LocateDataset(url, store_options);
  if (!located.ok()) return Named(url, located.status());

  // Each shard's stored size, as the index (MDS) or the listing (WebDataset) gives it: the
  // totals are known before anything is fetched, and the capacity rule needs them.
  std::vector<uint64_t> sizes;
  if (located->format == DatasetFormat::kMds) {
    Result<MdsIndex> index = ReadMdsIndex(*located->store, "");
    if (!index.ok()) return Named(url, index.status());
    for (const MdsShardInfo& info : index->shards) sizes.push_back(info.stored().bytes);
  } else {
    sizes = located->wds_shard_bytes;
    sizes.resize(located->wds_shards.size(), 0);  // unlisted sizes: learnt as shards arrive
  }
  StageProgress progress;
  progress.shards_total = sizes.size();
  for (uint64_t b : sizes) progress.bytes_total += b;
  const auto report = [&] {
    if (options.progress) options.progress(progress);
  };
  report();

  // A private registry: the loader's metrics of this one staging, by source tier, tell fetched
  // bytes from bytes that were already cached, and count shards the cache could not take.
  MetricsRegistry registry;
  const std::string dataset_url = located->url;
  const std::shared_ptr<LoaderMetrics> metrics =
      LoaderMetrics::For(registry, dataset_url, "stage");  // the source's, while held
  // Bytes of the first n shards (an unlisted size counts once the shard has been read).
  const auto bytes_of = [&](uint64_t n) {
    uint64_t b = 0;
    for (uint64_t i = 0; i < n && i < sizes.size(); ++i) b += sizes[i];
    return b;
  };
  const auto advance = [&](uint64_t done) {
    // A WebDataset's shards are first done while its open counts them (below), then again as
    // the loop confirms them: progress never goes backwards.
    if (done > progress.shards_done) {
      progress.shards_done = done;
      progress.bytes_done = bytes_of(done);
    }
    progress.bytes_fetched = Fetched(metrics->Snapshot());
    report();
  };

  ShardSourceOptions source_options;
  source_options.limits = options.limits;
  source_options.cache = options.cache;
  source_options.fallback_urls = options.fallback_urls;
  source_options.store_options = store_options;
  source_options.metrics = &registry;
  source_options.job = "stage";
  source_options.cancel = options.cancel;
  // A WebDataset opened without counts counts its samples by reading every shard through the
  // cache, which is the staging itself: it reports as it goes. An MDS open reads the index only.
  source_options.open_progress = [&](uint64_t done, uint64_t) { advance(done); };
  Result<std::unique_ptr<ShardSource>> source =
      OpenShardSource(std::move(*located), source_options);
  if (!source.ok()) return Named(url, source.status());

  uint64_t budget = options.cache.capacity_bytes;  // 0: no limit
  for (uint32_t shard = 0; shard < progress.shards_total; ++shard) {
    if (cancelled()) return Cancelled("stage " + url + ": cancelled");
    if (options.cache.capacity_bytes > 0) {
      // In dataset order up to the capacity, then stop: staging the rest would only evict the
      // shards just staged (the least recently used), and a loader reads the first ones first.
      const uint64_t need = sizes[shard] + ShardCache::kTrailerBytes;
      if (need > budget) {
        return ResourceExhausted("stage " + url + ": the shard cache's " +
                                 std::to_string(options.cache.capacity_bytes) +
                                 " bytes hold the first " + std::to_string(shard) + " of " +
                                 std::to_string(progress.shards_total) + " shards (" +
                                 std::to_string(progress.bytes_total) + " bytes); shard '" +
                                 (*source)->ShardName(shard) + "' and the rest are not staged");
      }
      budget -= need;
    }
    const uint64_t uncached_before = metrics->Snapshot().uncached;
    Result<std::shared_ptr<const LoadedShard>> read = (*source)->Read(shard);
    if (!read.ok()) return Named(url, read.status());
    if (sizes[shard] == 0) {
      sizes[shard] = (*read)->bytes()->size();
      progress.bytes_total += sizes[shard];
    }
    if (metrics->Snapshot().uncached != uncached_before) {
      // The cache is full of shards other readers have pinned: served, not kept.
      return ResourceExhausted("stage " + url + ": shard '" + (*source)->ShardName(shard) +
                               "' does not fit in the shard cache (the rest of it is pinned by "
                               "readers)");
    }
    if (options.keep_pinned != nullptr) {
      if (std::shared_ptr<const void> pin = (*read)->cache_pin()) {
        options.keep_pinned->push_back(std::move(pin));
      }
    }
    advance(shard + 1);
  }
  return progress;
}

}  // namespace gantry::data
