// The loader's metrics (loader_metrics.h).
#include "gantry/data/loader_metrics.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

namespace gantry::data {
namespace {

constexpr char kBytesHelp[] = "Stored dataset shard bytes read, by where they came from.";
constexpr char kShardsHelp[] = "Dataset shards read, by where they came from.";

}  // namespace

// The series' labels: {dataset, job}, process when given (the workers' series), and source.
struct LoaderMetrics::SeriesLabels {
  const std::string& dataset;
  const std::string& job;
  const std::string& process;
  MetricLabels operator()(const char* source = nullptr) const {
    MetricLabels l = {{"dataset", dataset}, {"job", job}};
    if (!process.empty()) l.emplace_back("process", process);
    if (source != nullptr) l.emplace_back("source", source);
    return l;
  }
};

LoaderMetrics::LoaderMetrics(MetricsRegistry& r, const std::string& d, const std::string& j,
                             const std::string& p)
    : LoaderMetrics(r, SeriesLabels{d, j, p}) {}

LoaderMetrics::LoaderMetrics(MetricsRegistry& r, const SeriesLabels& labels)
    : bytes_cache_(r.GetCounter("gantry_data_bytes_total", kBytesHelp, labels("cache"))),
      bytes_peer_(r.GetCounter("gantry_data_bytes_total", kBytesHelp, labels("peer"))),
      bytes_durable_(r.GetCounter("gantry_data_bytes_total", kBytesHelp, labels("durable"))),
      shards_cache_(r.GetCounter("gantry_data_shards_total", kShardsHelp, labels("cache"))),
      shards_peer_(r.GetCounter("gantry_data_shards_total", kShardsHelp, labels("peer"))),
      shards_durable_(r.GetCounter("gantry_data_shards_total", kShardsHelp, labels("durable"))),
      cache_damaged_(r.GetCounter("gantry_data_cache_damaged_total",
                                  "Cached shard copies that failed their checksum and were "
                                  "fetched again.",
                                  labels())),
      source_damaged_(r.GetCounter("gantry_data_source_damaged_total",
                                   "Shard copies at a source whose size or hash did not match "
                                   "the index (the next source was tried).",
                                   labels())),
      uncached_(r.GetCounter("gantry_data_uncached_shards_total",
                             "Shards served without caching: the cache was full of pinned shards.",
                             labels())),
      evictions_(r.GetCounter("gantry_data_cache_evictions_total",
                              "Shards this job's publishes evicted from the node-local cache.",
                              labels())),
      samples_(
          r.GetCounter("gantry_data_samples_total", "Samples handed to the consumer.", labels())),
      stall_(r.GetHistogram("gantry_data_stall_seconds",
                            "Time the consumer waited for a shard it needed (sum: total stall).",
                            labels(), StallBounds())),
      active_(r.GetGauge("gantry_data_active_seconds",
                         "Wall time from each iterator's first sample request to its latest, "
                         "summed.",
                         labels())),
      hit_ratio_(r.GetGauge("gantry_data_cache_hit_ratio",
                            "Shard bytes read from the node-local cache over all shard bytes read.",
                            labels())),
      samples_per_second_(r.GetGauge("gantry_data_samples_per_second",
                                     "Samples handed to the consumer per active second.",
                                     labels())),
      depth_(r.GetGauge("gantry_data_read_ahead_shards", "The read-ahead depth, in shards.",
                        labels())) {}

std::shared_ptr<LoaderMetrics> LoaderMetrics::For(MetricsRegistry& registry,
                                                  const std::string& dataset,
                                                  const std::string& job,
                                                  const std::string& process) {
  // Weak: the state is in the registry's series, so an instance nobody holds can go, and a
  // registry at the address of a destroyed one never meets that one's instance.
  static std::mutex mu;
  static std::map<std::tuple<MetricsRegistry*, std::string, std::string, std::string>,
                  std::weak_ptr<LoaderMetrics>>
      all;
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = all.begin(); it != all.end();) {
    it = it->second.expired() ? all.erase(it) : std::next(it);
  }
  auto& weak = all[{&registry, dataset, job, process}];
  std::shared_ptr<LoaderMetrics> m = weak.lock();
  if (m == nullptr) {
    m = std::make_shared<LoaderMetrics>(registry, dataset, job, process);
    weak = m;
  }
  return m;
}

std::vector<double> LoaderMetrics::StallBounds() { return Histogram::LatencyBuckets(); }

void LoaderMetrics::AddFetch(FetchSource source, uint64_t bytes) {
  switch (source) {
    case FetchSource::kCache:
      bytes_cache_.Increment(bytes);
      shards_cache_.Increment();
      break;
    case FetchSource::kPeer:
      bytes_peer_.Increment(bytes);
      shards_peer_.Increment();
      break;
    case FetchSource::kDurable:
      bytes_durable_.Increment(bytes);
      shards_durable_.Increment();
      break;
  }
  UpdateHitRatio();
}

void LoaderMetrics::UpdateHitRatio() {
  const double all =
      static_cast<double>(bytes_cache_.value() + bytes_peer_.value() + bytes_durable_.value());
  if (all > 0) hit_ratio_.Set(static_cast<double>(bytes_cache_.value()) / all);
}

Status LoaderMetrics::Fold(const DataStats& added, double samples_per_second) {
  if (added.stall_buckets.size() != stall_.bounds().size() + 1) {
    return InvalidArgument("stall histogram of " + std::to_string(added.stall_buckets.size()) +
                           " buckets; these series have " +
                           std::to_string(stall_.bounds().size() + 1));
  }
  bytes_cache_.Increment(added.bytes_cache);
  bytes_peer_.Increment(added.bytes_peer);
  bytes_durable_.Increment(added.bytes_durable);
  shards_cache_.Increment(added.shards_cache);
  shards_peer_.Increment(added.shards_peer);
  shards_durable_.Increment(added.shards_durable);
  cache_damaged_.Increment(added.cache_damaged);
  source_damaged_.Increment(added.source_damaged);
  uncached_.Increment(added.uncached);
  evictions_.Increment(added.evictions);
  samples_.Increment(added.samples);
  stall_.Merge(added.stall_buckets, added.stall_seconds);
  active_.Add(added.active_seconds);
  samples_per_second_.Set(samples_per_second);
  UpdateHitRatio();
  return Status::Ok();
}

void LoaderMetrics::AddSamples(uint64_t n, double active_seconds) {
  samples_.Increment(n);
  active_.Add(active_seconds);
  const double active = active_.value();
  if (active > 0) samples_per_second_.Set(static_cast<double>(samples_.value()) / active);
}

DataStats LoaderMetrics::Snapshot() const {
  DataStats s;
  s.bytes_cache = bytes_cache_.value();
  s.bytes_peer = bytes_peer_.value();
  s.bytes_durable = bytes_durable_.value();
  s.shards_cache = shards_cache_.value();
  s.shards_peer = shards_peer_.value();
  s.shards_durable = shards_durable_.value();
  s.cache_damaged = cache_damaged_.value();
  s.source_damaged = source_damaged_.value();
  s.uncached = uncached_.value();
  s.evictions = evictions_.value();
  s.samples = samples_.value();
  s.stall_seconds = stall_.sum();
  s.active_seconds = active_.value();
  const uint64_t all = s.bytes_cache + s.bytes_peer + s.bytes_durable;
  s.hit_ratio = all == 0 ? 0 : static_cast<double>(s.bytes_cache) / static_cast<double>(all);
  s.samples_per_second =
      s.active_seconds > 0 ? static_cast<double>(s.samples) / s.active_seconds : 0;
  s.read_ahead_depth = static_cast<uint64_t>(depth_.value());
  for (size_t i = 0; i <= stall_.bounds().size(); ++i) {
    s.stall_buckets.push_back(stall_.bucket_count(i));
  }
  return s;
}

std::string DefaultJobId() {
  for (const char* name : {"GANTRY_JOB_ID", "SLURM_JOB_ID"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return v;
  }
  return "";
}

}  // namespace gantry::data
