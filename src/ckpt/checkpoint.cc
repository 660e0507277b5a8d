#include "gantry/ckpt/checkpoint.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "ckpt/buffer_pool.h"
#include "gantry/cache/chunk_store.h"
#include "gantry/common/thread_pool.h"
#include "gantry/storage/posix_store.h"

namespace gantry::ckpt {

using Clock = std::chrono::steady_clock;

namespace {

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t NowUnix() { return static_cast<int64_t>(std::time(nullptr)); }

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// What launchers already give every rank of one launch (EngineOptions::run_id).
std::string DefaultRunId() {
  if (std::string v = Env("GANTRY_RUN_ID"); !v.empty()) return v;
  if (std::string v = Env("TORCHELASTIC_RUN_ID"); !v.empty()) return "torchelastic:" + v;
  if (std::string v = Env("SLURM_JOB_ID"); !v.empty()) {
    const std::string restart = Env("SLURM_RESTART_COUNT");
    return "slurm:" + v + (restart.empty() ? "" : "." + restart);
  }
  return "";
}

// Parses "ckpt/<job>/<12 digits>/<rest>" into the step and rest; false for other keys.
bool ParseStepKey(std::string_view key, std::string_view prefix, int64_t* step,
                  std::string_view* rest) {
  if (key.substr(0, prefix.size()) != prefix) return false;
  key.remove_prefix(prefix.size());
  size_t slash = key.find('/');
  if (slash != 12) return false;
  int64_t v = 0;
  for (char c : key.substr(0, 12)) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *step = v;
  *rest = key.substr(13);
  return true;
}

// Polls `ready` with growing sleeps until it returns true, an error, or the deadline passes.
Result<bool> PollUntil(const std::function<Result<bool>()>& ready, int64_t timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  int sleep_ms = 10;
  for (;;) {
    GANTRY_ASSIGN_OR_RETURN(bool done, ready());
    if (done) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    sleep_ms = std::min(sleep_ms * 2, 500);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// SaveHandle

bool SaveHandle::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !error_.ok() || reached_ >= static_cast<int>(level_);
}

Status SaveHandle::Wait() { return WaitFor(level_); }

Status SaveHandle::WaitFor(Durability level) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !error_.ok() || reached_ >= static_cast<int>(level); });
  return reached_ >= static_cast<int>(level) ? Status::Ok() : error_;
}

SaveStats SaveHandle::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void SaveHandle::Reach(Durability level) {
  std::lock_guard<std::mutex> lock(mu_);
  reached_ = std::max(reached_, static_cast<int>(level));
  cv_.notify_all();
}

void SaveHandle::Fail(Status s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.ok()) {
    error_ = s.WithContext("checkpoint step " + std::to_string(step_));
  }
  cv_.notify_all();
}

Result<Durability> ParseDurability(std::string_view name) {
  if (name == "local") return Durability::kLocal;
  if (name == "durable") return Durability::kDurable;
  if (name == "committed") return Durability::kCommitted;
  return InvalidArgument("durability '" + std::string(name) +
                         "': expected local, durable or committed");
}

// ---------------------------------------------------------------------------------------------
// Engine internals

namespace {

// One chunk write that later chunks with the same content wait for instead of rewriting.
struct ChunkWrite {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  void Finish(Status s) {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    status = std::move(s);
    cv.notify_all();
  }
  Status Wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    return status;
  }
};

struct Piece {
  size_t tensor = 0;
  size_t chunk = 0;
  const char* src = nullptr;
  HostBufferPool::Buffer* buffer = nullptr;
  char* data = nullptr;
  uint64_t size = 0;
};

}  // namespace

struct SaveJob {
  std::shared_ptr<SaveHandle> handle;
  SaveOptions options;
  CheckpointManifest part;
  std::vector<Piece> pieces;
  Clock::time_point start;

  std::mutex mu;
  std::condition_variable cv;
  size_t local_left = 0;                              // guarded by mu
  size_t durable_left = 0;                            // guarded by mu
  Status error;                                       // guarded by mu
  std::vector<std::shared_ptr<ChunkWrite>> borrowed;  // guarded by mu
  // Chunks in the local tier waiting for the save to be wholly local before draining.
  std::vector<std::pair<ChunkId, std::shared_ptr<ChunkWrite>>> to_drain;  // guarded by mu
  uint64_t chunks_written = 0;                                            // guarded by mu
  uint64_t bytes_written = 0;                                             // guarded by mu
  std::vector<ChunkId> written;  // chunks this save made durable; guarded by mu
  std::vector<ChunkId> reused;   // chunks skipped as already durable; guarded by mu

  void RecordError(const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.ok()) error = s;
    cv.notify_all();
  }
};

struct CheckpointEngine::Impl {
  CheckpointEngine* engine;
  std::shared_ptr<ObjectStore> local;  // may be null
  std::vector<std::string> peer_urls;
  std::unique_ptr<HostBufferPool> pool;
  std::unique_ptr<ThreadPool> copy_pool;    // the blocking snapshot copies
  std::unique_ptr<ThreadPool> io_pool;      // hashing and local writes
  std::unique_ptr<ThreadPool> drain_pool;   // durable writes
  std::unique_ptr<ThreadPool> commit_pool;  // one thread: finishes saves in step order

  // One snapshot at a time: concurrent Saves each holding part of the pool while waiting for
  // more would deadlock (their pieces are only handed to the background after the copy).
  std::mutex save_mu;
  std::mutex mu;
  // Chunks known durable, with the newest step that referenced them; pruned to the last save.
  std::unordered_map<ChunkId, int64_t, ChunkIdHash> known;                         // guarded by mu
  std::unordered_map<ChunkId, std::shared_ptr<ChunkWrite>, ChunkIdHash> inflight;  // guarded by mu
  std::deque<std::vector<ChunkId>> local_history;  // chunk ids of recent saves, for keep_local
  int64_t last_step = -1;                          // guarded by mu
  std::vector<std::future<void>> commits;          // guarded by mu
  Status first_error;                              // since the last WaitAll; guarded by mu

  const EngineOptions& opt() const { return engine->options_; }
  ObjectStore& durable() { return *engine->durable_; }

  void ProcessPiece(const std::shared_ptr<SaveJob>& job, size_t index);
  void DrainPiece(const std::shared_ptr<SaveJob>& job, const ChunkId& id,
                  const std::shared_ptr<ChunkWrite>& write, HostBufferPool::Buffer* buffer,
                  const char* data, uint64_t size);
  void PieceLocal(const std::shared_ptr<SaveJob>& job);
  void PieceDurable(const std::shared_ptr<SaveJob>& job);
  void Finish(const std::shared_ptr<SaveJob>& job);
  Status Commit(const std::shared_ptr<SaveJob>& job);
  Status CheckReused(const std::shared_ptr<SaveJob>& job);
  Status WriteLatest(int64_t step);
  Status ApplyRetention(const Retention& r, std::vector<int64_t>* removed);
  void TrimLocal(const std::vector<ChunkId>& ids);
};

void CheckpointEngine::Impl::PieceLocal(const std::shared_ptr<SaveJob>& job) {
  bool reached = false;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    reached = --job->local_left == 0;
  }
  if (reached) {
    {
      std::lock_guard<std::mutex> lock(job->handle->mu_);
      job->handle->stats_.local_seconds = SecondsSince(job->start);
    }
    job->handle->Reach(Durability::kLocal);
    std::vector<std::pair<ChunkId, std::shared_ptr<ChunkWrite>>> drain;
    {
      std::lock_guard<std::mutex> lock(job->mu);
      drain.swap(job->to_drain);
    }
    for (auto& [id, write] : drain) {
      drain_pool->Submit(
          [this, job, id = id, write = write] { DrainPiece(job, id, write, nullptr, nullptr, 0); });
    }
  }
}

void CheckpointEngine::Impl::PieceDurable(const std::shared_ptr<SaveJob>& job) {
  std::lock_guard<std::mutex> lock(job->mu);
  --job->durable_left;
  job->cv.notify_all();
}

void CheckpointEngine::Impl::ProcessPiece(const std::shared_ptr<SaveJob>& job, size_t index) {
  Piece& p = job->pieces[index];
  const ChunkId id = HashChunk(std::string_view(p.data, p.size));
  job->part.tensors[p.tensor].slices[0].chunks[p.chunk] = {id, p.size};
  std::shared_ptr<ChunkWrite> write;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto k = known.find(id);
    if (k != known.end()) {
      k->second = std::max(k->second, job->part.step);
      std::lock_guard<std::mutex> jl(job->mu);
      job->reused.push_back(id);
    } else if (auto f = inflight.find(id); f != inflight.end()) {
      std::lock_guard<std::mutex> jl(job->mu);
      job->borrowed.push_back(f->second);
    } else {
      write = std::make_shared<ChunkWrite>();
      inflight.emplace(id, write);
    }
  }
  if (write == nullptr) {  // deduplicated: nothing to write
    pool->Release(p.buffer);
    PieceLocal(job);
    PieceDurable(job);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(job->mu);
    ++job->chunks_written;
    job->bytes_written += p.size;
  }
  if (local != nullptr) {
    const std::string header = RawChunkHeader(id, p.size);
    const std::string_view parts[] = {header, std::string_view(p.data, p.size)};
    Status s = local->PutParts(ChunkKey(id), parts, PutOptions{});
    if (s.ok()) {
      pool->Release(p.buffer);
      {
        // Drained once the whole save is local: the local tier comes first, so its writes do
        // not share the disk and CPUs with reading chunks back for the durable tier.
        std::lock_guard<std::mutex> lock(job->mu);
        job->to_drain.emplace_back(id, write);
      }
      PieceLocal(job);
      return;
    }
    // A full or failing local disk must not lose the checkpoint: write this chunk straight to
    // the durable tier from the host buffer (slower; the save still fails if that fails too).
  }
  HostBufferPool::Buffer* buffer = p.buffer;
  const char* data = p.data;
  const uint64_t size = p.size;
  drain_pool->Submit([this, job, id, write, buffer, data, size] {
    DrainPiece(job, id, write, buffer, data, size);
    PieceLocal(job);
  });
}

void CheckpointEngine::Impl::DrainPiece(const std::shared_ptr<SaveJob>& job, const ChunkId& id,
                                        const std::shared_ptr<ChunkWrite>& write,
                                        HostBufferPool::Buffer* buffer, const char* data,
                                        uint64_t size) {
  const std::string key = ChunkKey(id);
  Status s;
  if (buffer != nullptr) {
    const std::string_view raw(data, size);
    if (opt().durable_codec == Codec::kNone) {
      const std::string header = RawChunkHeader(id, size);
      const std::string_view parts[] = {header, raw};
      s = durable().PutParts(key, parts, PutOptions{});
    } else {
      s = durable().Put(key, EncodeChunkWithId(raw, id, opt().durable_codec));
    }
    pool->Release(buffer);
  } else {
    Result<std::string> stored = local->Get(key);
    if (!stored.ok()) {
      s = stored.status().WithContext("drain to durable tier: read local copy");
    } else if (opt().durable_codec == Codec::kNone) {
      // The local copy becomes the copy of record: check it first (a rotted local disk must
      // not reach the durable tier, where later saves would trust it).
      Result<uint64_t> n = DecodedLength(*stored, id);
      const bool good =
          n.ok() && HashChunk(std::string_view(*stored).substr(kChunkHeaderSize)) == id;
      s = good ? durable().Put(key, *stored)
               : IoError("drain to durable tier: the local copy of chunk " + id.ToHex() +
                         " is corrupt");
    } else {
      Result<std::string> raw = DecodeChunk(*stored, id);
      s = raw.ok() ? durable().Put(key, EncodeChunkWithId(*raw, id, opt().durable_codec))
                   : raw.status();
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    inflight.erase(id);
    if (s.ok()) known[id] = std::max(known[id], job->part.step);
  }
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(job->mu);
    job->written.push_back(id);
  }
  write->Finish(s);
  if (!s.ok()) job->RecordError(s);
  PieceDurable(job);
}

Status CheckpointEngine::Impl::WriteLatest(int64_t step) {
  const std::string key = LatestKey(opt().job);
  Result<std::string> current = durable().Get(key);
  if (current.ok()) {
    char* end = nullptr;
    long long cur = std::strtoll(current->c_str(), &end, 10);
    if (end != current->c_str() && cur > step) return Status::Ok();  // never move backwards
  }
  return durable().Put(key, std::to_string(step) + "\n");
}

Status CheckpointEngine::Impl::Commit(const std::shared_ptr<SaveJob>& job) {
  const EngineOptions& o = opt();
  const int64_t step = job->part.step;
  // Part: this rank's chunks are all durable (waited for by the caller).
  job->part.created_unix = NowUnix();
  {
    std::lock_guard<std::mutex> lock(job->mu);
    RankRecord& rr = job->part.ranks.front();
    rr.chunks_written = job->chunks_written;
    rr.bytes_written = job->bytes_written;
  }
  GANTRY_RETURN_IF_ERROR(durable().Put(PartKey(o.job, step, o.rank), job->part.ToJson()));
  {
    std::lock_guard<std::mutex> lock(job->handle->mu_);
    job->handle->stats_.durable_seconds = SecondsSince(job->start);
  }
  job->handle->Reach(Durability::kDurable);

  const std::string manifest_key = ManifestKey(o.job, step);
  if (o.rank != 0) {
    // Committed once a manifest of this step from this run exists (one a crashed earlier
    // attempt wrote at the same step does not count).
    GANTRY_ASSIGN_OR_RETURN(bool committed,
                            PollUntil(
                                [&]() -> Result<bool> {
                                  Result<std::string> text = durable().Get(manifest_key);
                                  if (!text.ok()) {
                                    if (text.status().code() == StatusCode::kNotFound) return false;
                                    return text.status();
                                  }
                                  Result<CheckpointManifest> m =
                                      CheckpointManifest::FromJson(*text, manifest_key);
                                  return m.ok() && m->run_id == o.run_id;
                                },
                                o.commit_timeout_ms));
    if (!committed) {
      return Unavailable("rank 0 did not commit within " + std::to_string(o.commit_timeout_ms) +
                         " ms (this rank's part is durable)");
    }
    return Status::Ok();
  }
  // Rank 0: wait for every rank's part of this run, merge, write the manifest, then `latest`.
  // Parts are read as they appear; one from another run (left by a crashed attempt) is read
  // again on later polls, since that rank overwrites it when it gets there.
  const std::string prefix = StepPrefix(o.job, step);
  std::map<std::string, CheckpointManifest> accepted;  // by key
  GANTRY_ASSIGN_OR_RETURN(bool all_parts,
                          PollUntil(
                              [&]() -> Result<bool> {
                                GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objs,
                                                        durable().ListAll(prefix + "rank-"));
                                for (const ObjectInfo& info : objs) {
                                  if (accepted.count(info.key) > 0) continue;
                                  Result<std::string> text = durable().Get(info.key);
                                  if (!text.ok()) {
                                    if (text.status().code() == StatusCode::kNotFound) continue;
                                    return text.status();
                                  }
                                  Result<CheckpointManifest> m =
                                      CheckpointManifest::FromJson(*text, info.key);
                                  if (!m.ok())
                                    continue;  // torn by a writer that died? the rank rewrites it
                                  if (m->run_id == o.run_id)
                                    accepted.emplace(info.key, std::move(*m));
                                }
                                return accepted.size() >= static_cast<size_t>(o.world_size);
                              },
                              o.commit_timeout_ms));
  if (!all_parts) {
    return Unavailable("only " + std::to_string(accepted.size()) + " of " +
                       std::to_string(o.world_size) + " ranks wrote their part within " +
                       std::to_string(o.commit_timeout_ms) + " ms; not committed");
  }
  std::vector<CheckpointManifest> manifests;
  for (auto& [key, m] : accepted) manifests.push_back(std::move(m));
  GANTRY_ASSIGN_OR_RETURN(CheckpointManifest merged, MergeParts(std::move(manifests)));
  merged.tags = job->options.tags;
  merged.metadata_json = job->options.metadata_json;
  GANTRY_RETURN_IF_ERROR(durable().Put(manifest_key, merged.ToJson()));
  GANTRY_RETURN_IF_ERROR(WriteLatest(step));
  if (o.retention.keep_last > 0) {
    std::vector<int64_t> removed;
    Status s = ApplyRetention(o.retention, &removed);
    (void)s;  // retention is housekeeping: the checkpoint is committed whatever happens here
  }
  return Status::Ok();
}

// Chunks skipped because the previous save stored them are referenced by no manifest of this
// save yet: if something removed them meanwhile (`gantry ckpt rm` of that checkpoint, then a GC
// in another process), the part must not point at them. One HEAD each, in parallel.
Status CheckpointEngine::Impl::CheckReused(const std::shared_ptr<SaveJob>& job) {
  std::vector<ChunkId> reused;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    reused = job->reused;
  }
  std::vector<std::future<Status>> heads;
  heads.reserve(reused.size());
  for (const ChunkId& id : reused) {
    heads.push_back(drain_pool->Submit([this, id] {
      Result<ObjectInfo> h = durable().Head(ChunkKey(id));
      return h.ok() ? Status::Ok() : h.status();
    }));
  }
  Status first;
  for (size_t i = 0; i < heads.size(); ++i) {
    Status s = heads[i].get();
    if (s.ok()) continue;
    {
      std::lock_guard<std::mutex> lock(mu);
      known.erase(reused[i]);
    }
    if (first.ok()) {
      first = s.code() == StatusCode::kNotFound
                  ? IoError("chunk " + reused[i].ToHex() +
                            ", shared with the previous checkpoint, is gone from the durable "
                            "tier (removed and collected?); the next save writes it again")
                  : s;
    }
  }
  return first;
}

void CheckpointEngine::Impl::TrimLocal(const std::vector<ChunkId>& ids) {
  if (local == nullptr) return;
  local_history.push_back(ids);
  const size_t keep = static_cast<size_t>(std::max(0, opt().keep_local));
  while (local_history.size() > keep) {
    std::vector<ChunkId> old = std::move(local_history.front());
    local_history.pop_front();
    std::unordered_set<ChunkId, ChunkIdHash> live;
    for (const auto& v : local_history) live.insert(v.begin(), v.end());
    for (const ChunkId& id : old) {
      if (live.count(id) > 0) continue;
      // Under mu: a newer save that is writing this chunk again registers it in `inflight`
      // before its local write, so it is either seen here or written after this delete.
      std::lock_guard<std::mutex> lock(mu);
      if (inflight.count(id) == 0) (void)local->Delete(ChunkKey(id));
    }
  }
}

void CheckpointEngine::Impl::Finish(const std::shared_ptr<SaveJob>& job) {
  Status s;
  {
    std::unique_lock<std::mutex> lock(job->mu);
    job->cv.wait(lock, [&] { return job->durable_left == 0; });
    s = job->error;
    std::lock_guard<std::mutex> hl(job->handle->mu_);
    job->handle->stats_.chunks_written = job->chunks_written;
    job->handle->stats_.bytes_written = job->bytes_written;
  }
  if (s.ok()) {
    std::vector<std::shared_ptr<ChunkWrite>> borrowed;
    {
      std::lock_guard<std::mutex> lock(job->mu);
      borrowed = job->borrowed;
    }
    for (auto& w : borrowed) {
      Status b = w->Wait();
      if (!b.ok() && s.ok()) s = b.WithContext("a chunk this save shares with an earlier one");
    }
  }
  if (s.ok()) s = CheckReused(job);
  if (s.ok()) s = Commit(job);
  std::vector<ChunkId> ids = job->part.ChunkIds();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (s.ok()) {
      // Incremental saves compare against the chunks of the newest committed save only.
      for (auto it = known.begin(); it != known.end();) {
        it = it->second < job->part.step ? known.erase(it) : std::next(it);
      }
    } else {
      // What a failed save wrote is referenced by no checkpoint and may be collected: later
      // saves must write it again rather than point at it.
      std::lock_guard<std::mutex> jl(job->mu);
      for (const ChunkId& id : job->written) {
        auto it = known.find(id);
        if (it != known.end() && it->second == job->part.step) known.erase(it);
      }
    }
  }
  if (s.ok()) {
    TrimLocal(ids);
    {
      std::lock_guard<std::mutex> lock(job->handle->mu_);
      job->handle->stats_.committed_seconds = SecondsSince(job->start);
    }
    job->handle->Reach(Durability::kCommitted);
  } else {
    job->handle->Fail(s);
    std::lock_guard<std::mutex> lock(mu);
    if (first_error.ok())
      first_error = s.WithContext("checkpoint step " + std::to_string(job->part.step));
  }
}

// ---------------------------------------------------------------------------------------------
// CheckpointEngine

CheckpointEngine::CheckpointEngine(EngineOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  impl_->engine = this;
}

CheckpointEngine::~CheckpointEngine() {
  (void)WaitAll();
  // Pools drain their queues in their destructors; commit first (it waits on the others).
  impl_->commit_pool.reset();
  impl_->copy_pool.reset();
  impl_->io_pool.reset();
  impl_->drain_pool.reset();
}

Result<std::unique_ptr<CheckpointEngine>> CheckpointEngine::Open(EngineOptions o) {
  if (o.durable_url.empty() && o.durable_store != nullptr) o.durable_url = o.durable_store->url();
  if (o.durable_url.empty()) {
    return InvalidArgument("checkpoint engine: a durable root (durable_url) is required");
  }
  GANTRY_RETURN_IF_ERROR(ValidateJobName(o.job));
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return InvalidArgument("checkpoint engine: rank " + std::to_string(o.rank) +
                           " outside a world of " + std::to_string(o.world_size));
  }
  if (o.chunk_size < 4096 || o.chunk_size > (1ull << 30)) {
    return InvalidArgument("checkpoint engine: chunk_size must be between 4 KiB and 1 GiB");
  }
  if (o.host_buffer_bytes < o.chunk_size) {
    return InvalidArgument("checkpoint engine: host_buffer_bytes (" +
                           std::to_string(o.host_buffer_bytes) +
                           ") must hold at least one chunk (" + std::to_string(o.chunk_size) + ")");
  }
  o.io_threads = std::max(1, o.io_threads);
  if (o.run_id.empty()) o.run_id = DefaultRunId();
  std::unique_ptr<CheckpointEngine> e(new CheckpointEngine(o));
  if (o.durable_store != nullptr) {
    e->durable_ = o.durable_store;
  } else {
    GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> durable,
                            OpenObjectStore(o.durable_url, o.store_options));
    e->durable_ = std::move(durable);
  }
  Impl& impl = *e->impl_;
  if (o.local_store != nullptr) {
    impl.local = o.local_store;
  } else if (!o.local_url.empty()) {
    const bool is_path = o.local_url.find("://") == std::string::npos;
    if (is_path || o.local_url.starts_with("file://")) {
      PosixStoreOptions po;
      po.sync = o.local_fsync;
      GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<PosixStore> local,
                              OpenPosixStore(is_path ? o.local_url : o.local_url.substr(7), po));
      impl.local = std::move(local);
    } else {
      GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> local,
                              OpenObjectStore(o.local_url, o.store_options));
      impl.local = std::move(local);
    }
  }
  impl.peer_urls = o.peers;
  impl.pool = std::make_unique<HostBufferPool>(o.chunk_size, o.host_buffer_bytes);
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  impl.copy_pool = std::make_unique<ThreadPool>(std::min(cores, 8));
  impl.io_pool = std::make_unique<ThreadPool>(o.io_threads);
  impl.drain_pool = std::make_unique<ThreadPool>(o.io_threads);
  impl.commit_pool = std::make_unique<ThreadPool>(1);

  // Incremental across restarts: the chunks this rank stored in the newest checkpoint.
  Result<int64_t> latest = e->LatestStep();
  if (!latest.ok() && latest.status().code() != StatusCode::kNotFound) {
    return latest.status().WithContext("checkpoint engine: reading the newest checkpoint");
  }
  if (latest.ok()) {
    Result<CheckpointManifest> m = e->ReadManifest(*latest);
    if (m.ok() && m->world_size == o.world_size) {
      for (const TensorRecord& t : m->tensors) {
        for (const SliceRecord& s : t.slices) {
          if (s.rank != o.rank) continue;
          for (const ChunkRef& c : s.chunks) impl.known[c.id] = m->step;
        }
      }
    }
    impl.last_step = *latest;
  }
  return e;
}

Result<std::shared_ptr<SaveHandle>> CheckpointEngine::Save(std::span<const SaveTensor> tensors,
                                                           const SaveOptions& so) {
  const auto start = Clock::now();
  Impl& impl = *impl_;
  const EngineOptions& o = options_;
  if (so.step < 0) return InvalidArgument("save: step must not be negative");
  std::lock_guard<std::mutex> one_snapshot(impl.save_mu);
  {
    std::lock_guard<std::mutex> lock(impl.mu);
    if (so.step <= impl.last_step) {
      return InvalidArgument("save: step " + std::to_string(so.step) +
                             " is not above the previous checkpoint's step " +
                             std::to_string(impl.last_step));
    }
  }
  auto job = std::make_shared<SaveJob>();
  job->options = so;
  job->start = start;
  CheckpointManifest& part = job->part;
  part.kind = CheckpointManifest::Kind::kPart;
  part.job = o.job;
  part.step = so.step;
  part.world_size = o.world_size;
  part.chunk_size = o.chunk_size;
  part.tags = so.tags;
  part.metadata_json = so.metadata_json;
  part.run_id = o.run_id;
  RankRecord rr;
  rr.rank = o.rank;
  rr.structure_json = so.structure_json;

  // Validate and lay out, sorted by name (the manifest's order).
  std::vector<const SaveTensor*> sorted;
  for (const SaveTensor& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const SaveTensor* a, const SaveTensor* b) { return a->name < b->name; });
  for (size_t i = 0; i < sorted.size(); ++i) {
    const SaveTensor& t = *sorted[i];
    const std::string what = "save: tensor '" + t.name + "': ";
    if (t.name.empty()) return InvalidArgument("save: a tensor has an empty name");
    if (i > 0 && sorted[i - 1]->name == t.name) return InvalidArgument(what + "name repeated");
    if (static_cast<size_t>(t.dtype) > static_cast<size_t>(DType::kComplex128)) {
      return InvalidArgument(what + "unknown dtype");
    }
    for (int64_t d : t.global_shape) {
      if (d < 0)
        return InvalidArgument(what + "negative dimension in " + ShapeString(t.global_shape));
    }
    const int64_t global_rows = GlobalRows(t.global_shape);
    const int64_t rows = t.rows < 0 ? global_rows - t.row_offset : t.rows;
    if (t.row_offset < 0 || rows < 0 || t.row_offset + rows > global_rows ||
        (t.global_shape.empty() && (t.row_offset != 0 || rows != 1))) {
      return InvalidArgument(what + "rows " + std::to_string(t.row_offset) + "+" +
                             std::to_string(rows) + " outside the global shape " +
                             ShapeString(t.global_shape));
    }
    SliceRecord s;
    s.rank = o.rank;
    s.row_offset = t.row_offset;
    s.rows = rows;
    s.nbytes = static_cast<uint64_t>(rows) * RowBytes(t.dtype, t.global_shape);
    if (s.nbytes > 0 && t.data == nullptr) return InvalidArgument(what + "no data");
    const uint64_t n_chunks = (s.nbytes + o.chunk_size - 1) / o.chunk_size;
    s.chunks.resize(n_chunks);
    for (uint64_t c = 0; c < n_chunks; ++c) {
      Piece p;
      p.tensor = part.tensors.size();
      p.chunk = c;
      p.src = static_cast<const char*>(t.data) + c * o.chunk_size;
      p.size = std::min(o.chunk_size, s.nbytes - c * o.chunk_size);
      job->pieces.push_back(p);
    }
    rr.bytes_total += s.nbytes;
    rr.chunks_total += n_chunks;
    TensorRecord tr;
    tr.name = t.name;
    tr.dtype = t.dtype;
    tr.global_shape = t.global_shape;
    tr.slices.push_back(std::move(s));
    part.tensors.push_back(std::move(tr));
  }
  part.ranks.push_back(rr);
  job->local_left = job->pieces.size();
  job->durable_left = job->pieces.size();
  job->handle.reset(new SaveHandle(so.step, so.durability));
  {
    std::lock_guard<std::mutex> lock(job->handle->mu_);
    SaveStats& st = job->handle->stats_;
    st.step = so.step;
    st.tensors = part.tensors.size();
    st.bytes_total = rr.bytes_total;
    st.chunks_total = rr.chunks_total;
  }
  {
    std::lock_guard<std::mutex> lock(impl.mu);
    impl.last_step = so.step;
  }

  // The blocking part: copy each chunk into pool memory (small chunks share a buffer), in
  // parallel, handing each to the background as soon as it is copied.
  // When the whole snapshot fits in the pool, background work starts after the copy, so the
  // copy has the CPUs and memory bandwidth to itself and the blocking part is shortest. A
  // larger state is pipelined: pieces are written as they are copied, freeing buffers.
  // (The layout below, simulated: pieces that do not fit a buffer's rest start a new one.)
  uint64_t buffers_needed = 0, fill = 0;
  for (const Piece& p : job->pieces) {
    if (buffers_needed == 0 || fill + p.size > impl.pool->buffer_bytes()) {
      ++buffers_needed;
      fill = 0;
    }
    fill += (p.size + 63) / 64 * 64;
  }
  const bool defer = buffers_needed <= impl.pool->max_buffers();
  std::vector<std::future<void>> copies;
  HostBufferPool::Buffer* current = nullptr;
  uint64_t used = 0;
  constexpr size_t kBatch = 8;  // chunks per copy task
  std::vector<size_t> batch;
  auto flush_batch = [&] {
    if (batch.empty()) return;
    copies.push_back(impl.copy_pool->Submit([&impl, job, defer, b = std::move(batch)] {
      for (size_t i : b) {
        Piece& p = job->pieces[i];
        std::memcpy(p.data, p.src, p.size);
        if (!defer) impl.io_pool->Submit([&impl, job, i] { impl.ProcessPiece(job, i); });
      }
    }));
    batch.clear();
  };
  for (size_t i = 0; i < job->pieces.size(); ++i) {
    Piece& p = job->pieces[i];
    if (current == nullptr || used + p.size > impl.pool->buffer_bytes()) {
      if (current != nullptr) impl.pool->Release(current);  // the filler's reference
      flush_batch();  // a blocking Acquire must not hold back copies already laid out
      current = impl.pool->Acquire();
      used = 0;
    }
    impl.pool->AddRef(current);
    p.buffer = current;
    p.data = current->data + used;
    used += (p.size + 63) / 64 * 64;  // cache-line aligned neighbours
    batch.push_back(i);
    if (batch.size() == kBatch) flush_batch();
  }
  flush_batch();
  if (current != nullptr) impl.pool->Release(current);
  for (auto& f : copies) f.get();
  if (defer) {
    for (size_t i = 0; i < job->pieces.size(); ++i) {
      impl.io_pool->Submit([&impl, job, i] { impl.ProcessPiece(job, i); });
    }
  }
  {
    std::lock_guard<std::mutex> lock(job->handle->mu_);
    job->handle->stats_.blocking_seconds = SecondsSince(start);
  }
  if (job->pieces.empty()) job->handle->Reach(Durability::kLocal);
  std::future<void> commit = impl.commit_pool->Submit([&impl, job] { impl.Finish(job); });
  {
    std::lock_guard<std::mutex> lock(impl.mu);
    impl.commits.push_back(std::move(commit));
  }
  return job->handle;
}

Status CheckpointEngine::WaitAll() {
  std::vector<std::future<void>> commits;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    commits.swap(impl_->commits);
  }
  for (auto& f : commits) f.get();
  std::lock_guard<std::mutex> lock(impl_->mu);
  Status s = impl_->first_error;
  impl_->first_error = Status::Ok();
  return s;
}

// ---------------------------------------------------------------------------------------------
// Listing and reading

Result<std::vector<CheckpointInfo>> CheckpointEngine::List() {
  const std::string prefix = JobPrefix(options_.job);
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, durable_->ListAll(prefix));
  std::map<int64_t, CheckpointInfo> steps;
  for (const ObjectInfo& obj : objects) {
    int64_t step;
    std::string_view rest;
    if (!ParseStepKey(obj.key, prefix, &step, &rest)) continue;
    CheckpointInfo& info = steps[step];
    info.step = step;
    if (rest == "manifest.json") {
      info.committed = true;
    } else if (rest.substr(0, 5) == "rank-") {
      ++info.parts;
      info.created_unix = std::max(info.created_unix, obj.mtime_unix);
    }
  }
  std::vector<CheckpointInfo> out;
  for (auto& [step, info] : steps) {
    if (info.committed) {
      // An unreadable manifest is an error, not an untagged checkpoint: retention would delete
      // a tagged one after one failed GET.
      Result<CheckpointManifest> m = ReadManifest(step);
      if (!m.ok() && m.status().code() != StatusCode::kNotFound) return m.status();
      if (m.ok()) {
        info.world_size = m->world_size;
        info.bytes = m->TotalBytes();
        info.created_unix = m->created_unix;
        info.tags = m->tags;
      } else {
        info.committed = false;  // removed meanwhile
      }
    }
    out.push_back(std::move(info));
  }
  return out;
}

Result<int64_t> CheckpointEngine::LatestStep() {
  Result<std::string> pointer = durable_->Get(LatestKey(options_.job));
  if (pointer.ok()) {
    char* end = nullptr;
    long long step = std::strtoll(pointer->c_str(), &end, 10);
    if (end != pointer->c_str() && step >= 0 &&
        durable_->Head(ManifestKey(options_.job, step)).ok()) {
      return static_cast<int64_t>(step);
    }
  } else if (pointer.status().code() != StatusCode::kNotFound) {
    return pointer.status();
  }
  // No usable pointer (never written, or removed): the newest manifest.
  GANTRY_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> all, List());
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (it->committed) return it->step;
  }
  return NotFound("no committed checkpoint of job '" + options_.job + "' in " + durable_->url());
}

Result<CheckpointManifest> CheckpointEngine::ReadManifest(int64_t step) {
  const std::string key = ManifestKey(options_.job, step);
  Result<std::string> text = durable_->Get(key);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return NotFound("no committed checkpoint at step " + std::to_string(step) + " of job '" +
                      options_.job + "' in " + durable_->url());
    }
    return text.status();
  }
  GANTRY_ASSIGN_OR_RETURN(CheckpointManifest m,
                          CheckpointManifest::FromJson(*text, durable_->url() + "/" + key));
  if (m.kind != CheckpointManifest::Kind::kCheckpoint || m.step != step || m.job != options_.job) {
    return InvalidArgument("checkpoint manifest '" + key + "': names job '" + m.job + "' step " +
                           std::to_string(m.step) + ", not this one");
  }
  return m;
}

// ---------------------------------------------------------------------------------------------
// Restore

namespace {

struct CopyOut {
  uint64_t src_offset;  // within the chunk's raw bytes
  uint64_t length;
  char* dst;
};
struct Fetch {
  ChunkId id;
  uint64_t size = 0;
  std::string what;  // "tensor 'x' rows a-b" for errors
  std::vector<CopyOut> copies;
};

}  // namespace

Status CheckpointEngine::Restore(const CheckpointManifest& m,
                                 std::span<const RestoreTarget> targets, RestoreStats* stats_out,
                                 const ProgressFn& progress) {
  const auto start = Clock::now();
  // Plan: which byte ranges of which chunks land where.
  std::unordered_map<ChunkId, size_t, ChunkIdHash> index;
  std::vector<Fetch> fetches;
  uint64_t total = 0;
  for (const RestoreTarget& t : targets) {
    const std::string what = "restore: tensor '" + t.name + "'";
    const TensorRecord* rec = m.FindTensor(t.name);
    if (rec == nullptr) {
      return NotFound(what + ": not in checkpoint step " + std::to_string(m.step));
    }
    if (rec->dtype != t.dtype) {
      return InvalidArgument(what + ": the checkpoint holds " + DTypeName(rec->dtype) +
                             ", the target is " + DTypeName(t.dtype));
    }
    if (rec->global_shape != t.global_shape) {
      return InvalidArgument(what + ": the checkpoint's shape is " +
                             ShapeString(rec->global_shape) + ", the target's " +
                             ShapeString(t.global_shape));
    }
    const int64_t global_rows = GlobalRows(rec->global_shape);
    const int64_t rows = t.rows < 0 ? global_rows - t.row_offset : t.rows;
    if (t.row_offset < 0 || rows < 0 || t.row_offset + rows > global_rows) {
      return InvalidArgument(what + ": rows " + std::to_string(t.row_offset) + "+" +
                             std::to_string(rows) + " outside the shape " +
                             ShapeString(rec->global_shape));
    }
    const uint64_t row_bytes = RowBytes(rec->dtype, rec->global_shape);
    if (rows > 0 && row_bytes > 0 && t.data == nullptr)
      return InvalidArgument(what + ": no memory");
    const uint64_t want_begin = static_cast<uint64_t>(t.row_offset) * row_bytes;
    const uint64_t want_end = want_begin + static_cast<uint64_t>(rows) * row_bytes;
    total += want_end - want_begin;
    for (const SliceRecord& s : rec->slices) {
      // Byte ranges in global row-major order.
      const uint64_t slice_begin = static_cast<uint64_t>(s.row_offset) * row_bytes;
      uint64_t chunk_begin = slice_begin;
      for (const ChunkRef& c : s.chunks) {
        const uint64_t lo = std::max(chunk_begin, want_begin);
        const uint64_t hi = std::min(chunk_begin + c.size, want_end);
        if (lo < hi) {
          auto [it, fresh] = index.try_emplace(c.id, fetches.size());
          if (fresh) fetches.push_back({c.id, c.size, what, {}});
          fetches[it->second].copies.push_back(
              {lo - chunk_begin, hi - lo, static_cast<char*>(t.data) + (lo - want_begin)});
        }
        chunk_begin += c.size;
      }
    }
  }

  // Sources, fastest first. A peer that fails for anything but a missing chunk is dropped for
  // the rest of this restore, so a hung peer costs one timeout, not one per chunk.
  struct Source {
    std::string name;
    std::shared_ptr<ObjectStore> store;
    enum Kind { kLocal, kPeer, kDurable } kind;
    std::atomic<bool> dead{false};
  };
  std::vector<std::unique_ptr<Source>> sources;
  if (impl_->local != nullptr) {
    sources.push_back(std::make_unique<Source>());
    sources.back()->name = "local " + impl_->local->url();
    sources.back()->store = impl_->local;
    sources.back()->kind = Source::kLocal;
  }
  for (const std::string& url : impl_->peer_urls) {
    StoreOptions so = options_.store_options;
    so.request_timeout_ms = options_.peer_timeout_ms;
    so.connect_timeout_ms = std::min(options_.peer_timeout_ms, 2000);
    so.max_attempts = 1;
    Result<std::unique_ptr<ObjectStore>> peer = OpenObjectStore(url, so);
    if (!peer.ok()) return peer.status().WithContext("restore: peer " + url);
    sources.push_back(std::make_unique<Source>());
    sources.back()->name = "peer " + url;
    sources.back()->store = std::move(*peer);
    sources.back()->kind = Source::kPeer;
  }
  sources.push_back(std::make_unique<Source>());
  sources.back()->name = "durable " + durable_->url();
  sources.back()->store = durable_;
  sources.back()->kind = Source::kDurable;

  // A whole chunk is read straight into the target: its header into a small buffer, its
  // payload into the tensor (GetParts: preadv on a directory tier, the socket on a peer), then
  // verified in place. nullopt: the stored chunk is compressed or damaged, take the general
  // path (which decodes, or reports what is wrong).
  auto read_direct = [](ObjectStore& store, const std::string& key,
                        const Fetch& f) -> std::optional<Status> {
    if (f.copies.size() != 1 || f.copies[0].src_offset != 0 || f.copies[0].length != f.size) {
      return std::nullopt;
    }
    char header[kChunkHeaderSize];
    char* dst = f.copies[0].dst;
    const std::span<char> parts[] = {std::span<char>(header, sizeof header),
                                     std::span<char>(dst, f.size)};
    Result<uint64_t> n = store.GetParts(key, 0, parts);
    if (!n.ok()) return n.status();
    if (*n < kChunkHeaderSize) return std::nullopt;
    Result<ChunkHeader> h = ParseChunkHeader(std::string_view(header, kChunkHeaderSize));
    if (!h.ok() || h->codec != Codec::kNone || h->raw_length != f.size || h->checksum != f.id) {
      return std::nullopt;
    }
    if (*n != kChunkHeaderSize + f.size || HashChunk(std::string_view(dst, f.size)) != f.id) {
      return IoError("corrupt chunk " + f.id.ToHex() + ": content does not match its id");
    }
    return Status::Ok();
  };

  std::atomic<uint64_t> done_bytes{0}, from_local{0}, from_peers{0}, from_durable{0}, corrupt{0};
  std::mutex progress_mu;
  auto fetch_one = [&](Fetch& f) -> Status {
    const std::string key = ChunkKey(f.id);
    std::string why;
    for (auto& src : sources) {
      if (src->dead.load()) continue;
      // Local and peer copies are stored raw; the durable tier's only when it has no codec (a
      // compressed chunk would be read once here and again to decode it).
      const bool raw_copies =
          src->kind != Source::kDurable || options_.durable_codec == Codec::kNone;
      std::optional<Status> direct =
          raw_copies ? read_direct(*src->store, key, f) : std::optional<Status>();
      if (direct.has_value() && !direct->ok()) {
        const bool bad_copy = direct->message().starts_with("corrupt chunk");
        if (bad_copy) ++corrupt;
        why += "; " + src->name + ": " + direct->message();
        // A peer that fails for anything but a missing chunk, or serves garbage, is dropped.
        if (src->kind == Source::kPeer && direct->code() != StatusCode::kNotFound) {
          src->dead.store(true);
        }
        continue;
      }
      Result<std::string> stored =
          direct.has_value() ? Result<std::string>(std::string()) : src->store->Get(key);
      if (!stored.ok()) {
        why += "; " + src->name + ": " + stored.status().message();
        if (src->kind == Source::kPeer && stored.status().code() != StatusCode::kNotFound) {
          src->dead.store(true);
        }
        continue;
      }
      // Whole-chunk copies decode straight into the target; partial ones through a buffer.
      Status s;
      if (direct.has_value()) {
        s = Status::Ok();  // already in place and verified
      } else if (f.copies.size() == 1 && f.copies[0].src_offset == 0 &&
                 f.copies[0].length == f.size) {
        s = DecodeChunkInto(*stored, f.id, f.copies[0].dst, f.size);
      } else {
        Result<std::string> raw = DecodeChunk(*stored, f.id);
        if (raw.ok() && raw->size() != f.size) {
          raw = IoError("corrupt chunk " + f.id.ToHex() + ": size differs from the manifest");
        }
        if (raw.ok()) {
          for (const CopyOut& c : f.copies)
            std::memcpy(c.dst, raw->data() + c.src_offset, c.length);
        }
        s = raw.status();
      }
      if (!s.ok()) {
        ++corrupt;
        why += "; " + src->name + ": " + s.message();
        if (src->kind == Source::kPeer) src->dead.store(true);  // garbage: stop asking it
        continue;
      }
      (src->kind == Source::kLocal  ? from_local
       : src->kind == Source::kPeer ? from_peers
                                    : from_durable)
          .fetch_add(1);
      uint64_t bytes = 0;
      for (const CopyOut& c : f.copies) bytes += c.length;
      const uint64_t now = done_bytes.fetch_add(bytes) + bytes;
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mu);
        progress(now, total);
      }
      return Status::Ok();
    }
    return IoError(f.what + ": chunk " + f.id.ToHex() + " is missing or corrupt in every source" +
                   why);
  };

  // Largest first would not help (chunks are equal-sized); run them in manifest order, many in
  // flight.
  const int threads = std::max(2, options_.io_threads * 2);
  ThreadPool pool(std::min<int>(threads, std::max<size_t>(1, fetches.size())));
  std::vector<std::future<Status>> results;
  results.reserve(fetches.size());
  for (Fetch& f : fetches)
    results.push_back(pool.Submit([&fetch_one, &f] { return fetch_one(f); }));
  Status first;
  for (auto& r : results) {
    Status s = r.get();
    if (!s.ok() && first.ok()) first = s;
  }
  if (stats_out != nullptr) {
    stats_out->bytes = done_bytes.load();
    stats_out->chunks = fetches.size();
    stats_out->from_local = from_local.load();
    stats_out->from_peers = from_peers.load();
    stats_out->from_durable = from_durable.load();
    stats_out->corrupt = corrupt.load();
    stats_out->seconds = SecondsSince(start);
  }
  return first;
}

// ---------------------------------------------------------------------------------------------
// Removal, retention, GC, verification

Status CheckpointEngine::Remove(int64_t step) {
  const std::string prefix = StepPrefix(options_.job, step);
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, durable_->ListAll(prefix));
  if (objects.empty()) {
    return NotFound("no checkpoint at step " + std::to_string(step) + " of job '" + options_.job +
                    "'");
  }
  // The manifest first: from then on the checkpoint does not exist, whatever else happens.
  GANTRY_RETURN_IF_ERROR(durable_->Delete(ManifestKey(options_.job, step)));
  for (const ObjectInfo& obj : objects) GANTRY_RETURN_IF_ERROR(durable_->Delete(obj.key));
  Result<std::string> pointer = durable_->Get(LatestKey(options_.job));
  if (pointer.ok() && std::strtoll(pointer->c_str(), nullptr, 10) == step) {
    GANTRY_RETURN_IF_ERROR(durable_->Delete(LatestKey(options_.job)));
    Result<int64_t> newest = LatestStep();
    if (newest.ok()) {
      GANTRY_RETURN_IF_ERROR(
          durable_->Put(LatestKey(options_.job), std::to_string(*newest) + "\n"));
    }
  }
  return Status::Ok();
}

Status CheckpointEngine::Impl::ApplyRetention(const Retention& r, std::vector<int64_t>* removed) {
  if (r.keep_last <= 0) return Status::Ok();
  GANTRY_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> all, engine->List());
  std::vector<const CheckpointInfo*> committed;
  for (const CheckpointInfo& c : all) {
    if (c.committed) committed.push_back(&c);
  }
  for (size_t i = 0; i < committed.size(); ++i) {
    const CheckpointInfo& c = *committed[i];
    const bool keep = i + static_cast<size_t>(r.keep_last) >= committed.size() ||
                      (r.keep_every > 0 && c.step % r.keep_every == 0) ||
                      (r.keep_tagged && !c.tags.empty());
    if (keep) continue;
    GANTRY_RETURN_IF_ERROR(engine->Remove(c.step));
    removed->push_back(c.step);
  }
  return Status::Ok();
}

Result<CkptGcReport> CheckpointEngine::CollectGarbage(std::optional<Retention> retention) {
  CkptGcReport report;
  GANTRY_RETURN_IF_ERROR(
      impl_->ApplyRetention(retention.value_or(options_.retention), &report.removed_steps));
  const int64_t now = NowUnix();
  const int64_t grace = options_.gc_grace_seconds;
  // Unfinished saves older than the grace period will never commit.
  GANTRY_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> all, List());
  for (const CheckpointInfo& c : all) {
    if (c.committed) continue;
    // Older than the grace period (longer than any commit may wait for the other ranks);
    // an unknown time counts as young.
    const bool stale = c.created_unix != 0 && c.created_unix < now - grace;
    if (stale) {
      GANTRY_RETURN_IF_ERROR(Remove(c.step));
      report.removed_steps.push_back(c.step);
    }
  }
  // Mark: every checkpoint and part of every job under this root, and the chunk store's blob
  // manifests (tiers may be shared with `gantry cache`). An unreadable manifest stops the GC:
  // sweeping with an incomplete mark set would delete live chunks.
  std::unordered_set<ChunkId, ChunkIdHash> live;
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, durable_->ListAll("ckpt/"));
  for (const ObjectInfo& obj : objects) {
    const bool is_manifest = obj.key.size() > 14 && (obj.key.ends_with("/manifest.json") ||
                                                     obj.key.find("/rank-") != std::string::npos);
    if (!is_manifest) continue;
    Result<std::string> text = durable_->Get(obj.key);
    if (!text.ok()) {
      if (text.status().code() == StatusCode::kNotFound) continue;
      return text.status().WithContext("gc (nothing deleted)");
    }
    Result<CheckpointManifest> m = CheckpointManifest::FromJson(*text, obj.key);
    if (!m.ok()) return m.status().WithContext("gc (nothing deleted)");
    for (const ChunkId& id : m->ChunkIds()) live.insert(id);
  }
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> blobs, durable_->ListAll("manifests/"));
  for (const ObjectInfo& obj : blobs) {
    Result<std::string> text = durable_->Get(obj.key);
    if (!text.ok()) {
      if (text.status().code() == StatusCode::kNotFound) continue;
      return text.status().WithContext("gc (nothing deleted)");
    }
    Result<Manifest> m = Manifest::FromJson(*text, obj.key);
    if (!m.ok()) return m.status().WithContext("gc (nothing deleted)");
    for (const ManifestChunk& c : m->chunks) live.insert(c.id);
  }
  {
    // Chunks of saves in flight in this process (not yet in any part).
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (const auto& [id, w] : impl_->inflight) live.insert(id);
    for (const auto& [id, s] : impl_->known) live.insert(id);
  }
  report.referenced_chunks = live.size();
  std::vector<ObjectStore*> tiers = {durable_.get()};
  if (impl_->local != nullptr) tiers.push_back(impl_->local.get());
  for (ObjectStore* tier : tiers) {
    GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> chunks, tier->ListAll(kChunkPrefix));
    for (const ObjectInfo& obj : chunks) {
      Result<ChunkId> id = ChunkIdFromKey(obj.key);
      if (!id.ok() || live.count(*id) > 0) continue;
      if (grace > 0 && (obj.mtime_unix == 0 || obj.mtime_unix > now - grace)) {
        ++report.kept_young;
        continue;
      }
      GANTRY_RETURN_IF_ERROR(tier->Delete(obj.key));
      ++report.deleted_chunks;
      report.deleted_bytes += obj.size;
    }
  }
  return report;
}

Result<VerifyCkptReport> CheckpointEngine::Verify(int64_t step, const ProgressFn& progress) {
  GANTRY_ASSIGN_OR_RETURN(CheckpointManifest m, ReadManifest(step));
  std::unordered_map<ChunkId, uint64_t, ChunkIdHash> sizes;
  uint64_t total = 0;
  for (const TensorRecord& t : m.tensors) {
    for (const SliceRecord& s : t.slices) {
      for (const ChunkRef& c : s.chunks) {
        if (sizes.emplace(c.id, c.size).second) total += c.size;
      }
    }
  }
  VerifyCkptReport report;
  std::mutex mu;
  ThreadPool pool(std::max(2, options_.io_threads));
  std::vector<std::future<void>> work;
  for (const auto& [id, size] : sizes) {
    work.push_back(pool.Submit([&, id = id, size = size] {
      Result<std::string> stored = durable_->Get(ChunkKey(id));
      Status s = stored.status();
      if (stored.ok()) {
        Result<std::string> raw = DecodeChunk(*stored, id);
        s = raw.ok() && raw->size() != size
                ? IoError("corrupt chunk " + id.ToHex() + ": size differs from the manifest")
                : raw.status();
      }
      std::lock_guard<std::mutex> lock(mu);
      ++report.chunks;
      report.bytes += size;
      if (!s.ok()) {
        (s.code() == StatusCode::kNotFound ? report.missing : report.corrupt) += 1;
        report.errors.push_back(s.message());
      }
      if (progress) progress(report.bytes, total);
    }));
  }
  for (auto& w : work) w.get();
  std::sort(report.errors.begin(), report.errors.end());
  return report;
}

}  // namespace gantry::ckpt
