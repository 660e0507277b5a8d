// StageDataset: copies every shard of a dataset (MDS or WebDataset, at any ObjectStore URL) into
// a node-local shard cache (shard_cache.h) before a job needs it, so that a loader on that node
// opened on the same URL and cache directory reads every shard from the cache and nothing from
// the source. gantry-agent runs it when gantryd asks it to stage a queued job's data
// (include/gantry/agent/agent.h, POST /v1/stage); docs/data.md "Staging".
//
// Staging is the loader's own read path, not a copy of it: it opens a ShardSource with the cache
// (loader.h) and reads each shard once, so the cache key (URL and version fingerprint), the
// fetch lock, the checks against the index (size, hash, tar and gzip checksums), the fallback
// sources and the publish are exactly the loader's. Hence:
//   - idempotent: a shard already cached (and intact) is not fetched again (bytes_fetched 0);
//   - racing stagers and loaders (threads or processes) fetch each shard once on the node: the
//     second waits on the shard's fetch lock and then finds the first one's copy;
//   - a damaged cached copy is deleted and fetched again; a damaged source copy tries the next
//     source (fallback_urls), as the loader does.
//
// Errors name the dataset and the shard: NotFound (no source has a shard), DataLoss (every
// source's copy is damaged), Cancelled (options.cancel was set), ResourceExhausted (the cache's
// capacity is smaller than the dataset: the shards that fit, in dataset order up to the
// capacity, are staged first and the rest are not; a loader streams those from the source).
// The progress at the error says how far it got. Staged shards are ordinary cache entries: LRU
// eviction may retire them later when other datasets need the room -- unless the caller keeps
// them pinned (StageOptions::keep_pinned) until the job they were staged for starts.
//
//   StageOptions o;
//   o.cache = {"/nvme/gantry-data", 500ull << 30};
//   o.progress = [](const StageProgress& p) { Log(p.shards_done, p.shards_total); };
//   GANTRY_ASSIGN_OR_RETURN(StageProgress done, StageDataset("s3://bkt/train", o));
//
// Thread-safe (each call is independent); progress runs on the calling thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gantry/common/status.h"
#include "gantry/data/shard_cache.h"
#include "gantry/data/webdataset.h"
#include "gantry/storage/object_store.h"

namespace gantry::data {

struct StageProgress {
  uint64_t shards_total = 0;   // 0 until the dataset is listed
  uint64_t shards_done = 0;    // shards now in the cache (fetched or found there)
  uint64_t bytes_total = 0;    // stored bytes of every shard (as the index or listing says)
  uint64_t bytes_done = 0;     // stored bytes of the shards done
  uint64_t bytes_fetched = 0;  // of those, bytes that came from a source (not already cached)
};

struct StageOptions {
  // The node-local cache, as the loader's (ShardSourceOptions::cache). Required: a dir.
  ShardCacheOptions cache;
  // For opening the dataset and fallback_urls (S3 credentials come from the environment when
  // not set here, as for the loader; an http:// peer's token from $GANTRY_AGENT_TOKEN).
  StoreOptions store_options;
  // Further sources of the same shards, as ShardSourceOptions::fallback_urls.
  std::vector<std::string> fallback_urls;
  ReadLimits limits;
  // Checked between shards; once true, staging stops with Cancelled. May be null.
  const std::atomic<bool>* cancel = nullptr;
  // Called after the dataset is listed and after each shard is done (on the calling thread).
  std::function<void(const StageProgress&)> progress;
  // When set, each shard staged gets its cache pin (LoadedShard::cache_pin) appended here, on
  // an error too for the shards staged before it: no process on the node evicts them while the
  // caller holds the pins (the bytes are not held, only the pins). May be null.
  std::vector<std::shared_ptr<const void>>* keep_pinned = nullptr;
};

// Stages every shard of the dataset at `url` into options.cache (see above). Returns the final
// progress; on an error the last progress call says what was staged.
Result<StageProgress> StageDataset(const std::string& url, const StageOptions& options);

}  // namespace gantry::data
