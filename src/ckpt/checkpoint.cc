// The checkpoint engine: save handles, opening an engine over its chunk store, listing and
// reading manifests. The pipeline, the commit protocol, restore and retention live in the files
// named in ckpt/engine.h.
#include "gantry/ckpt/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "ckpt/engine.h"
#include "gantry/ckpt/catalog.h"
#include "gantry/storage/posix_store.h"

namespace gantry::ckpt {

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

namespace {

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

}  // namespace

// ---------------------------------------------------------------------------------------------
// SaveHandle

bool SaveHandle::done() const {
  MutexLock lock(mu_);
  return !error_.ok() || reached_ >= static_cast<int>(level_);
}

Status SaveHandle::Wait() { return WaitFor(level_); }

Status SaveHandle::WaitFor(Durability level) {
  MutexLock lock(mu_);
  while (error_.ok() && reached_ < static_cast<int>(level)) cv_.Wait(mu_);
  return reached_ >= static_cast<int>(level) ? Status::Ok() : error_;
}

SaveStats SaveHandle::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

void SaveHandle::Reach(Durability level) {
  MutexLock lock(mu_);
  reached_ = std::max(reached_, static_cast<int>(level));
  cv_.NotifyAll();
}

void SaveHandle::Fail(Status s) {
  MutexLock lock(mu_);
  if (error_.ok()) {
    error_ = s.WithContext("checkpoint step " + std::to_string(step_));
  }
  cv_.NotifyAll();
}

Result<Durability> ParseDurability(std::string_view name) {
  if (name == "local") return Durability::kLocal;
  if (name == "durable") return Durability::kDurable;
  if (name == "committed") return Durability::kCommitted;
  return InvalidArgument("durability '" + std::string(name) +
                         "': expected local, durable or committed");
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
  impl_->chunks.reset();
}

ChunkStoreOptions CheckpointTiers(std::shared_ptr<ObjectStore> local,
                                  std::shared_ptr<ObjectStore> durable, Codec codec) {
  ChunkStoreOptions co;
  if (local != nullptr) {
    TierOptions t;
    t.name = "local";
    t.url = local->url();
    t.store = std::move(local);
    co.tiers.push_back(std::move(t));
  }
  TierOptions d;
  d.name = "durable";
  d.url = durable->url();
  d.store = std::move(durable);
  d.durable = true;
  d.codec = codec;
  co.tiers.push_back(std::move(d));
  co.promote_on_read = false;
  return co;
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
  impl.clock = o.clock != nullptr ? o.clock : &DefaultClock();
  std::shared_ptr<ObjectStore> local;
  if (o.local_store != nullptr) {
    local = o.local_store;
  } else if (!o.local_url.empty()) {
    const bool is_path = o.local_url.find("://") == std::string::npos;
    if (is_path || o.local_url.starts_with("file://")) {
      PosixStoreOptions po;
      po.sync = o.local_fsync;
      GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<PosixStore> opened,
                              OpenPosixStore(is_path ? o.local_url : o.local_url.substr(7), po));
      local = std::move(opened);
    } else {
      GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> opened,
                              OpenObjectStore(o.local_url, o.store_options));
      local = std::move(opened);
    }
  }
  // Overlapping tiers are refused by the chunk store.
  ChunkStoreOptions co = CheckpointTiers(local, e->durable_, o.durable_codec);
  co.chunk_size = o.chunk_size;
  co.gc_grace_seconds = o.gc_grace_seconds;
  co.peers = o.peers;
  co.peer_timeout_ms = o.peer_timeout_ms;
  co.clock = impl.clock;
  co.store_options = o.store_options;
  Result<std::unique_ptr<ChunkStore>> chunks = ChunkStore::Open(std::move(co));
  if (!chunks.ok()) return chunks.status().WithContext("checkpoint engine");
  impl.chunks = std::move(*chunks);
  impl.local_tier = local != nullptr ? 0 : -1;
  impl.local_store = local;
  impl.durable_tier = impl.chunks->durable_tier();
  RegisterCheckpointRoots();
  impl.pool = std::make_unique<HostBufferPool>(o.chunk_size, o.host_buffer_bytes);
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  impl.copy_pool = std::make_unique<ThreadPool>(std::min(cores, 8));
  impl.io_pool = std::make_unique<ThreadPool>(o.io_threads);
  impl.drain_pool = std::make_unique<ThreadPool>(o.io_threads);
  impl.commit_pool = std::make_unique<ThreadPool>(1);

  // Incremental across restarts: the chunks this rank stored in the newest checkpoint.
  std::vector<std::string> quiet;  // a damaged latest is reported where a restore resolves it
  Result<int64_t> latest = e->LatestStep(&quiet);
  if (!latest.ok() && latest.status().code() != StatusCode::kNotFound) {
    return latest.status().WithContext("checkpoint engine: reading the newest checkpoint");
  }
  if (latest.ok()) {
    Result<CheckpointManifest> m = e->ReadManifest(*latest);
    MutexLock lock(impl.mu);  // nothing else runs yet; held so that the analysis can check
    if (m.ok() && m->world_size == o.world_size) {
      std::vector<ChunkId> mine;
      for (const TensorRecord& t : m->tensors) {
        for (const SliceRecord& s : t.slices) {
          if (s.rank != o.rank) continue;
          for (const ChunkRef& c : s.chunks) {
            impl.known[c.id] = m->step;
            mine.push_back(c.id);
          }
        }
      }
      // The newest checkpoint's local copies are kept (keep_local counts it).
      impl.local_history.push_back(std::move(mine));
    }
    impl.last_step = *latest;
  }
  return e;
}

Status CheckpointEngine::WaitAll() {
  std::vector<std::future<void>> commits;
  {
    MutexLock lock(impl_->mu);
    commits.swap(impl_->commits);
  }
  for (auto& f : commits) f.get();
  MutexLock lock(impl_->mu);
  Status s = impl_->first_error;
  impl_->first_error = Status::Ok();
  return s;
}

// ---------------------------------------------------------------------------------------------
// Listing and reading

Result<std::vector<CheckpointInfo>> CheckpointEngine::List() {
  // The catalog reads the layout; a damaged manifest is one damaged entry, so retention, GC and
  // opening an engine keep working beside it.
  CheckpointCatalog catalog(*durable_);
  GANTRY_ASSIGN_OR_RETURN(std::vector<StepEntry> steps, catalog.Steps(options_.job));
  std::vector<CheckpointInfo> out;
  out.reserve(steps.size());
  for (StepEntry& e : steps) {
    CheckpointInfo info;
    info.step = e.step;
    info.committed = e.state == StepState::kCommitted;
    info.damaged = e.state == StepState::kDamaged;
    info.problem = std::move(e.problem);
    info.parts = e.parts;
    info.world_size = e.world_size;
    info.bytes = e.bytes;
    info.created_unix = e.created_unix;
    info.tags = std::move(e.tags);
    out.push_back(std::move(info));
  }
  return out;
}

Result<int64_t> CheckpointEngine::LatestStep(std::vector<std::string>* warnings) {
  std::string warning;
  Result<std::string> pointer = durable_->Get(LatestKey(options_.job));
  if (pointer.ok()) {
    char* end = nullptr;
    long long step = std::strtoll(pointer->c_str(), &end, 10);
    if (end != pointer->c_str() && step >= 0) {
      // The pointer is trusted only as far as its manifest reads back whole: a restore of a
      // damaged one would fail, while an older checkpoint may be fine.
      Result<CheckpointManifest> m = ReadManifest(step);
      if (m.ok()) return static_cast<int64_t>(step);
      const StatusCode code = m.status().code();
      if (code == StatusCode::kDataLoss || code == StatusCode::kInvalidArgument) {
        warning = "the latest pointer of job '" + options_.job + "' names step " +
                  std::to_string(step) + ", which is damaged (" + m.status().message() +
                  "); using the newest undamaged committed step instead; remove the damaged one "
                  "with `gantry ckpt rm --force " +
                  std::to_string(step) + "`";
      } else if (code != StatusCode::kNotFound) {
        return m.status();
      }
    }
  } else if (pointer.status().code() != StatusCode::kNotFound) {
    return pointer.status();
  }
  if (!warning.empty()) {
    if (warnings != nullptr) {
      warnings->push_back(warning);
    } else {
      // The library has no log of its own; stderr reaches the job's log (as retention's
      // warnings do).
      std::fprintf(stderr, "gantry checkpoint: warning: %s\n", warning.c_str());
    }
  }
  // No usable pointer (never written, removed, or naming a damaged step): the newest committed
  // step whose manifest reads back (List marks the others damaged).
  GANTRY_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> all, List());
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (it->committed) return it->step;
  }
  return NotFound("no committed checkpoint of job '" + options_.job + "' in " + durable_->url() +
                  (warning.empty() ? "" : " (the latest one is damaged)"));
}

Result<CheckpointManifest> CheckpointEngine::ReadManifest(int64_t step) {
  return CheckpointCatalog(*durable_).Manifest(options_.job, step);
}

}  // namespace gantry::ckpt
