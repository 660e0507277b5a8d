#include "gantry/cache/chunk_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "gantry/cache/roots.h"

namespace gantry {
namespace {

constexpr std::string_view kManifestPrefix = "manifests/";
// Markers of the root kinds a namespace holds ("roots/ckpt"): see DeclareRootKind.
constexpr std::string_view kRootKindPrefix = "roots/";

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// flock(2) held for a scope; a no-op for tiers without a lock file.
class FileLock {
 public:
  explicit FileLock(int fd) : fd_(fd) {
    if (fd_ < 0) return;
    while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~FileLock() {
    if (fd_ >= 0) flock(fd_, LOCK_UN);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

// Encodings of one chunk per codec, made on first use: a write-through put to an uncompressed
// memory tier and a zstd S3 tier encodes twice, never more.
class Encodings {
 public:
  explicit Encodings(std::string_view raw) : raw_(raw) {}
  std::string_view For(Codec codec, int level) {
    auto& slot = cache_[static_cast<size_t>(codec)];
    if (!slot) slot = EncodeChunk(raw_, codec, level);
    return *slot;
  }

 private:
  std::string_view raw_;
  std::array<std::optional<std::string>, 3> cache_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Manifest

std::string Manifest::ToJson() const {
  nlohmann::json j;
  j["version"] = 1;
  j["name"] = name;
  j["size"] = size;
  j["chunk_size"] = chunk_size;
  nlohmann::json chunks_json = nlohmann::json::array();
  for (const ManifestChunk& c : chunks) {
    chunks_json.push_back({{"id", c.id.ToHex()}, {"size", c.size}});
  }
  j["chunks"] = std::move(chunks_json);
  return j.dump();
}

Result<Manifest> Manifest::FromJson(std::string_view json, std::string_view what) {
  const std::string where = "manifest '" + std::string(what) + "': ";
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(where + "not a JSON object");
  auto field = [&](const char* name, auto check) -> Status {
    if (!j.contains(name) || !check(j[name])) {
      return InvalidArgument(where + "field '" + name + "' missing or of the wrong type");
    }
    return Status::Ok();
  };
  auto is_uint = [](const nlohmann::json& v) { return v.is_number_unsigned(); };
  GANTRY_RETURN_IF_ERROR(field("version", is_uint));
  if (j["version"].get<uint64_t>() != 1) {
    return InvalidArgument(where + "unsupported version " + j["version"].dump());
  }
  GANTRY_RETURN_IF_ERROR(field("name", [](const nlohmann::json& v) { return v.is_string(); }));
  GANTRY_RETURN_IF_ERROR(field("size", is_uint));
  GANTRY_RETURN_IF_ERROR(field("chunk_size", is_uint));
  GANTRY_RETURN_IF_ERROR(field("chunks", [](const nlohmann::json& v) { return v.is_array(); }));
  Manifest m;
  m.name = j["name"].get<std::string>();
  m.size = j["size"].get<uint64_t>();
  m.chunk_size = j["chunk_size"].get<uint64_t>();
  uint64_t total = 0;
  for (size_t i = 0; i < j["chunks"].size(); ++i) {
    const nlohmann::json& c = j["chunks"][i];
    const std::string at = where + "chunks[" + std::to_string(i) + "]: ";
    if (!c.is_object() || !c.contains("id") || !c["id"].is_string() || !c.contains("size") ||
        !c["size"].is_number_unsigned()) {
      return InvalidArgument(at + "want {\"id\": <32 hex>, \"size\": <bytes>}");
    }
    Result<ChunkId> id = ChunkId::FromHex(c["id"].get<std::string>());
    if (!id.ok()) return InvalidArgument(at + id.status().message());
    m.chunks.push_back({*id, c["size"].get<uint64_t>()});
    total += m.chunks.back().size;
  }
  if (total != m.size) {
    return InvalidArgument(where + "chunk sizes add up to " + std::to_string(total) +
                           ", field 'size' says " + std::to_string(m.size));
  }
  return m;
}

// ---------------------------------------------------------------------------------------------
// Opening and closing

ChunkStore::ChunkStore(ChunkStoreOptions options) : options_(std::move(options)) {}

Result<std::unique_ptr<ChunkStore>> ChunkStore::Open(ChunkStoreOptions options) {
  std::unique_ptr<ChunkStore> store(new ChunkStore(std::move(options)));
  GANTRY_RETURN_IF_ERROR(store->Init());
  return store;
}

Status ChunkStore::Init() {
  if (options_.tiers.empty()) return InvalidArgument("chunk store: no tiers");
  if (options_.chunk_size == 0) return InvalidArgument("chunk store: chunk_size must be > 0");
  clock_ = options_.clock != nullptr ? options_.clock : &DefaultClock();
  if (options_.metrics == nullptr) {
    owned_metrics_ = std::make_unique<MetricsRegistry>();
    metrics_ = owned_metrics_.get();
  } else {
    metrics_ = options_.metrics;
  }
  std::set<std::string> names;
  for (TierOptions& opt : options_.tiers) {
    const std::string where = "chunk store tier '" + opt.name + "': ";
    if (opt.name.empty() || !names.insert(opt.name).second) {
      return InvalidArgument("chunk store: tier names must be non-empty and unique ('" + opt.name +
                             "')");
    }
    if (!(opt.low_watermark > 0 && opt.low_watermark <= opt.high_watermark &&
          opt.high_watermark <= 1)) {
      return InvalidArgument(where + "want 0 < low_watermark <= high_watermark <= 1");
    }
    auto t = std::make_unique<Tier>();
    t->opt = opt;
    if (opt.store != nullptr) {
      t->store = opt.store;
    } else {
      Result<std::unique_ptr<ObjectStore>> s = OpenObjectStore(opt.url, options_.store_options);
      if (!s.ok()) return s.status().WithContext(where);
      t->store = std::move(*s);
    }
    t->verify = opt.verify.value_or(t->store->backend() != "memory");
    std::string lock_path;
    if (opt.lock_path.has_value()) {
      lock_path = *opt.lock_path;
    } else {
      std::string url = t->store->url();
      if (url.rfind("file://", 0) == 0) lock_path = url.substr(7) + "/.gantry-lock";
    }
    if (!lock_path.empty()) {
      t->lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (t->lock_fd < 0 && (errno == EACCES || errno == EPERM || errno == EROFS)) {
        // A directory this process may only read (mounted read-only, another user's): readers
        // need no lock. An existing lock file still serves (flock works on a read-only
        // descriptor); without one, what needs the lock (eviction, GC, dropping copies) fails
        // with PermissionDenied naming the file instead of running unlocked.
        const int err = errno;
        t->lock_fd = ::open(lock_path.c_str(), O_RDONLY | O_CLOEXEC);
        if (t->lock_fd < 0) {
          t->lock_unavailable = where + "cannot create lock file " + lock_path + " (" +
                                std::strerror(err) + "): the tier is read-only to this process";
        }
      } else if (t->lock_fd < 0) {
        return StatusFromErrno(errno, where + "open lock file " + lock_path);
      }
    }
    MetricLabels l = {{"tier", opt.name}};
    MetricsRegistry& m = *metrics_;
    t->hits = &m.GetCounter("gantry_cache_hits_total", "Chunk reads served by the tier.", l);
    t->misses =
        &m.GetCounter("gantry_cache_misses_total", "Chunk reads the tier could not serve.", l);
    t->bytes_read = &m.GetCounter("gantry_cache_read_bytes_total", "Stored bytes read.", l);
    t->bytes_written =
        &m.GetCounter("gantry_cache_written_bytes_total", "Stored bytes written.", l);
    t->evictions = &m.GetCounter("gantry_cache_evictions_total", "Chunks evicted.", l);
    t->corrupt = &m.GetCounter("gantry_cache_corrupt_chunks_total",
                               "Chunk copies that failed verification.", l);
    t->repaired = &m.GetCounter("gantry_cache_repaired_chunks_total",
                                "Corrupt chunk copies rewritten from another tier.", l);
    t->skipped_full = &m.GetCounter("gantry_cache_full_skips_total",
                                    "Cache copies not written because the tier was full.", l);
    t->used_gauge = &m.GetGauge("gantry_cache_used_bytes", "Stored bytes in the tier.", l);
    t->get_latency = &m.GetHistogram("gantry_cache_get_seconds", "Latency of tier reads.", l,
                                     Histogram::LatencyBuckets());
    t->put_latency = &m.GetHistogram("gantry_cache_put_seconds", "Latency of tier writes.", l,
                                     Histogram::LatencyBuckets());
    tiers_.push_back(std::move(t));
  }
  GANTRY_RETURN_IF_ERROR(CheckTiersDoNotOverlap());
  promotions_ = &metrics_->GetCounter("gantry_cache_promotions_total",
                                      "Chunk copies made in a faster tier on read.");
  drained_ = &metrics_->GetCounter("gantry_cache_drained_chunks_total",
                                   "Chunks the write-back drain copied to durable tiers.");
  drain_errors_ = &metrics_->GetCounter("gantry_cache_drain_errors_total",
                                        "Chunks the write-back drain failed to copy.");
  backlog_gauge_ = &metrics_->GetGauge("gantry_cache_drain_backlog_bytes",
                                       "Raw bytes accepted by write-back, not yet durable.");
  // Learn what the capacity-limited tiers already hold (a restart, or other processes).
  for (size_t i = 0; i < tiers_.size(); ++i) {
    if (tiers_[i]->opt.capacity_bytes == 0) continue;
    MutexLock evict(tiers_[i]->evict_mu);
    FileLock lock(tiers_[i]->lock_fd);
    GANTRY_RETURN_IF_ERROR(ResyncFromListing(static_cast<int>(i)));
  }
  if (options_.write_mode == WriteMode::kWriteBack && tiers_.size() > 1 &&
      !tiers_[0]->opt.durable) {
    drain_thread_ = std::thread([this] { DrainLoop(); });
  }
  return Status::Ok();
}

ChunkStore::~ChunkStore() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  drain_cv_.NotifyAll();
  if (drain_thread_.joinable()) drain_thread_.join();
  for (auto& t : tiers_) {
    if (t->lock_fd >= 0) ::close(t->lock_fd);
  }
}

int ChunkStore::FirstDurableTier() const {
  for (size_t i = 0; i < tiers_.size(); ++i) {
    if (tiers_[i]->opt.durable) return static_cast<int>(i);
  }
  return -1;
}

int ChunkStore::durable_tier() const { return ManifestTier(); }

// Two tiers in one directory (or one inside the other) see each other's chunks: a Head on the
// "lower" tier finds the copy about to be deleted from the upper one, so eviction and cleanup
// would delete the only copy. Directories are compared after resolving symlinks and "..".
Status ChunkStore::CheckTiersDoNotOverlap() const {
  std::vector<std::string> where(tiers_.size());
  for (size_t i = 0; i < tiers_.size(); ++i) {
    std::string url = tiers_[i]->store->url();
    if (url.starts_with("file://")) {
      std::error_code ec;
      std::filesystem::path p = std::filesystem::weakly_canonical(url.substr(7), ec);
      if (ec) p = std::filesystem::path(url.substr(7)).lexically_normal();
      url = p.string();
      while (url.size() > 1 && url.back() == '/') url.pop_back();
      where[i] = url + "/";
    } else {
      while (!url.empty() && url.back() == '/') url.pop_back();
      where[i] = url + "/";
    }
  }
  for (size_t i = 0; i < tiers_.size(); ++i) {
    for (size_t j = i + 1; j < tiers_.size(); ++j) {
      if (where[i].starts_with(where[j]) || where[j].starts_with(where[i])) {
        return InvalidArgument("chunk store: tiers '" + tiers_[i]->opt.name + "' (" +
                               tiers_[i]->store->url() + ") and '" + tiers_[j]->opt.name + "' (" +
                               tiers_[j]->store->url() +
                               ") overlap (the same or nested locations): cleanup of one would "
                               "delete the other's only copies; give each tier its own location");
      }
    }
  }
  return Status::Ok();
}

int ChunkStore::ManifestTier() const {
  int d = FirstDurableTier();
  return d >= 0 ? d : static_cast<int>(tiers_.size()) - 1;
}

// ---------------------------------------------------------------------------------------------
// Index and eviction

void ChunkStore::Touch(int tier, const ChunkId& id, uint64_t bytes) {
  Tier& t = *tiers_[tier];
  if (t.opt.capacity_bytes == 0) return;  // nothing to evict: no index (it would grow forever)
  MutexLock lock(mu_);
  Entry& e = t.entries[id];
  t.used = t.used - e.bytes + bytes;
  e.bytes = bytes;
  e.last_access = std::max(NowNs(), e.last_access + 1);
  t.used_gauge->Set(static_cast<double>(t.used));
}

void ChunkStore::Forget(int tier, const ChunkId& id) {
  Tier& t = *tiers_[tier];
  MutexLock lock(mu_);
  auto it = t.entries.find(id);
  if (it == t.entries.end()) return;
  t.used -= it->second.bytes;
  t.entries.erase(it);
  t.used_gauge->Set(static_cast<double>(t.used));
}

bool ChunkStore::IsProtected(const ChunkId& id) const {
  return pins_.count(id) > 0 || pending_.count(id) > 0;
}

Status ChunkStore::ResyncFromListing(int tier) {
  Tier& t = *tiers_[tier];
  const int64_t started = NowNs();
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, t.store->ListAll(kChunkPrefix));
  MutexLock lock(mu_);
  std::unordered_map<ChunkId, Entry, ChunkIdHash> fresh;
  uint64_t used = 0;
  for (const ObjectInfo& o : objects) {
    Result<ChunkId> id = ChunkIdFromKey(o.key);
    if (!id.ok()) continue;  // not ours (a stray file): neither counted nor evicted
    Entry e{o.size, o.mtime_unix * 1'000'000'000};
    auto old = t.entries.find(*id);
    // Our own access time is finer than the file's mtime; another process's reads are
    // invisible to us, so their chunks age by mtime alone (documented).
    if (old != t.entries.end()) e.last_access = std::max(e.last_access, old->second.last_access);
    fresh[*id] = e;
    used += e.bytes;
  }
  // Chunks this process wrote while the listing ran may be missing from it.
  for (const auto& [id, e] : t.entries) {
    if (e.last_access >= started && fresh.emplace(id, e).second) used += e.bytes;
  }
  t.entries = std::move(fresh);
  t.used = used;
  t.used_gauge->Set(static_cast<double>(used));
  return Status::Ok();
}

bool ChunkStore::HasCopyBelow(int tier, const ChunkId& id) {
  const std::string key = ChunkKey(id);
  for (size_t j = static_cast<size_t>(tier) + 1; j < tiers_.size(); ++j) {
    // The copy of record may only move down to another durable tier.
    if (tiers_[tier]->opt.durable && !tiers_[j]->opt.durable) continue;
    if (tiers_[j]->store->Head(key).ok()) return true;
  }
  return false;
}

Status ChunkStore::MakeRoom(int tier, uint64_t incoming) {
  Tier& t = *tiers_[tier];
  const uint64_t cap = t.opt.capacity_bytes;
  if (cap == 0) return Status::Ok();
  const auto high = static_cast<uint64_t>(static_cast<double>(cap) * t.opt.high_watermark);
  const auto low = static_cast<uint64_t>(static_cast<double>(cap) * t.opt.low_watermark);
  {
    MutexLock lock(mu_);
    if (t.used + incoming <= high) return Status::Ok();
  }
  if (!t.lock_unavailable.empty()) return PermissionDenied(t.lock_unavailable);
  MutexLock evict(t.evict_mu);
  FileLock file_lock(t.lock_fd);
  if (t.lock_fd >= 0) GANTRY_RETURN_IF_ERROR(ResyncFromListing(tier));
  const uint64_t target = incoming > low ? (incoming > cap ? 0 : cap - incoming) : low - incoming;
  std::vector<std::pair<int64_t, ChunkId>> candidates;
  {
    MutexLock lock(mu_);
    if (t.used + incoming <= high) return Status::Ok();
    for (const auto& [id, e] : t.entries) {
      if (!IsProtected(id)) candidates.emplace_back(e.last_access, id);
    }
  }
  std::sort(candidates.begin(), candidates.end());
  for (const auto& [unused, id] : candidates) {
    {
      MutexLock lock(mu_);
      if (t.used <= target) break;
    }
    if (!HasCopyBelow(tier, id)) continue;
    {
      MutexLock lock(mu_);
      if (IsProtected(id)) continue;  // pinned since we looked
    }
    Status s = t.store->Delete(ChunkKey(id));
    if (!s.ok()) return s.WithContext("chunk store tier '" + t.opt.name + "': evict");
    Forget(tier, id);
    t.evictions->Increment();
  }
  MutexLock lock(mu_);
  if (t.used + incoming > cap) {
    return ResourceExhausted("chunk store tier '" + t.opt.name +
                             "' is full: " + std::to_string(t.used) + " of " + std::to_string(cap) +
                             " bytes used and " + std::to_string(incoming) +
                             " more needed; the rest is pinned or has no copy in a lower "
                             "(durable) tier yet");
  }
  return Status::Ok();
}

Status ChunkStore::EnforceCapacity() {
  for (size_t i = 0; i < tiers_.size(); ++i) {
    GANTRY_RETURN_IF_ERROR(MakeRoom(static_cast<int>(i), 0));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Chunks

Status ChunkStore::WriteToTier(int tier, const ChunkId& id, std::string_view stored) {
  Tier& t = *tiers_[tier];
  GANTRY_RETURN_IF_ERROR(MakeRoom(tier, stored.size()));
  auto start = std::chrono::steady_clock::now();
  Status s = t.store->Put(ChunkKey(id), stored);
  t.put_latency->Observe(SecondsSince(start));
  if (!s.ok()) return s.WithContext("chunk store tier '" + t.opt.name + "'");
  t.bytes_written->Increment(stored.size());
  Touch(tier, id, stored.size());
  return Status::Ok();
}

Result<ChunkId> ChunkStore::PutChunk(std::string_view data) { return PutChunkImpl(data, false); }

Result<ChunkId> ChunkStore::PutChunkImpl(std::string_view data, bool pin) {
  const ChunkId id = HashChunk(data);
  if (pin) Pin(id);
  Encodings enc(data);
  auto stored = [&](int i) {
    const TierOptions& o = tiers_[i]->opt;
    return enc.For(o.codec, o.zstd_level);
  };
  const bool write_back = drain_thread_.joinable();
  if (write_back) {
    bool enqueue = false;
    {
      MutexLock lock(mu_);
      // An empty backlog always admits one chunk, so a chunk larger than the bound still goes.
      while (backlog_bytes_ != 0 &&
             backlog_bytes_ + data.size() > options_.max_drain_backlog_bytes) {
        backlog_cv_.Wait(mu_);
      }
      enqueue = pending_.insert(id).second;
      if (enqueue) {
        backlog_bytes_ += data.size();
        backlog_gauge_->Set(static_cast<double>(backlog_bytes_));
      }
    }
    Status s = WriteToTier(0, id, stored(0));
    {
      MutexLock lock(mu_);
      if (enqueue && s.ok()) {
        drain_queue_.emplace_back(id, data.size());
        drain_cv_.NotifyOne();
      } else if (enqueue) {
        pending_.erase(id);
        backlog_bytes_ -= data.size();
        backlog_gauge_->Set(static_cast<double>(backlog_bytes_));
        backlog_cv_.NotifyAll();
      }
    }
    if (s.ok()) return id;
    if (s.code() != StatusCode::kResourceExhausted) {
      if (pin) Unpin(id);
      return s;
    }
    // The top tier is full of pinned or undrained chunks. Failing the write would turn a busy
    // cache into an outage; write this chunk through to the durable tier instead (slower, and
    // the durable tier's own "is full" error still surfaces).
    tiers_[0]->skipped_full->Increment();
  }
  // Write-through, bottom up: the durable copy exists before any cache copy, so every cache
  // copy is evictable from the moment it appears, and a failed durable write leaves none.
  const int durable = FirstDurableTier();
  const int last = durable >= 0 ? durable : static_cast<int>(tiers_.size()) - 1;
  for (int i = last; i >= (write_back ? 1 : 0); --i) {
    Status s = WriteToTier(i, id, stored(i));
    if (s.ok()) continue;
    // A full cache tier is not an error; anything else (a 403, EIO) is, even in a cache tier.
    if (i < last && s.code() == StatusCode::kResourceExhausted) {
      tiers_[i]->skipped_full->Increment();
      continue;
    }
    if (pin) Unpin(id);
    return s;
  }
  return id;
}

Result<std::string> ChunkStore::GetChunk(const ChunkId& id) {
  const std::string key = ChunkKey(id);
  std::vector<int> bad;
  Status other_error;
  for (size_t i = 0; i < tiers_.size(); ++i) {
    Tier& t = *tiers_[i];
    auto start = std::chrono::steady_clock::now();
    Result<std::string> got = t.store->Get(key);
    t.get_latency->Observe(SecondsSince(start));
    if (!got.ok()) {
      t.misses->Increment();
      if (got.status().code() == StatusCode::kNotFound) {
        Forget(static_cast<int>(i), id);  // evicted by another process, or never here
      } else if (other_error.ok()) {
        other_error = got.status().WithContext("chunk store tier '" + t.opt.name + "'");
      }
      continue;
    }
    t.bytes_read->Increment(got->size());
    Result<std::string> raw = DecodeChunk(*got, id, t.verify);
    if (!raw.ok()) {
      t.misses->Increment();
      t.corrupt->Increment();
      bad.push_back(static_cast<int>(i));
      continue;
    }
    t.hits->Increment();
    Touch(static_cast<int>(i), id, got->size());
    Encodings enc(*raw);
    for (int b : bad) {
      const TierOptions& o = tiers_[b]->opt;
      if (WriteToTier(b, id, enc.For(o.codec, o.zstd_level)).ok()) tiers_[b]->repaired->Increment();
    }
    if (options_.promote_on_read) {
      for (size_t j = 0; j < i; ++j) {
        if (std::find(bad.begin(), bad.end(), static_cast<int>(j)) != bad.end()) continue;
        const TierOptions& o = tiers_[j]->opt;
        // Best effort: a full faster tier just does not get the copy.
        if (WriteToTier(static_cast<int>(j), id, enc.For(o.codec, o.zstd_level)).ok()) {
          promotions_->Increment();
        }
      }
    }
    return std::move(*raw);
  }
  if (!bad.empty()) {
    std::string names;
    for (int b : bad) names += (names.empty() ? "" : ", ") + tiers_[b]->opt.name;
    return DataLoss("corrupt chunk " + id.ToHex() + " in tier " + names +
                    " and no good copy in any other tier");
  }
  if (!other_error.ok()) return other_error;
  return NotFound("chunk " + id.ToHex() + " not found in any tier");
}

void ChunkStore::Pin(const ChunkId& id) {
  MutexLock lock(mu_);
  ++pins_[id];
}

void ChunkStore::Unpin(const ChunkId& id) {
  MutexLock lock(mu_);
  auto it = pins_.find(id);
  if (it != pins_.end() && --it->second == 0) pins_.erase(it);
}

// ---------------------------------------------------------------------------------------------
// Write-back drain

void ChunkStore::DrainLoop() {
  const int durable = FirstDurableTier();
  const int last = durable >= 0 ? durable : static_cast<int>(tiers_.size()) - 1;
  for (;;) {
    std::pair<ChunkId, uint64_t> item;
    {
      MutexLock lock(mu_);
      while (!stopping_ && drain_queue_.empty()) drain_cv_.Wait(mu_);
      if (drain_queue_.empty()) return;  // stopping, and everything accepted is drained
      item = drain_queue_.front();
      drain_queue_.pop_front();
      ++in_flight_;
    }
    const ChunkId& id = item.first;
    Status s;
    Result<std::string> stored = tiers_[0]->store->Get(ChunkKey(id));
    Result<std::string> raw = stored.ok() ? DecodeChunk(*stored, id, tiers_[0]->verify)
                                          : Result<std::string>(stored.status());
    if (!raw.ok()) {
      s = raw.status().WithContext("write-back drain: tier '" + tiers_[0]->opt.name + "'");
    } else {
      Encodings enc(*raw);
      for (int i = last; i >= 1 && s.ok(); --i) {
        const TierOptions& o = tiers_[i]->opt;
        s = WriteToTier(i, id, enc.For(o.codec, o.zstd_level));
        if (!s.ok() && i < last && s.code() == StatusCode::kResourceExhausted) {
          tiers_[i]->skipped_full->Increment();
          s = Status::Ok();
        }
      }
    }
    MutexLock lock(mu_);
    pending_.erase(id);
    backlog_bytes_ -= item.second;
    --in_flight_;
    backlog_gauge_->Set(static_cast<double>(backlog_bytes_));
    if (s.ok()) {
      drained_->Increment();
    } else {
      drain_errors_->Increment();
      if (drain_error_.ok()) drain_error_ = s;
    }
    backlog_cv_.NotifyAll();
  }
}

Status ChunkStore::Flush() {
  MutexLock lock(mu_);
  while (!drain_queue_.empty() || in_flight_ != 0) backlog_cv_.Wait(mu_);
  Status s = drain_error_;
  drain_error_ = Status::Ok();
  return s;
}

Status ChunkStore::WaitDurable(const std::vector<ChunkId>& ids) {
  if (!drain_thread_.joinable()) return Status::Ok();  // write-through: durable on return
  {
    MutexLock lock(mu_);
    // A loop, not a lambda, around pending_: the analysis checks loops (see CondVar).
    for (;;) {
      bool waiting = false;
      for (const ChunkId& id : ids) waiting = waiting || pending_.count(id) > 0;
      if (!waiting) break;
      backlog_cv_.Wait(mu_);
    }
  }
  // A failed drain leaves the chunk only in the top tier: the manifest must not go durable.
  const int durable = FirstDurableTier();
  if (durable <= 0) return Status::Ok();
  for (const ChunkId& id : ids) {
    if (!tiers_[durable]->store->Head(ChunkKey(id)).ok()) {
      return IoError("chunk " + id.ToHex() + " did not reach durable tier '" +
                     tiers_[durable]->opt.name + "' (write-back drain failed)");
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Per-tier calls

Status ChunkStore::PutChunkToTier(int tier, const ChunkId& id, std::string_view raw) {
  Tier& t = *tiers_[tier];
  if (t.opt.codec != Codec::kNone)
    return WriteToTier(tier, id, EncodeChunkWithId(raw, id, t.opt.codec, t.opt.zstd_level));
  // Raw: the header and the caller's bytes go to the store as two parts, never joined.
  const std::string header = RawChunkHeader(id, raw.size());
  GANTRY_RETURN_IF_ERROR(MakeRoom(tier, header.size() + raw.size()));
  const std::string_view parts[] = {header, raw};
  auto start = std::chrono::steady_clock::now();
  Status s = t.store->PutParts(ChunkKey(id), parts, PutOptions{});
  t.put_latency->Observe(SecondsSince(start));
  if (!s.ok()) return s.WithContext("chunk store tier '" + t.opt.name + "'");
  t.bytes_written->Increment(header.size() + raw.size());
  Touch(tier, id, header.size() + raw.size());
  return Status::Ok();
}

Result<std::string> ChunkStore::GetChunkFromTier(int tier, const ChunkId& id) {
  Tier& t = *tiers_[tier];
  auto start = std::chrono::steady_clock::now();
  Result<std::string> got = t.store->Get(ChunkKey(id));
  t.get_latency->Observe(SecondsSince(start));
  if (!got.ok()) {
    t.misses->Increment();
    return got.status().WithContext("chunk store tier '" + t.opt.name + "'");
  }
  t.bytes_read->Increment(got->size());
  Result<std::string> raw = DecodeChunk(*got, id, t.verify);
  if (!raw.ok()) {
    t.corrupt->Increment();
    return raw.status().WithContext("chunk store tier '" + t.opt.name + "'");
  }
  t.hits->Increment();
  return raw;
}

Status ChunkStore::CopyChunk(int from, int to, const ChunkId& id) {
  Tier& src = *tiers_[from];
  Tier& dst = *tiers_[to];
  const std::string key = ChunkKey(id);
  Result<std::string> stored = src.store->Get(key);
  if (!stored.ok()) {
    return stored.status().WithContext("copy chunk from tier '" + src.opt.name + "'");
  }
  src.bytes_read->Increment(stored->size());
  Result<ChunkHeader> h = ParseChunkHeader(*stored);
  if (h.ok() && h->codec == dst.opt.codec && h->codec == Codec::kNone) {
    // Same encoding: verify in place and store the bytes as they are (no decode, no copy).
    Result<uint64_t> n = DecodedLength(*stored, id);
    if (!n.ok() || HashChunk(std::string_view(*stored).substr(kChunkHeaderSize)) != id) {
      src.corrupt->Increment();
      return DataLoss("copy chunk to tier '" + dst.opt.name + "': the copy of chunk " + id.ToHex() +
                      " in tier '" + src.opt.name + "' is corrupt");
    }
    return WriteToTier(to, id, *stored);
  }
  Result<std::string> raw = DecodeChunk(*stored, id);
  if (!raw.ok()) {
    src.corrupt->Increment();
    return raw.status().WithContext("copy chunk to tier '" + dst.opt.name + "' from tier '" +
                                    src.opt.name + "'");
  }
  return WriteToTier(to, id, EncodeChunkWithId(*raw, id, dst.opt.codec, dst.opt.zstd_level));
}

Status ChunkStore::HasDurableCopy(const ChunkId& id) {
  Status last = NotFound("chunk " + id.ToHex() + ": no durable tier");
  for (const auto& t : tiers_) {
    if (!t->opt.durable) continue;
    Result<ObjectInfo> h = t->store->Head(ChunkKey(id));
    if (h.ok()) return Status::Ok();
    last = h.status().WithContext("chunk " + id.ToHex() + " in durable tier '" + t->opt.name + "'");
  }
  return last;
}

Status ChunkStore::DropCopy(int tier, const ChunkId& id) {
  Tier& t = *tiers_[tier];
  if (!t.lock_unavailable.empty()) return PermissionDenied(t.lock_unavailable);
  MutexLock evict(t.evict_mu);
  FileLock file_lock(t.lock_fd);
  // The proof: a durable tier below this one holds a copy (never this tier's own copy: tiers
  // do not overlap, checked at Open).
  bool proven = false;
  for (size_t j = static_cast<size_t>(tier) + 1; j < tiers_.size() && !proven; ++j) {
    proven = tiers_[j]->opt.durable && tiers_[j]->store->Head(ChunkKey(id)).ok();
  }
  if (!proven) {
    return FailedPrecondition("chunk " + id.ToHex() + " in tier '" + t.opt.name +
                              "': no durable copy below it; not dropped");
  }
  Status s;
  {
    // The pin check and the delete are one step: a writer pins a chunk before writing it, so
    // it either sees its pin refuse the drop or writes after the delete.
    MutexLock lock(mu_);
    if (IsProtected(id)) {
      return FailedPrecondition("chunk " + id.ToHex() + " is pinned; not dropped");
    }
    s = t.store->Delete(ChunkKey(id));
  }
  if (!s.ok() && s.code() != StatusCode::kNotFound) {
    return s.WithContext("chunk store tier '" + t.opt.name + "': drop");
  }
  Forget(tier, id);
  return Status::Ok();
}

Result<std::vector<ObjectInfo>> ChunkStore::ListChunks(int tier) {
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects,
                          tiers_[tier]->store->ListAll(kChunkPrefix));
  std::erase_if(objects, [](const ObjectInfo& o) { return !ChunkIdFromKey(o.key).ok(); });
  return objects;
}

Result<ChunkStore::TierContents> ChunkStore::ListTierContents(int tier) {
  if (tier < 0 || tier >= static_cast<int>(tiers_.size())) {
    return InvalidArgument("tier " + std::to_string(tier) + " out of range");
  }
  TierContents out;
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> chunks, ListChunks(tier));
  for (const ObjectInfo& o : chunks) {
    ++out.chunks;
    out.chunk_bytes += o.size;
  }
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> manifests,
                          tiers_[tier]->store->ListAll(kManifestPrefix));
  out.blob_manifests = manifests.size();
  return out;
}

Result<std::unique_ptr<ChunkStore::ChunkReader>> ChunkStore::NewReader() {
  std::unique_ptr<ChunkReader> r(new ChunkReader(*this));
  auto add = [&](Tier& t, ChunkSource kind) {
    auto src = std::make_unique<ChunkReader::Source>();
    src->name = std::string(kind == ChunkSource::kCache ? "cache" : "durable") + " tier '" +
                t.opt.name + "' (" + t.store->url() + ")";
    src->store = t.store.get();
    src->kind = kind;
    src->raw_copies = t.opt.codec == Codec::kNone;
    src->verify = t.verify;
    r->sources_.push_back(std::move(src));
  };
  for (auto& t : tiers_) {
    if (!t->opt.durable) add(*t, ChunkSource::kCache);
  }
  for (const std::string& url : options_.peers) {
    StoreOptions so = options_.store_options;
    so.request_timeout_ms = options_.peer_timeout_ms;
    so.connect_timeout_ms = std::min(options_.peer_timeout_ms, 2000);
    so.max_attempts = 1;
    Result<std::unique_ptr<ObjectStore>> peer = OpenObjectStore(url, so);
    if (!peer.ok()) return peer.status().WithContext("peer " + url);
    auto src = std::make_unique<ChunkReader::Source>();
    src->name = "peer " + url;
    src->owned = std::move(*peer);
    src->store = src->owned.get();
    src->kind = ChunkSource::kPeer;
    r->sources_.push_back(std::move(src));
  }
  for (auto& t : tiers_) {
    if (t->opt.durable) add(*t, ChunkSource::kDurable);
  }
  return r;
}

namespace {

// A whole raw chunk read straight into `dst`: its header into a small buffer, its payload into
// the destination, then verified in place. nullopt: the stored chunk is compressed or does not
// describe this chunk; the general path decodes it (or reports what is wrong).
std::optional<Status> ReadWholeRawChunk(ObjectStore& store, const std::string& key,
                                        const ChunkId& id, uint64_t size, char* dst) {
  char header[kChunkHeaderSize];
  const std::span<char> parts[] = {std::span<char>(header, sizeof header),
                                   std::span<char>(dst, size)};
  Result<uint64_t> n = store.GetParts(key, 0, parts);
  if (!n.ok()) return n.status();
  if (*n < kChunkHeaderSize) return std::nullopt;
  Result<ChunkHeader> h = ParseChunkHeader(std::string_view(header, kChunkHeaderSize));
  if (!h.ok() || h->codec != Codec::kNone || h->raw_length != size || h->checksum != id) {
    return std::nullopt;
  }
  if (*n != kChunkHeaderSize + size || HashChunk(std::string_view(dst, size)) != id) {
    return DataLoss("corrupt chunk " + id.ToHex() + ": content does not match its id");
  }
  return Status::Ok();
}

}  // namespace

Result<ChunkSource> ChunkStore::ChunkReader::ReadInto(const ChunkId& id, uint64_t size,
                                                      std::span<const ChunkCopy> copies,
                                                      uint64_t* corrupt) {
  const std::string key = ChunkKey(id);
  const bool whole = copies.size() == 1 && copies[0].src_offset == 0 && copies[0].length == size;
  std::string why;
  bool damaged = false;
  for (auto& src : sources_) {
    if (src->dead.load()) continue;
    // A peer that fails for anything but a missing chunk, or serves garbage, is dropped.
    auto failed = [&](const Status& s) {
      if (s.code() == StatusCode::kDataLoss) {
        damaged = true;
        if (corrupt != nullptr) ++*corrupt;
      }
      why += "; " + src->name + ": " + s.message();
      if (src->kind == ChunkSource::kPeer && s.code() != StatusCode::kNotFound) {
        src->dead.store(true);
      }
    };
    std::optional<Status> direct;
    if (whole && src->raw_copies)
      direct = ReadWholeRawChunk(*src->store, key, id, size, copies[0].dst);
    if (direct.has_value()) {
      if (!direct->ok()) {
        failed(*direct);
        continue;
      }
      return src->kind;
    }
    Result<std::string> stored = src->store->Get(key);
    if (!stored.ok()) {
      failed(stored.status());
      continue;
    }
    Status s;
    if (whole) {
      s = DecodeChunkInto(*stored, id, copies[0].dst, size);
    } else {
      Result<std::string> raw = DecodeChunk(*stored, id);
      if (raw.ok() && raw->size() != size) {
        raw = DataLoss("corrupt chunk " + id.ToHex() + ": size differs from the manifest");
      }
      if (raw.ok()) {
        for (const ChunkCopy& c : copies) std::memcpy(c.dst, raw->data() + c.src_offset, c.length);
      }
      s = raw.status();
    }
    if (!s.ok()) {
      failed(s.code() == StatusCode::kDataLoss ? s : DataLoss(s.message()));
      continue;
    }
    return src->kind;
  }
  const std::string what = "chunk " + id.ToHex() + " is missing or corrupt in every source" + why;
  return damaged ? DataLoss(what) : NotFound(what);
}

// ---------------------------------------------------------------------------------------------
// Blobs

ChunkStore::BlobWriter::BlobWriter(ChunkStore& store, std::string name) : store_(store) {
  manifest_.name = std::move(name);
  manifest_.chunk_size = store.options_.chunk_size;
}

ChunkStore::BlobWriter::~BlobWriter() {
  for (const ChunkId& id : pinned_) store_.Unpin(id);
}

Status ChunkStore::BlobWriter::WriteChunk(std::string_view data) {
  GANTRY_ASSIGN_OR_RETURN(ChunkId id, store_.PutChunkImpl(data, /*pin=*/true));
  pinned_.push_back(id);
  manifest_.chunks.push_back({id, data.size()});
  manifest_.size += data.size();
  return Status::Ok();
}

Status ChunkStore::BlobWriter::Append(std::string_view data) {
  if (committed_) return FailedPrecondition("blob '" + manifest_.name + "': already committed");
  const uint64_t cs = manifest_.chunk_size;
  while (!data.empty()) {
    if (pending_.empty() && data.size() >= cs) {
      GANTRY_RETURN_IF_ERROR(WriteChunk(data.substr(0, cs)));
      data.remove_prefix(cs);
      continue;
    }
    const size_t take = std::min<uint64_t>(cs - pending_.size(), data.size());
    pending_.append(data.substr(0, take));
    data.remove_prefix(take);
    if (pending_.size() == cs) {
      GANTRY_RETURN_IF_ERROR(WriteChunk(pending_));
      pending_.clear();
    }
  }
  return Status::Ok();
}

Result<Manifest> ChunkStore::BlobWriter::Commit() {
  if (committed_) return FailedPrecondition("blob '" + manifest_.name + "': already committed");
  if (!pending_.empty()) {
    GANTRY_RETURN_IF_ERROR(WriteChunk(pending_));
    pending_.clear();
  }
  // Chunks before manifest, always: a manifest never names a chunk that is not durable.
  GANTRY_RETURN_IF_ERROR(store_.WaitDurable(pinned_));
  const int mt = store_.ManifestTier();
  Status s = store_.tiers_[mt]->store->Put(std::string(kManifestPrefix) + manifest_.name,
                                           manifest_.ToJson());
  if (!s.ok()) return s.WithContext("blob '" + manifest_.name + "': write manifest");
  committed_ = true;
  for (const ChunkId& id : pinned_) store_.Unpin(id);
  pinned_.clear();
  return manifest_;
}

Result<std::unique_ptr<ChunkStore::BlobWriter>> ChunkStore::NewBlobWriter(std::string_view name) {
  Status valid = ValidateKey(name);
  if (!valid.ok()) return InvalidArgument("blob name: " + valid.message());
  return std::unique_ptr<BlobWriter>(new BlobWriter(*this, std::string(name)));
}

Result<Manifest> ChunkStore::PutBlob(std::string_view name, std::string_view data) {
  GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<BlobWriter> w, NewBlobWriter(name));
  GANTRY_RETURN_IF_ERROR(w->Append(data));
  return w->Commit();
}

Result<Manifest> ChunkStore::GetManifest(std::string_view name) {
  Status valid = ValidateKey(name);
  if (!valid.ok()) return InvalidArgument("blob name: " + valid.message());
  const std::string key = std::string(kManifestPrefix) + std::string(name);
  Result<std::string> json = tiers_[ManifestTier()]->store->Get(key);
  if (!json.ok()) return json.status().WithContext("blob '" + std::string(name) + "'");
  return Manifest::FromJson(*json, key);
}

Result<std::string> ChunkStore::GetBlob(std::string_view name) {
  GANTRY_ASSIGN_OR_RETURN(Manifest m, GetManifest(name));
  std::string out;
  out.reserve(m.size);
  for (const ManifestChunk& c : m.chunks) {
    PinGuard pin(*this, c.id);
    Result<std::string> data = GetChunk(c.id);
    if (!data.ok()) return data.status().WithContext("blob '" + m.name + "'");
    if (data->size() != c.size) {
      return DataLoss("blob '" + m.name + "': chunk " + c.id.ToHex() + " has " +
                      std::to_string(data->size()) + " bytes, manifest says " +
                      std::to_string(c.size));
    }
    out += *data;
  }
  return out;
}

Result<std::vector<std::string>> ChunkStore::ListBlobs() {
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects,
                          tiers_[ManifestTier()]->store->ListAll(kManifestPrefix));
  std::vector<std::string> names;
  for (const ObjectInfo& o : objects) names.push_back(o.key.substr(kManifestPrefix.size()));
  return names;
}

Status ChunkStore::DeleteBlob(std::string_view name) {
  Status valid = ValidateKey(name);
  if (!valid.ok()) return InvalidArgument("blob name: " + valid.message());
  return tiers_[ManifestTier()]->store->Delete(std::string(kManifestPrefix) + std::string(name));
}

// ---------------------------------------------------------------------------------------------
// GC and verification

Status ChunkStore::DeclareRootKind(std::string_view kind) {
  if (kind.empty() || kind.find('/') != std::string_view::npos) {
    return InvalidArgument("root kind '" + std::string(kind) + "': want one key segment");
  }
  ObjectStore& ms = *tiers_[ManifestTier()]->store;
  const std::string key = std::string(kRootKindPrefix) + std::string(kind);
  Result<ObjectInfo> h = ms.Head(key);
  if (h.ok()) return Status::Ok();
  if (h.status().code() != StatusCode::kNotFound) return h.status().WithContext("declare roots");
  return ms.Put(key, std::string(kind) + "\n");
}

Result<GcReport> ChunkStore::CollectGarbage() {
  MutexLock gc(gc_mu_);
  GcReport report;
  for (const auto& t : tiers_) {
    if (!t->lock_unavailable.empty()) {
      return PermissionDenied("gc: " + t->lock_unavailable + " (nothing deleted)");
    }
  }
  // Mark. Any unreadable root stops the GC: sweeping with an incomplete mark set would delete
  // live chunks.
  std::unordered_set<ChunkId, ChunkIdHash> live;
  ObjectStore& ms = *tiers_[ManifestTier()]->store;
  // Every kind of root this namespace declares must have a provider here: a process that cannot
  // read a kind's roots cannot tell its live chunks from garbage.
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> declared, ms.ListAll(kRootKindPrefix));
  std::set<std::string> kinds;
  for (const std::string& k : RegisteredRootKinds()) kinds.insert(k);
  for (const ObjectInfo& o : declared) {
    const std::string kind = o.key.substr(kRootKindPrefix.size());
    if (kinds.count(kind) == 0) {
      return FailedPrecondition("gc: " + ms.url() + " holds roots of kind '" + kind +
                                "', which this program cannot read (nothing deleted); collect "
                                "with a program that registers them (gantry)");
    }
  }
  for (const std::string& kind : kinds) {
    std::shared_ptr<RootProvider> provider = FindRootProvider(kind);
    if (provider == nullptr) continue;  // unregistered meanwhile
    Status s = provider->MarkLiveAndWarn(
        ms, [&](const ChunkId& id) { live.insert(id); }, &report.warnings);
    // The other tiers may hold roots of their own (a checkpoint save not yet durable keeps its
    // record in the node-local tier): their chunks are live too.
    for (size_t i = 0; i < tiers_.size() && s.ok(); ++i) {
      if (static_cast<int>(i) == ManifestTier()) continue;
      s = provider->MarkLive(*tiers_[i]->store, [&](const ChunkId& id) { live.insert(id); });
    }
    if (!s.ok()) return s.WithContext("gc: roots of kind '" + kind + "' (nothing deleted)");
    report.kinds.push_back(kind);
  }
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> manifests, ms.ListAll(kManifestPrefix));
  for (const ObjectInfo& o : manifests) {
    Result<std::string> json = ms.Get(o.key);
    if (!json.ok()) {
      if (json.status().code() == StatusCode::kNotFound) continue;  // deleted meanwhile
      return json.status().WithContext("gc: read manifest");
    }
    Result<Manifest> m = Manifest::FromJson(*json, o.key);
    if (!m.ok()) return m.status().WithContext("gc (nothing deleted)");
    ++report.manifests;
    for (const ManifestChunk& c : m->chunks) live.insert(c.id);
  }
  report.referenced_chunks = live.size();
  // Sweep, one tier at a time under its lock (other processes' eviction and GC wait).
  const int64_t now = clock_->Now();
  const int64_t grace = options_.gc_grace_seconds;
  for (size_t i = 0; i < tiers_.size(); ++i) {
    Tier& t = *tiers_[i];
    MutexLock evict(t.evict_mu);
    FileLock file_lock(t.lock_fd);
    GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, t.store->ListAll(kChunkPrefix));
    for (const ObjectInfo& o : objects) {
      Result<ChunkId> id = ChunkIdFromKey(o.key);
      if (!id.ok() || live.count(*id) > 0) continue;
      {
        MutexLock lock(mu_);
        if (IsProtected(*id)) {
          ++report.kept_pinned;
          continue;
        }
      }
      // An unknown mtime counts as young: never guess in the direction that loses data.
      if (grace > 0 && (o.mtime_unix == 0 || o.mtime_unix > now - grace)) {
        ++report.kept_young;
        continue;
      }
      Status s = t.store->Delete(o.key);
      if (!s.ok()) return s.WithContext("gc: tier '" + t.opt.name + "'");
      Forget(static_cast<int>(i), *id);
      ++report.deleted_chunks;
      report.deleted_bytes += o.size;
    }
  }
  return report;
}

Result<VerifyReport> ChunkStore::Verify(bool repair) {
  VerifyReport report;
  // A chunk a blob needs and no tier holds is damage too: the blob can no longer be read.
  {
    ObjectStore& ms = *tiers_[ManifestTier()]->store;
    GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> manifests, ms.ListAll(kManifestPrefix));
    std::unordered_set<ChunkId, ChunkIdHash> seen;
    for (const ObjectInfo& o : manifests) {
      Result<std::string> json = ms.Get(o.key);
      if (!json.ok() && json.status().code() == StatusCode::kNotFound) continue;
      Result<Manifest> m =
          json.ok() ? Manifest::FromJson(*json, o.key) : Result<Manifest>(json.status());
      if (!m.ok()) {
        report.errors.push_back(m.status().ToString());
        ++report.missing;  // an unreadable manifest loses its blob as surely
        continue;
      }
      for (const ManifestChunk& c : m->chunks) {
        if (!seen.insert(c.id).second) continue;
        bool found = false;
        for (size_t i = 0; i < tiers_.size() && !found; ++i) {
          found = tiers_[i]->store->Head(ChunkKey(c.id)).ok();
        }
        if (!found) {
          ++report.missing;
          report.errors.push_back("blob '" + m->name + "': chunk " + c.id.ToHex() +
                                  " is missing from every tier");
        }
      }
    }
  }
  for (size_t i = 0; i < tiers_.size(); ++i) {
    Tier& t = *tiers_[i];
    GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, t.store->ListAll(kChunkPrefix));
    for (const ObjectInfo& o : objects) {
      Result<ChunkId> id = ChunkIdFromKey(o.key);
      if (!id.ok()) continue;
      Result<std::string> stored = t.store->Get(o.key);
      if (!stored.ok() && stored.status().code() == StatusCode::kNotFound) continue;
      if (!stored.ok()) {  // unreadable is not corrupt: say so, and do not "repair" it
        report.errors.push_back(stored.status().ToString());
        continue;
      }
      ++report.checked;
      if (DecodeChunk(*stored, *id).ok()) continue;
      ++report.corrupt;
      t.corrupt->Increment();
      const std::string what = "chunk " + id->ToHex() + " in tier '" + t.opt.name + "'";
      if (!repair) {
        report.errors.push_back("corrupt " + what);
        continue;
      }
      std::optional<std::string> good;
      for (size_t j = 0; j < tiers_.size() && !good; ++j) {
        if (j == i) continue;
        Result<std::string> other = tiers_[j]->store->Get(o.key);
        if (!other.ok()) continue;
        Result<std::string> raw = DecodeChunk(*other, *id);
        if (raw.ok()) good = std::move(*raw);
      }
      if (!good) {
        report.errors.push_back("corrupt " + what + ": no good copy in any other tier");
        continue;
      }
      Status s =
          WriteToTier(static_cast<int>(i), *id, EncodeChunk(*good, t.opt.codec, t.opt.zstd_level));
      if (!s.ok()) {
        report.errors.push_back("corrupt " + what + ": repair failed: " + s.ToString());
        continue;
      }
      ++report.repaired;
      t.repaired->Increment();
    }
  }
  return report;
}

ChunkStoreStats ChunkStore::Stats() const {
  ChunkStoreStats s;
  MutexLock lock(mu_);
  for (const auto& t : tiers_) {
    TierStats ts;
    ts.name = t->opt.name;
    ts.durable = t->opt.durable;
    ts.capacity_bytes = t->opt.capacity_bytes;
    ts.used_bytes = t->used;
    ts.chunks = t->entries.size();
    ts.hits = t->hits->value();
    ts.misses = t->misses->value();
    ts.bytes_read = t->bytes_read->value();
    ts.bytes_written = t->bytes_written->value();
    ts.evictions = t->evictions->value();
    ts.corrupt = t->corrupt->value();
    ts.repaired = t->repaired->value();
    s.tiers.push_back(std::move(ts));
  }
  s.drain_backlog_bytes = backlog_bytes_;
  s.drained_chunks = drained_->value();
  s.promotions = promotions_->value();
  return s;
}

}  // namespace gantry
