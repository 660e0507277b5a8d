// LoaderMetrics: what the dataset loader did for one dataset in one job, as series labelled
// {dataset, job} in a Prometheus MetricsRegistry, and as a snapshot (DataStats) for Python's
// StreamingDataset.stats().
//
// Every reader of the same (registry, dataset, job) in a process shares one LoaderMetrics
// (LoaderMetrics::For), so epochs and iterators add up. Bytes are stored shard bytes, counted by
// where they came from: the node-local cache, a peer (an http:// source) or the durable tier
// (any other source). Stall time is the time the consumer spent inside SampleIterator::Next
// waiting for a shard it needed (fetching it, or waiting on its read-ahead); active time is the
// wall time from an iterator's first Next to its latest, so samples/s is the rate samples
// reached the consumer.
//
// A DataLoader worker is another process with its own registry. Its counts reach the training
// process's registry through Fold, as a second set of series labelled process="workers" (For's
// `process`): the training process's own series count only what it read itself, so summing a
// family over its series counts every sample once.
//
//   auto m = LoaderMetrics::For(MetricsRegistry::Default(), "s3://bkt/train", DefaultJobId());
//   DataStats s = m->Snapshot();
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gantry/common/metrics.h"
#include "gantry/common/status.h"

namespace gantry::data {

enum class FetchSource { kCache, kPeer, kDurable };

struct DataStats {
  uint64_t bytes_cache = 0;  // stored shard bytes read from the node-local cache
  uint64_t bytes_peer = 0;
  uint64_t bytes_durable = 0;
  uint64_t shards_cache = 0;
  uint64_t shards_peer = 0;
  uint64_t shards_durable = 0;
  uint64_t cache_damaged = 0;   // cached copies that failed their checksum (fetched again)
  uint64_t source_damaged = 0;  // source copies of the wrong size or hash (next source tried)
  uint64_t uncached = 0;        // shards served without caching (the cache was full of pins)
  uint64_t evictions = 0;       // shards this job's publishes evicted from the cache
  uint64_t samples = 0;
  double stall_seconds = 0;
  double active_seconds = 0;
  double hit_ratio = 0;           // bytes_cache / all bytes read; 0 before any read
  double samples_per_second = 0;  // samples / active_seconds; 0 before any
  uint64_t read_ahead_depth = 0;  // the latest read-ahead depth (shards)
  // The stall histogram's counts, non-cumulative, one per LoaderMetrics::StallBounds() and a
  // last one for longer waits.
  std::vector<uint64_t> stall_buckets;
};

class LoaderMetrics {
 public:
  // The instance for (registry, dataset, job, process): shared while anyone holds it. Its
  // counts live in the registry's series, so a later instance for the same labels continues
  // them. The registry must outlive every instance. `process`, when not empty, is one more
  // label: "workers" for the counts Fold brings in from DataLoader workers.
  static std::shared_ptr<LoaderMetrics> For(MetricsRegistry& registry, const std::string& dataset,
                                            const std::string& job,
                                            const std::string& process = "");
  LoaderMetrics(MetricsRegistry& registry, const std::string& dataset, const std::string& job,
                const std::string& process = "");

  // The stall histogram's bucket bounds (seconds).
  static std::vector<double> StallBounds();

  void AddFetch(FetchSource source, uint64_t bytes);
  void AddCacheDamaged() { cache_damaged_.Increment(); }
  void AddSourceDamaged() { source_damaged_.Increment(); }
  void AddUncached() { uncached_.Increment(); }
  void AddEvictions(uint64_t n) { evictions_.Increment(n); }
  void AddStall(double seconds) { stall_.Observe(seconds); }
  void AddSamples(uint64_t n, double active_seconds);
  void SetReadAheadDepth(uint64_t depth) { depth_.Set(static_cast<double>(depth)); }

  // Adds counts gathered in other processes since the last Fold: every counter and the stall
  // histogram (stall_buckets, with stall_seconds as its sum) by `added`'s values, active
  // seconds by its active_seconds. `samples_per_second` replaces the rate: the workers read side
  // by side, so theirs is the sum of each one's rate, not samples over summed active time. The
  // hit ratio follows the bytes. InvalidArgument when stall_buckets does not match StallBounds
  // (nothing is added then).
  Status Fold(const DataStats& added, double samples_per_second);

  DataStats Snapshot() const;

 private:
  struct SeriesLabels;
  LoaderMetrics(MetricsRegistry& registry, const SeriesLabels& labels);
  void UpdateHitRatio();

  Counter& bytes_cache_;
  Counter& bytes_peer_;
  Counter& bytes_durable_;
  Counter& shards_cache_;
  Counter& shards_peer_;
  Counter& shards_durable_;
  Counter& cache_damaged_;
  Counter& source_damaged_;
  Counter& uncached_;
  Counter& evictions_;
  Counter& samples_;
  Histogram& stall_;
  Gauge& active_;
  Gauge& hit_ratio_;
  Gauge& samples_per_second_;
  Gauge& depth_;
};

// The job label: $GANTRY_JOB_ID, else $SLURM_JOB_ID, else "".
std::string DefaultJobId();

}  // namespace gantry::data
