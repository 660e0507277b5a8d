// Shard sources for MDS and WebDataset, and the iterator that reads one slot's samples in the
// global order (loader.h).
#include "gantry/data/loader.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "codec.h"
#include "gantry/common/paths.h"
#include "gantry/data/mds.h"
#include "gantry/storage/posix_store.h"

namespace gantry::data {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A cache pin that keeps its cache alive: a shard's bytes may outlive the source (a Sample
// holds them), and the pin is dropped before the cache it points into.
struct CachePin {
  std::shared_ptr<ShardCache> cache;
  ShardCache::Pin pin;
};

// What a fetched copy of a shard must be: its size and, where the index records any, one hash.
struct Expected {
  std::string key;  // in every source
  std::optional<uint64_t> bytes;
  std::string hash_algo;  // "" when no hash is checked
  std::string hash_hex;
  // The format's parser reads a shard whose bytes are not all there (ShardBytes::OpenFile): a
  // local one need not be read whole when no hash is checked and no cache copies it.
  bool partial_ok = false;
};

// The digest to check a copy with: the fastest of those the index records that this build
// computes (the xxhash family before the cryptographic ones), or none.
std::pair<std::string, std::string> PickHash(const std::map<std::string, std::string>& hashes) {
  static const char* kPreference[] = {"xxh3_64", "xxh64", "xxh3_128", "xxh128", "xxh32",
                                      "blake2b", "md5",   "sha1",     "sha256"};
  for (const char* algo : kPreference) {
    auto it = hashes.find(algo);
    if (it != hashes.end()) return {it->first, it->second};
  }
  for (const auto& [algo, hex] : hashes) {
    if (internal::IsKnownDigest(algo)) return {algo, hex};
  }
  return {};
}

// A local shard whose file was cut short under the mapping, or before its bytes were read
// (shard_bytes.h).
Status CutShort(const std::string& where) {
  return DataLoss(where + ": its file was cut short while read (changed under the reader)");
}

Status CheckCopy(std::string_view bytes, const Expected& e, const std::string& where) {
  if (e.bytes && bytes.size() != *e.bytes) {
    return DataLoss(where + ": " + std::to_string(bytes.size()) + " bytes, the index says " +
                    std::to_string(*e.bytes) + (bytes.size() < *e.bytes ? " (cut short)" : ""));
  }
  if (!e.hash_algo.empty()) {
    GANTRY_ASSIGN_OR_RETURN(std::string got, internal::HexDigest(e.hash_algo, bytes));
    if (got != e.hash_hex) {
      return DataLoss(where + ": " + e.hash_algo + " hash mismatch: index says " + e.hash_hex +
                      ", copy has " + got);
    }
  }
  return Status::Ok();
}

// Fetches a shard's stored bytes: cache, then each source in order (see ShardSource::Read).
class Fetcher {
 public:
  // `fingerprint` names this version of the dataset (its shards' names, sizes, hashes and
  // version tags): the cache keys on it with the store's name for the URL, so a dataset
  // rewritten in place under the same URL gets a fresh cache folder instead of stale copies,
  // and a hit needs no hash beyond the trailer's.
  // `mean_sample_bytes`: the dataset's stored bytes over its samples, 0 when not known yet.
  Status Init(DatasetLocation& dataset, const ShardSourceOptions& options,
              const std::string& fingerprint, uint64_t mean_sample_bytes) {
    url_ = dataset.url;
    limits_ = options.limits;
    map_files_ = options.map_files.value_or(true);
    map_local_ = options.map_files.value_or(ShardBytes::FirstTouchIsCheap());
    large_member_bytes_ = options.large_member_bytes;
    // Even where a mapped page's first touch is cheap, samples of large members are faster
    // left in their files for packed batches: each is read straight into its block, one copy
    // and no page faults, where a mapping faults every page in on the way (docs/performance.md,
    // "2026-12-06, 15:26-16:19 UTC": the large set 1.76-1.82x tarfile mapped, 2.05-2.22x
    // read; the small set's 4 KiB samples the other way round, 0.85-0.90 of the raw read
    // mapped, 0.65-0.71 read; samples handed out one by one 3.7x faster mapped when the
    // consumer reads every byte).
    read_large_ = options.packed_batches && !options.map_files && large_member_bytes_ > 0 &&
                  mean_sample_bytes >= large_member_bytes_;
    if (!options.map_files) read_budget_ = options.read_budget_bytes;
    MetricsRegistry& registry =
        options.metrics != nullptr ? *options.metrics : MetricsRegistry::Default();
    metrics_ = LoaderMetrics::For(registry, dataset.url, options.job);
    sources_.push_back(
        Source{dataset.url, nullptr, dataset.store.get(), KindOf(*dataset.store), Status::Ok()});
    StoreOptions o = options.store_options;
    o.create_root = false;
    for (const std::string& url : options.fallback_urls) {
      Source src{url, nullptr, nullptr, FetchSource::kDurable, Status::Ok()};
      Result<std::unique_ptr<ObjectStore>> opened = OpenObjectStore(url, o);
      if (opened.ok()) {
        src.owned = std::move(*opened);
        src.store = src.owned.get();
        src.kind = KindOf(*src.store);
      } else {
        // Kept, so a read names it; the other sources still serve.
        src.open_error = opened.status();
      }
      sources_.push_back(std::move(src));
    }
    if (!options.cache.dir.empty()) {
      // Copies cached inside a dataset's own folder are listed as more shards the next time it
      // is opened: every sample twice, then more each time the dataset changes.
      for (const Source& src : sources_) {
        const auto* posix = dynamic_cast<const PosixStore*>(src.store);
        if (posix != nullptr && LocalPathWithin(options.cache.dir, posix->root())) {
          return InvalidArgument("cache folder " + options.cache.dir +
                                 " is inside the dataset folder " + posix->root() +
                                 ": its copies would be read as more shards; cache elsewhere");
        }
      }
      // Keyed by the store's own name for the folder (links resolved, "." and trailing slashes
      // gone), not the URL as spelled: one dataset named two ways is one cached copy, so a job
      // finds what was staged for it under another spelling.
      GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<ShardCache> cache,
                              ShardCache::Open(options.cache, dataset.store->url(), fingerprint));
      cache_ = std::move(cache);
    }
    return Status::Ok();
  }

  LoaderMetrics* metrics() const { return metrics_.get(); }

  // The shard's stored bytes, checked against `e`, and its pin when the cache holds it.
  Result<std::shared_ptr<const ShardBytes>> Fetch(uint32_t shard, const Expected& e,
                                                  std::shared_ptr<CachePin>& pin_out) {
    const std::string where = "shard '" + e.key + "'";
    if (e.bytes && *e.bytes > limits_.max_shard_bytes) {
      return ResourceExhausted(where + ": " + std::to_string(*e.bytes) +
                               " bytes is more than the limit of " +
                               std::to_string(limits_.max_shard_bytes));
    }
    if (cache_ == nullptr) {
      FetchSource kind;
      GANTRY_ASSIGN_OR_RETURN(std::shared_ptr<const ShardBytes> bytes, FromSources(e, where, kind));
      metrics_->AddFetch(kind, bytes->size());
      return bytes;
    }
    // Pinned before the lookup, so no evictor deletes it between the lookup and its use.
    auto pin = std::make_shared<CachePin>();
    pin->cache = cache_;
    GANTRY_ASSIGN_OR_RETURN(pin->pin, cache_->PinShard(shard));
    GANTRY_ASSIGN_OR_RETURN(std::shared_ptr<const ShardBytes> hit, Lookup(shard, e, where));
    if (!hit) {
      // One fetcher per shard on the node: whoever waited here finds the winner's copy.
      GANTRY_ASSIGN_OR_RETURN(ShardCache::FetchLock lock, cache_->LockFetch(shard));
      GANTRY_ASSIGN_OR_RETURN(hit, Lookup(shard, e, where));
      if (!hit) {
        FetchSource kind;
        GANTRY_ASSIGN_OR_RETURN(std::shared_ptr<const ShardBytes> bytes,
                                FromSources(e, where, kind));
        metrics_->AddFetch(kind, bytes->size());
        const ShardCacheCounters before = cache_->counters();
        Status put = cache_->Put(shard, e.key, bytes->view());
        metrics_->AddEvictions(cache_->counters().evictions - before.evictions);
        if (put.code() == StatusCode::kResourceExhausted) {
          metrics_->AddUncached();  // the window's pins fill the cache: served from memory
          pin.reset();
        } else if (!put.ok()) {
          return Status(put.code(), where + ": " + put.message());
        } else if (map_files_ && !bytes->mapped()) {
          // Served from the cached file from now on: the fetched copy's memory is freed, and
          // the page cache holding the file is shared with every other reader on the node.
          Result<std::shared_ptr<const ShardBytes>> mapped = cache_->Map(shard, e.key);
          if (mapped.ok() && (*mapped)->size() == bytes->size()) bytes = std::move(*mapped);
        }
        pin_out = std::move(pin);
        return bytes;
      }
    }
    metrics_->AddFetch(FetchSource::kCache, hit->size());
    pin_out = std::move(pin);
    return hit;
  }

 private:
  struct Source {
    std::string url;
    std::unique_ptr<ObjectStore> owned;
    ObjectStore* store = nullptr;
    FetchSource kind = FetchSource::kDurable;
    Status open_error;
  };

  static FetchSource KindOf(ObjectStore& store) {
    return store.backend() == "http" ? FetchSource::kPeer : FetchSource::kDurable;
  }

  // The cached copy (mapped, unless map_files is off) if intact; nullptr when there is none (a
  // damaged one is deleted, counted and treated as none, so it is fetched again).
  Result<std::shared_ptr<const ShardBytes>> Lookup(uint32_t shard, const Expected& e,
                                                   const std::string& where) {
    Result<std::shared_ptr<const ShardBytes>> got =
        map_files_ ? cache_->Map(shard, e.key)
                   : [&]() -> Result<std::shared_ptr<const ShardBytes>> {
      GANTRY_ASSIGN_OR_RETURN(std::string bytes, cache_->Get(shard, e.key));
      return ShardBytes::FromString(std::move(bytes));
    }();
    if (got.ok()) {
      // The trailer's checksum proved the copy is what was cached, and it was checked against
      // the index (hash included) before it was; the folder is this version's (fingerprint).
      // The size is checked again for free.
      if (!e.bytes || (*got)->size() == *e.bytes) return std::move(*got);
      metrics_->AddCacheDamaged();
      return std::shared_ptr<const ShardBytes>();
    }
    if (got.status().code() == StatusCode::kDataLoss) {
      metrics_->AddCacheDamaged();
      return std::shared_ptr<const ShardBytes>();
    }
    if (got.status().code() == StatusCode::kNotFound) return std::shared_ptr<const ShardBytes>();
    return Status(got.status().code(), where + ": " + got.status().message());
  }

  // A local (file://) source's shard, mapped, or read into reused memory (ShardBytes::ReadFile)
  // where map_local_ says so and the read budget allows, with only its small members read
  // (ShardBytes::OpenFile) where `partial` allows; nullptr when it is not one (or cannot be
  // mapped safely, or is over the limit to read: then it is read like any other).
  Result<std::shared_ptr<const ShardBytes>> MapLocal(const Source& src, const std::string& key,
                                                     uint64_t size, bool partial) {
    auto* posix = dynamic_cast<PosixStore*>(src.store);
    if (posix == nullptr || !ValidateKey(key).ok()) return std::shared_ptr<const ShardBytes>();
    const std::string path = posix->root() + "/" + key;
    const bool map = (map_local_ && !(partial && read_large_)) ||
                     (read_budget_ && ShardBytes::ReadBufferBytesInUse() + size > *read_budget_);
    Result<std::shared_ptr<ShardBytes>> mapped =
        map ? ShardBytes::MapFile(path, MapOptions{})
        : partial && large_member_bytes_ > 0
            ? ShardBytes::OpenFile(path, limits_.max_shard_bytes, large_member_bytes_)
            : ShardBytes::ReadFile(path, limits_.max_shard_bytes);
    if (mapped.ok()) return std::shared_ptr<const ShardBytes>(std::move(*mapped));
    if (mapped.status().code() == StatusCode::kResourceExhausted) {
      return std::shared_ptr<const ShardBytes>();
    }
    return Status(mapped.status().code(),
                  src.url + ": get '" + key + "': " + mapped.status().message());
  }

  Result<std::shared_ptr<const ShardBytes>> FromSources(const Expected& e, const std::string& where,
                                                        FetchSource& kind) {
    std::string problems;
    bool damaged = false, all_missing = true;
    StatusCode other = StatusCode::kOk;
    auto note = [&](const Source& src, const Status& s) {
      problems += (problems.empty() ? "" : "; ") + src.url + ": " + s.message();
      if (s.code() == StatusCode::kDataLoss) damaged = true;
      if (s.code() != StatusCode::kNotFound) all_missing = false;
      if (s.code() != StatusCode::kNotFound && s.code() != StatusCode::kDataLoss &&
          other == StatusCode::kOk) {
        other = s.code();
      }
    };
    for (const Source& src : sources_) {
      if (!src.open_error.ok()) {
        note(src, src.open_error);
        continue;
      }
      // The size first: a copy bigger than the index says is not fetched at all, so memory is
      // bounded by the index (and max_shard_bytes).
      Result<ObjectInfo> head = src.store->Head(e.key);
      if (!head.ok()) {
        note(src, head.status());
        continue;
      }
      if (e.bytes && head->size != *e.bytes) {
        metrics_->AddSourceDamaged();
        note(src,
             DataLoss(std::to_string(head->size) + " bytes, the index says " +
                      std::to_string(*e.bytes) + (head->size < *e.bytes ? " (cut short)" : "")));
        continue;
      }
      if (head->size > limits_.max_shard_bytes) {
        return ResourceExhausted(where + " is " + std::to_string(head->size) +
                                 " bytes, more than the limit of " +
                                 std::to_string(limits_.max_shard_bytes));
      }
      const bool partial = e.partial_ok && e.hash_algo.empty() && cache_ == nullptr;
      Result<std::shared_ptr<const ShardBytes>> bytes = MapLocal(src, e.key, head->size, partial);
      if (bytes.ok() && *bytes == nullptr) {
        Result<std::string> got = src.store->Get(e.key);
        if (got.ok()) {
          bytes = ShardBytes::FromString(std::move(*got));
        } else {
          bytes = got.status();
        }
      }
      if (!bytes.ok()) {
        note(src, bytes.status());
        continue;
      }
      Status check = CheckCopy((*bytes)->view(), e, "copy");
      // Cut short under the mapping while being checked (the guard zeroed the rest).
      if (check.ok() && (*bytes)->damaged()) check = DataLoss("copy: the file was cut short");
      if (!check.ok()) {
        metrics_->AddSourceDamaged();
        note(src, check);
        continue;
      }
      kind = src.kind;
      return std::move(*bytes);
    }
    const StatusCode code = damaged       ? StatusCode::kDataLoss
                            : all_missing ? StatusCode::kNotFound
                                          : other;
    return Status(code, where + ": " + problems);
  }

  std::string url_;
  ReadLimits limits_;
  std::vector<Source> sources_;
  std::shared_ptr<ShardCache> cache_;
  std::shared_ptr<LoaderMetrics> metrics_;
  bool map_files_ = true;            // cached copies
  bool map_local_ = true;            // a file:// source's shards
  uint64_t large_member_bytes_ = 0;  // ShardSourceOptions::large_member_bytes
  bool read_large_ = false;          // a partial read beats mapping (Init)
  // Unless map_files was given: local shards are read only while the process's held read
  // shards stay within this, and mapped beyond it.
  std::optional<uint64_t> read_budget_;
};

class MdsLoaded final : public LoadedShard {
 public:
  MdsLoaded(MdsShard shard, const MdsShardInfo& info, std::shared_ptr<CachePin> pin)
      : shard_(std::move(shard)), columns_(info.columns), pin_(std::move(pin)) {
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (columns_[c].name == "__key__") key_column_ = c;
    }
  }
  uint64_t size() const override { return shard_.num_samples(); }
  const std::shared_ptr<const ShardBytes>& bytes() const override { return shard_.bytes(); }
  std::shared_ptr<const void> cache_pin() const override { return pin_; }
  Status Get(uint64_t i, std::string& key, std::vector<SampleField>& fields) const override {
    GANTRY_ASSIGN_OR_RETURN(std::vector<std::string_view> cols,
                            shard_.Sample(static_cast<uint32_t>(i)));
    fields.clear();
    for (size_t c = 0; c < cols.size(); ++c) {
      fields.push_back({columns_[c].name, columns_[c].encoding, cols[c]});
    }
    if (key_column_ < cols.size()) {
      // A large sample of a shard not read yet may hold its key past the bytes read with it.
      GANTRY_RETURN_IF_ERROR(shard_.bytes()->Fill(cols[key_column_]));
      key = std::string(cols[key_column_]);
    } else {
      key.clear();
    }
    return Status::Ok();
  }
  void Prefetch(uint64_t i, int step) const override {
    shard_.Prefetch(static_cast<uint32_t>(i), step);
  }

 private:
  MdsShard shard_;
  // A copy: the fields' names and encodings point into it, and a Sample keeps this shard (not
  // the source) alive.
  std::vector<MdsColumn> columns_;
  size_t key_column_ = SIZE_MAX;
  std::shared_ptr<CachePin> pin_;  // the cached copy stays while the shard is in use
};

class MdsSource final : public ShardSource {
 public:
  MdsSource(DatasetLocation dataset, MdsIndex index, const ShardSourceOptions& options)
      : dataset_(std::move(dataset)), index_(std::move(index)) {
    options_.limits = options.limits;
    options_.verify_hashes = options.verify_hashes;
    for (const MdsShardInfo& s : index_.shards) samples_.push_back(s.samples);
  }
  Status Init(const ShardSourceOptions& options) {
    std::string fingerprint = "mds2 " + dataset_.mds_index_version;
    uint64_t bytes = 0, samples = 0;
    for (const MdsShardInfo& info : index_.shards) {
      fingerprint += "\n" + info.stored().basename + " " + std::to_string(info.stored().bytes) +
                     " " + std::to_string(info.samples);
      for (const auto& [algo, hex] : info.stored().hashes) fingerprint += " " + algo + ":" + hex;
      bytes += info.stored().bytes;
      samples += info.samples;
    }
    return fetcher_.Init(dataset_, options, fingerprint, samples == 0 ? 0 : bytes / samples);
  }
  DatasetFormat format() const override { return DatasetFormat::kMds; }
  const std::vector<uint64_t>& shard_samples() const override { return samples_; }
  std::string ShardName(uint32_t shard) const override {
    return index_.shards[shard].stored().basename;
  }
  Result<std::shared_ptr<const LoadedShard>> Read(uint32_t shard) override {
    const MdsShardInfo& info = index_.shards[shard];
    const std::string where = "shard '" + info.stored().basename + "'";
    if (info.raw.bytes > options_.limits.max_shard_bytes) {
      return ResourceExhausted(where + ": " + std::to_string(info.raw.bytes) +
                               " bytes is more than the limit of " +
                               std::to_string(options_.limits.max_shard_bytes));
    }
    Expected e{info.stored().basename, info.stored().bytes, "", ""};
    std::tie(e.hash_algo, e.hash_hex) = PickHash(info.stored().hashes);
    // An uncompressed shard whose hashes are not checked is parsed from its file's headers.
    e.partial_ok = !info.zip && !options_.verify_hashes;
    std::shared_ptr<CachePin> pin;
    GANTRY_ASSIGN_OR_RETURN(std::shared_ptr<const ShardBytes> stored,
                            fetcher_.Fetch(shard, e, pin));
    GANTRY_ASSIGN_OR_RETURN(MdsShard parsed,
                            DecodeMdsShard(std::move(stored), info, options_, where));
    if (parsed.bytes()->damaged()) return CutShort(where);
    return std::shared_ptr<const LoadedShard>(
        std::make_shared<MdsLoaded>(std::move(parsed), info, std::move(pin)));
  }
  LoaderMetrics* metrics() override { return fetcher_.metrics(); }

 private:
  DatasetLocation dataset_;
  MdsIndex index_;
  MdsReadOptions options_;
  std::vector<uint64_t> samples_;
  Fetcher fetcher_;
};

class WdsLoaded final : public LoadedShard {
 public:
  WdsLoaded(WdsShard shard, std::shared_ptr<CachePin> pin)
      : shard_(std::move(shard)), pin_(std::move(pin)) {}
  uint64_t size() const override { return shard_.samples().size(); }
  const std::shared_ptr<const ShardBytes>& bytes() const override { return shard_.bytes(); }
  std::shared_ptr<const void> cache_pin() const override { return pin_; }
  Status Get(uint64_t i, std::string& key, std::vector<SampleField>& fields) const override {
    const WdsSample& s = shard_.samples()[i];
    key = s.key;
    fields.clear();
    for (const WdsField& f : s.fields) fields.push_back({f.name, {}, f.bytes});
    return Status::Ok();
  }
  void Prefetch(uint64_t i, int step) const override {
    if (i >= shard_.samples().size()) return;
    const WdsSample& s = shard_.samples()[i];
    if (step == 0) {
      __builtin_prefetch(&s);
      __builtin_prefetch(reinterpret_cast<const char*>(&s + 1) - 1);
    } else if (step == 1) {
      const WdsField* f = s.fields.data();
      for (size_t k = 0; k < s.fields.size(); ++k) {
        __builtin_prefetch(f + k);
        __builtin_prefetch(reinterpret_cast<const char*>(f + k + 1) - 1);
      }
    } else {
      for (const WdsField& f : s.fields) {
        if (!f.bytes.empty()) __builtin_prefetch(f.bytes.data());
      }
    }
  }

 private:
  WdsShard shard_;
  std::shared_ptr<CachePin> pin_;
};

class WdsSource final : public ShardSource {
 public:
  WdsSource(DatasetLocation dataset, std::vector<uint64_t> samples, const ReadLimits& limits)
      : dataset_(std::move(dataset)), samples_(std::move(samples)), limits_(limits) {}
  // The fingerprint is the shards' names, listed sizes and versions, not their sample counts:
  // those are known only after reading the shards, which (CountSamples) goes through the cache
  // keyed on it, and a stager (stage.h) and a loader given the counts must find the same folder.
  // The version is there because a tar has no hash to tell a rewrite at the same size by.
  Status Init(const ShardSourceOptions& options) {
    std::string fingerprint = "wds3";
    uint64_t bytes = 0, samples = 0;  // the mean sample: once the samples are counted
    for (size_t i = 0; i < dataset_.wds_shards.size(); ++i) {
      fingerprint += "\n" + dataset_.wds_shards[i];
      if (i < dataset_.wds_shard_bytes.size()) {
        fingerprint += " " + std::to_string(dataset_.wds_shard_bytes[i]);
        bytes += dataset_.wds_shard_bytes[i];
      }
      if (i < dataset_.wds_shard_versions.size()) {
        fingerprint += " " + dataset_.wds_shard_versions[i];
      }
      if (i < samples_.size()) samples += samples_[i];
    }
    return fetcher_.Init(dataset_, options, fingerprint, samples == 0 ? 0 : bytes / samples);
  }
  // Counts every shard's samples (a tar holds no index) by fetching it like Read does: from the
  // cache when it holds the shard, else from the sources, caching it, so opening a dataset
  // staged on this node reads nothing from its sources.
  Status CountSamples(const ShardSourceOptions& options) {
    samples_.clear();
    const uint64_t n = dataset_.wds_shards.size();
    for (uint32_t shard = 0; shard < n; ++shard) {
      if (options.cancel != nullptr && options.cancel->load()) {
        return Cancelled(dataset_.url + ": cancelled while counting samples");
      }
      std::shared_ptr<CachePin> pin;
      GANTRY_ASSIGN_OR_RETURN(std::shared_ptr<const ShardBytes> stored,
                              fetcher_.Fetch(shard, ExpectedOf(shard), pin));
      GANTRY_ASSIGN_OR_RETURN(
          WdsShard parsed, WdsShard::Parse(std::move(stored), dataset_.wds_shards[shard], limits_));
      samples_.push_back(parsed.samples().size());
      if (options.open_progress) options.open_progress(shard + 1, n);
    }
    return Status::Ok();
  }
  DatasetFormat format() const override { return DatasetFormat::kWebDataset; }
  const std::vector<uint64_t>& shard_samples() const override { return samples_; }
  std::string ShardName(uint32_t shard) const override { return dataset_.wds_shards[shard]; }
  Result<std::shared_ptr<const LoadedShard>> Read(uint32_t shard) override {
    // A tar carries no hash: a copy is checked against the listed size (and, when parsed, every
    // member header's checksum and the gzip CRCs).
    std::shared_ptr<CachePin> pin;
    GANTRY_ASSIGN_OR_RETURN(std::shared_ptr<const ShardBytes> stored,
                            fetcher_.Fetch(shard, ExpectedOf(shard), pin));
    GANTRY_ASSIGN_OR_RETURN(
        WdsShard parsed, WdsShard::Parse(std::move(stored), dataset_.wds_shards[shard], limits_));
    if (parsed.bytes()->damaged()) return CutShort("shard '" + dataset_.wds_shards[shard] + "'");
    if (parsed.samples().size() != samples_[shard]) {
      return DataLoss(dataset_.url + ": shard " + dataset_.wds_shards[shard] + " holds " +
                      std::to_string(parsed.samples().size()) + " samples, not the " +
                      std::to_string(samples_[shard]) + " the order was built on");
    }
    return std::shared_ptr<const LoadedShard>(
        std::make_shared<WdsLoaded>(std::move(parsed), std::move(pin)));
  }
  LoaderMetrics* metrics() override { return fetcher_.metrics(); }

 private:
  Expected ExpectedOf(uint32_t shard) const {
    Expected e{dataset_.wds_shards[shard], std::nullopt, "", ""};
    e.partial_ok = e.key.ends_with(".tar");  // not gzip: its parse walks the file's headers
    if (shard < dataset_.wds_shard_bytes.size()) e.bytes = dataset_.wds_shard_bytes[shard];
    return e;
  }

  DatasetLocation dataset_;
  std::vector<uint64_t> samples_;
  ReadLimits limits_;
  Fetcher fetcher_;
};

}  // namespace

Result<std::unique_ptr<ShardSource>> OpenShardSource(DatasetLocation dataset,
                                                     const ShardSourceOptions& options) {
  if (dataset.format == DatasetFormat::kMds) {
    GANTRY_ASSIGN_OR_RETURN(MdsIndex index, ReadMdsIndex(*dataset.store, ""));
    auto source = std::make_unique<MdsSource>(std::move(dataset), std::move(index), options);
    GANTRY_RETURN_IF_ERROR(source->Init(options));
    return std::unique_ptr<ShardSource>(std::move(source));
  }
  std::vector<uint64_t> samples = options.wds_shard_samples;
  if (!samples.empty() && samples.size() != dataset.wds_shards.size()) {
    return InvalidArgument(dataset.url + ": " + std::to_string(samples.size()) +
                           " shard sample counts given for " +
                           std::to_string(dataset.wds_shards.size()) + " shards");
  }
  if (!dataset.wds_shard_bytes.empty() &&
      dataset.wds_shard_bytes.size() != dataset.wds_shards.size()) {
    return InvalidArgument(dataset.url + ": " + std::to_string(dataset.wds_shard_bytes.size()) +
                           " shard sizes for " + std::to_string(dataset.wds_shards.size()) +
                           " shards");
  }
  if (!dataset.wds_shard_versions.empty() &&
      dataset.wds_shard_versions.size() != dataset.wds_shards.size()) {
    return InvalidArgument(dataset.url + ": " + std::to_string(dataset.wds_shard_versions.size()) +
                           " shard versions for " + std::to_string(dataset.wds_shards.size()) +
                           " shards");
  }
  const bool count_through_cache = samples.empty() && !options.cache.dir.empty();
  if (samples.empty() && !count_through_cache) {
    for (const std::string& key : dataset.wds_shards) {
      if (options.cancel != nullptr && options.cancel->load()) {
        return Cancelled(dataset.url + ": cancelled while counting samples");
      }
      GANTRY_ASSIGN_OR_RETURN(WdsShard shard, ReadWdsShard(*dataset.store, key, options.limits));
      samples.push_back(shard.samples().size());
      if (options.open_progress) options.open_progress(samples.size(), dataset.wds_shards.size());
    }
  }
  auto source = std::make_unique<WdsSource>(std::move(dataset), std::move(samples), options.limits);
  GANTRY_RETURN_IF_ERROR(source->Init(options));
  if (count_through_cache) GANTRY_RETURN_IF_ERROR(source->CountSamples(options));
  return std::unique_ptr<ShardSource>(std::move(source));
}

const std::shared_ptr<const ShardBytes>& LoadedShard::bytes() const {
  static const std::shared_ptr<const ShardBytes> empty = ShardBytes::FromString({});
  return empty;
}

const SampleField* Sample::Find(std::string_view name) const {
  for (const SampleField& f : fields) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

uint32_t ReadAheadDepth(double fetch_seconds, double consume_seconds, uint32_t max_shards) {
  const double ratio = std::max(fetch_seconds, 0.0) / std::max(consume_seconds, 1e-9);
  const double want = std::ceil(std::min(ratio, 1e6)) + 1;
  return static_cast<uint32_t>(
      std::clamp<double>(want, 1, static_cast<double>(std::max<uint32_t>(1, max_shards))));
}

// The read-ahead: plans the shards its slot needs next, in the order it first needs them
// (scanning the slot's positions forward, each once per epoch), and fetches them on its own
// threads, up to the depth ReadAheadOptions' rule gives.
class SampleIterator::ReadAhead {
 public:
  ReadAhead(ShardSource& source, const EpochOrder& order, SlotPositions positions, uint64_t next,
            const ReadAheadOptions& options)
      : source_(source),
        order_(order),
        positions_(positions),
        options_(options),
        cursor_(next),
        depth_(std::min<uint32_t>(2, options.max_shards)) {
    const uint32_t threads = std::max<uint32_t>(1, std::min(options.threads, options.max_shards));
    for (uint32_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }
  ~ReadAhead() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  // Plans up to the depth; the consumer is at position index `next`.
  void Advance(uint64_t next) {
    bool planned = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cursor_ = std::max(cursor_, next);
      // Bounded per call so Next stays O(1) amortized: each position is scanned once.
      for (int scanned = 0;
           scanned < 4096 && cursor_ < positions_.size() && plan_.size() + entries_.size() < depth_;
           ++scanned) {
        if (SkipPlannedRegion()) continue;
        const uint32_t shard = order_.At(positions_[cursor_++]).shard;
        if (MarkPlanned(shard)) {
          plan_.push_back(shard);
          planned = true;
        }
      }
    }
    // Only a new plan entry gives the fetch threads work; Next calls this for every sample,
    // and waking them each time cost a futex wake and two context switches per sample.
    if (planned) cv_.notify_all();
  }

  // The shard's result if it was planned (waiting for it if in flight), else nullopt (fetch it
  // directly). Each planned shard is handed out once.
  std::optional<Result<std::shared_ptr<const LoadedShard>>> Take(uint32_t shard) {
    std::unique_lock<std::mutex> lock(mu_);
    // Not planned yet: the caller fetches it, and the planner must not fetch it again.
    if (MarkPlanned(shard)) {
      ++misses_;
      return std::nullopt;
    }
    while (true) {
      auto it = entries_.find(shard);
      if (it != entries_.end() && it->second.done) {
        auto result = std::move(it->second.result);
        entries_.erase(it);
        lock.unlock();
        cv_.notify_all();
        return result;
      }
      if (it == entries_.end()) {
        auto p = std::find(plan_.begin(), plan_.end(), shard);
        if (p == plan_.end()) return std::nullopt;  // handed out before (an error, retried)
        // Needed now: to the front of the plan, past the depth limit if it must.
        plan_.erase(p);
        plan_.push_front(shard);
        urgent_ = shard;
        cv_.notify_all();
      }
      cv_.wait(lock);
    }
  }

  // Whether the shard is fetched, without error, and not handed out yet: Take would return it
  // at once.
  bool Ready(uint32_t shard) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = entries_.find(shard);
    return it != entries_.end() && it->second.done && it->second.result.ok();
  }

  // Shards the consumer needed before the planner had planned them.
  uint64_t misses() {
    std::lock_guard<std::mutex> lock(mu_);
    return misses_;
  }

  // A shuffled window's positions reach all of its shards within its first few samples, so at
  // a window boundary the consumer needs the next window's shards together, not one after the
  // other as the rate rule assumes: the depth is at least the shards one window spans (up to
  // max_shards), so they are all read ahead before the boundary.
  void SetWindowShards(uint32_t shards) {
    bool deeper = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      window_floor_ = std::min(shards, options_.max_shards);
      deeper = window_floor_ > depth_;
      depth_ = std::max(depth_, window_floor_);
    }
    if (deeper) cv_.notify_all();  // planned shards held back by the old depth may start
  }

  // The consumer spent `seconds` (not stalled) on its previous shard.
  uint64_t ObserveConsumer(double seconds) {
    uint64_t depth = 0;
    bool deeper = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      consume_s_ = consume_s_ < 0 ? seconds : 0.7 * consume_s_ + 0.3 * seconds;
      const uint32_t before = depth_;
      Resize();
      deeper = depth_ > before;
      depth = depth_;
    }
    if (deeper) cv_.notify_all();
    return depth;
  }

 private:
  struct Entry {
    bool done = false;
    Result<std::shared_ptr<const LoadedShard>> result = Status::Ok();
  };

  // Adds `shard` to the planned ones; false when it was already. Keeps the count of the
  // region's shards that are planned.
  bool MarkPlanned(uint32_t shard) {
    if (!planned_.insert(shard).second) return false;
    const size_t k = order_.RankOfShard(shard);
    if (k >= region_lo_ && k < region_hi_) ++region_planned_;
    return true;
  }

  // The planner computed the sample of every position only to learn its shard: as many order
  // lookups as the consumer's own, on the consumer's thread. A region (the shuffle window of
  // the position at the cursor, or its shard when unshuffled) is read only from the shards
  // that overlap it in shard order, so once all of those are planned the rest of the region
  // can plan nothing: the cursor jumps to the first of this slot's positions past it. Exact:
  // the same shards are planned in the same order. True when it moved the cursor.
  bool SkipPlannedRegion() {
    const uint64_t p = positions_[cursor_];
    if (p < region_begin_ || p >= region_end_) EnterRegion(p);
    if (region_planned_ < region_shards_) return false;
    // The first position index at or after the cursor whose position is past the region (the
    // slot's positions increase with the index).
    uint64_t lo = cursor_, hi = positions_.size();
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (positions_[mid] < region_end_) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    cursor_ = lo;
    return true;
  }

  // The region of global position p, and how many of its (non-empty) shards are planned.
  void EnterRegion(uint64_t p) {
    if (order_.window() > 1) {
      region_begin_ = order_.WindowStart(p);
      region_end_ = std::min(region_begin_ + order_.window(), order_.size());
    } else {
      const size_t k = order_.RankOfShard(order_.At(p).shard);
      region_begin_ = order_.ShardBegin(k);
      region_end_ = order_.ShardEnd(k);
    }
    const size_t lo = order_.FirstShardEndingAfter(region_begin_);
    region_lo_ = lo;
    region_shards_ = 0;
    region_planned_ = 0;
    size_t k = lo;
    for (; k < order_.num_shards() && order_.ShardBegin(k) < region_end_; ++k) {
      if (order_.ShardEnd(k) == order_.ShardBegin(k)) continue;  // empty: no position reads it
      ++region_shards_;
      if (planned_.contains(order_.ShardAt(k))) ++region_planned_;
    }
    region_hi_ = k;
  }

  void Resize() {
    if (fetch_s_ < 0 || consume_s_ < 0) return;
    depth_ = std::max(ReadAheadDepth(fetch_s_, consume_s_, options_.max_shards), window_floor_);
  }

  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      // Within the depth, or the one the consumer waits for.
      while (!stop_ && (plan_.empty() || (entries_.size() >= depth_ && plan_.front() != urgent_))) {
        cv_.wait(lock);
      }
      if (stop_) return;
      const uint32_t shard = plan_.front();
      plan_.pop_front();
      entries_.emplace(shard, Entry{});
      lock.unlock();
      const int64_t start = NowNs();
      Result<std::shared_ptr<const LoadedShard>> result = source_.Read(shard);
      const double seconds = static_cast<double>(NowNs() - start) / 1e9;
      lock.lock();
      if (result.ok()) {
        fetch_s_ = fetch_s_ < 0 ? seconds : 0.7 * fetch_s_ + 0.3 * seconds;
        Resize();
      }
      Entry& e = entries_[shard];
      e.done = true;
      e.result = std::move(result);
      cv_.notify_all();
    }
  }

  ShardSource& source_;
  const EpochOrder& order_;  // the iterator's, which outlives this
  const SlotPositions positions_;
  const ReadAheadOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t cursor_;                              // next position index to plan from
  std::deque<uint32_t> plan_;                    // planned, not started
  std::unordered_map<uint32_t, Entry> entries_;  // started, not yet taken
  std::unordered_set<uint32_t> planned_;         // every shard ever planned this epoch
  // SkipPlannedRegion's region: global positions [begin, end), its shards' ranks in shard
  // order [lo, hi) (empty ones included), and how many of its non-empty shards are planned.
  uint64_t region_begin_ = 0, region_end_ = 0;
  size_t region_lo_ = 0, region_hi_ = 0;
  uint64_t region_shards_ = 0, region_planned_ = 0;
  uint32_t depth_;
  uint32_t window_floor_ = 0;  // SetWindowShards
  uint32_t urgent_ = UINT32_MAX;
  uint64_t misses_ = 0;
  double fetch_s_ = -1;  // moving averages; -1: not measured yet
  double consume_s_ = -1;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

SampleIterator::SampleIterator(ShardSource& source, EpochOrder order, SlotPositions positions)
    : source_(&source), order_(std::move(order)), positions_(positions) {}
SampleIterator::SampleIterator(SampleIterator&&) noexcept = default;
SampleIterator& SampleIterator::operator=(SampleIterator&&) noexcept = default;
SampleIterator::~SampleIterator() = default;

void SampleIterator::StopReadAhead() {
  if (ahead_ != nullptr) read_ahead_misses_ += ahead_->misses();
  ahead_.reset();
}

uint64_t SampleIterator::read_ahead_misses() const {
  return read_ahead_misses_ + (ahead_ != nullptr ? ahead_->misses() : 0);
}

Result<SampleIterator> SampleIterator::Create(ShardSource& source, const EpochOrder& order,
                                              const Slot& slot, uint64_t start,
                                              const ReadAheadOptions& read_ahead) {
  if (order.num_shards() != source.shard_samples().size()) {
    return InvalidArgument("the order has " + std::to_string(order.num_shards()) +
                           " shards; the dataset has " +
                           std::to_string(source.shard_samples().size()));
  }
  GANTRY_ASSIGN_OR_RETURN(SlotPositions positions,
                          SlotPositions::Create(slot, start, order.size()));
  SampleIterator it(source, order, positions);
  if (read_ahead.max_shards > 0 && positions.size() > 0) {
    // The order it reads is the iterator's own copy, on the heap with it: moving the iterator
    // moves the pointer, not the order.
    it.order_heap_ = std::make_unique<EpochOrder>(order);
    it.ahead_ = std::make_unique<ReadAhead>(source, *it.order_heap_, positions, 0, read_ahead);
  }
  return it;
}

SampleRef SampleIterator::RefAt(uint64_t k) {
  const size_t slot = k % kRefRing;
  if (ref_ring_at_[slot] != k + 1) {
    ref_ring_[slot] = order_.At(positions_[k]);
    ref_ring_at_[slot] = k + 1;
  }
  return ref_ring_[slot];
}

const LoadedShard* SampleIterator::HeldShard(uint32_t shard) const {
  const auto it = held_.find(shard);
  return it == held_.end() ? nullptr : it->second.get();
}

uint32_t SampleIterator::ShardsInWindow(uint64_t window_start) const {
  // Shards lie contiguously in shard order: the first that ends past the window's start, then
  // every one that begins before its end (counted up to a bound: the depth is capped anyway).
  const size_t lo = order_.FirstShardEndingAfter(window_start);
  uint32_t n = 0;
  for (size_t k = lo;
       k < order_.num_shards() && n < 1024 && order_.ShardBegin(k) < window_start + order_.window();
       ++k) {
    if (order_.ShardEnd(k) > order_.ShardBegin(k)) ++n;  // empty shards hold no position
  }
  return n;
}

Result<std::shared_ptr<const LoadedShard>> SampleIterator::Obtain(uint32_t shard) {
  const int64_t start = NowNs();
  std::optional<Result<std::shared_ptr<const LoadedShard>>> ready;
  if (ahead_ != nullptr) ready = ahead_->Take(shard);
  Result<std::shared_ptr<const LoadedShard>> result =
      ready ? std::move(*ready) : source_->Read(shard);
  const int64_t end = NowNs();
  const double stall = static_cast<double>(end - start) / 1e9;
  if (LoaderMetrics* m = source_->metrics()) m->AddStall(stall);
  if (result.ok()) {
    // The consumer's own time on the previous shard: wall time since it reached it, less what
    // it spent stalled since.
    if (last_shard_ns_ != 0 && ahead_ != nullptr) {
      const double spent = static_cast<double>(start - last_shard_ns_) / 1e9 - stall_since_shard_;
      const uint64_t depth = ahead_->ObserveConsumer(std::max(spent, 0.0));
      if (LoaderMetrics* m = source_->metrics()) m->SetReadAheadDepth(depth);
    }
    last_shard_ns_ = end;
    stall_since_shard_ = 0;
  } else {
    stall_since_shard_ += stall;
  }
  return result;
}

Result<bool> SampleIterator::Next(Sample& out) {
  uint64_t read = 0;
  GANTRY_RETURN_IF_ERROR(NextBatch(std::span<Sample>(&out, 1), &read));
  return read == 1;
}

Status SampleIterator::NextBatch(std::span<Sample> out, uint64_t* read, UnreadFields unread) {
  return ReadBatch(out, read, unread, /*wait=*/true);
}

Status SampleIterator::NextReadyBatch(std::span<Sample> out, uint64_t* read, UnreadFields unread) {
  return ReadBatch(out, read, unread, /*wait=*/false);
}

Status SampleIterator::ReadBatch(std::span<Sample> out, uint64_t* read, UnreadFields unread,
                                 bool wait) {
  if (last_next_ns_ == 0) last_next_ns_ = NowNs();
  uint64_t n = 0;
  Status status = Status::Ok();
  while (n < out.size()) {
    Result<bool> more = NextSample(out[n], unread, wait);
    if (!more.ok()) {
      status = more.status();
      break;
    }
    if (!*more) break;
    ++n;
  }
  *read = n;
  if (n > 0) {
    const int64_t now = NowNs();
    if (LoaderMetrics* m = source_->metrics()) {
      m->AddSamples(n, static_cast<double>(now - last_next_ns_) / 1e9);
    }
    last_next_ns_ = now;
  }
  return status;
}

Result<bool> SampleIterator::NextSample(Sample& out, UnreadFields unread, bool wait) {
  if (next_ >= positions_.size()) {
    held_.clear();
    StopReadAhead();  // nothing more to read: stop its threads
    return false;
  }
  const uint64_t p = positions_[next_];
  // Positions only move forward, and so do their windows: a shard that ends before this
  // window's first shard-order position is never needed again this epoch. Pruned when the
  // window moves, not for every sample: a window can hold thousands of small shards, and
  // walking them all per sample made Next 300x slower at 10,000 held
  // (BM_IteratorNextManyShards, order_benchmark.cc).
  const uint64_t window_start = order_.WindowStart(p);
  if (window_start != pruned_window_) {
    pruned_window_ = window_start;
    for (auto it = held_.begin(); it != held_.end();) {
      if (order_.ShardEnd(order_.RankOfShard(it->first)) <= window_start) {
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (ahead_ != nullptr && order_.options().shuffle && window_start != last_window_) {
    last_window_ = window_start;
    ahead_->SetWindowShards(ShardsInWindow(window_start));
  }
  if (ahead_ != nullptr) ahead_->Advance(next_);
  const SampleRef ref = RefAt(next_);
  auto it = held_.find(ref.shard);
  // Not waiting: a shard neither held nor fetched already ends the batch here, as if at the
  // end; the next call that waits takes it from the read-ahead (or fetches it).
  if (it == held_.end() && !wait && (ahead_ == nullptr || !ahead_->Ready(ref.shard))) {
    return false;
  }
  if (it == held_.end()) {
    GANTRY_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedShard> shard, Obtain(ref.shard));
    ++shards_read_;
    if (shard->size() != source_->shard_samples()[ref.shard]) {
      return DataLoss("shard " + source_->ShardName(ref.shard) + " holds " +
                      std::to_string(shard->size()) + " samples, not the " +
                      std::to_string(source_->shard_samples()[ref.shard]) + " its index says");
    }
    it = held_.emplace(ref.shard, std::move(shard)).first;
    max_held_ = std::max(max_held_, held_.size());
  }
  if (it->second->bytes()->damaged()) {
    // Its file was cut short under the mapping: dropped, so the next call fetches it again
    // (and finds the damage, or another source's copy).
    held_.erase(it);
    return CutShort("shard '" + source_->ShardName(ref.shard) + "'");
  }
  out.position = p;
  out.ref = ref;
  out.shard = it->second;
  GANTRY_RETURN_IF_ERROR(it->second->Get(ref.index, out.key, out.fields));  // names the shard
  const ShardBytes& bytes = *it->second->bytes();
  if (unread == UnreadFields::kRead && !bytes.complete()) {
    for (const SampleField& f : out.fields) {
      Status filled = bytes.Fill(f.bytes);
      if (!filled.ok()) {
        // Cut short since the shard was opened (DataLoss), or a failed read: the shard is
        // fetched again at the next call.
        out.shard.reset();
        held_.erase(it);
        return Status(filled.code(),
                      "shard '" + source_->ShardName(ref.shard) + "': " + filled.message());
      }
    }
  }
  ++next_;
  // Hints for the samples after this one (LoadedShard::Prefetch): the record of the third
  // ahead, the fields of the second, the first bytes of the next. Shuffled, each sample is in
  // another shard and each of those reads was a cache miss: 1.13-1.20x the samples/s for 4 KiB
  // samples in both formats (bench/reader_ab.py, docs/performance.md).
  for (int step = 0; step < 3; ++step) {
    const uint64_t k = next_ + 2 - step;
    if (k >= positions_.size()) continue;
    const SampleRef r = RefAt(k);
    if (const LoadedShard* shard = HeldShard(r.shard)) shard->Prefetch(r.index, step);
  }
  return true;
}

}  // namespace gantry::data
