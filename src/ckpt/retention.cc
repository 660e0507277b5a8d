// Removal, retention, the checkpoint kind's GC roots, the local tier's cleanup and
// verification. Chunks are collected by the chunk store's one GC, which marks from the roots
// registered here (every checkpoint and part under a root) and from every other kind.
#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "ckpt/engine.h"
#include "gantry/cache/roots.h"
#include "gantry/ckpt/catalog.h"
#include "gantry/ckpt/drain.h"

namespace gantry::ckpt {

namespace {

// The "ckpt" kind's roots: every checkpoint manifest and rank part of every job under the root.
// A part without a manifest is an unfinished save: its chunks stay until the engine's GC removes
// the part (older than the grace period).
//
// A root that cannot be parsed (a damaged manifest or part: DataLoss, or the parser's
// InvalidArgument) is skipped rather than failing the GC, which would stop every job's GC under
// the root for one bad object and fill the disk. What that costs, and why it is acceptable:
// the chunks are still marked from the step's rank parts, which the commit merged into the
// manifest and which stay beside it, so a damaged manifest's chunks stay as long as its parts
// are readable (a merge of them can rebuild it). Chunks that only the unreadable object named
// are unmarked and go once older than the grace period; a checkpoint whose manifest cannot be
// read cannot be restored from anyway. A store failure still fails the GC (nothing deleted).
class CheckpointRoots final : public RootProvider {
 public:
  Status MarkLive(ObjectStore& store, const std::function<void(const ChunkId&)>& mark) override {
    return MarkLiveAndWarn(store, mark, nullptr);
  }

  // Each damaged manifest or part skipped is one warning, so `gantry cache gc` can say what it
  // went around instead of skipping it silently.
  Status MarkLiveAndWarn(ObjectStore& store, const std::function<void(const ChunkId&)>& mark,
                         std::vector<std::string>* warnings) override {
    GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, store.ListAll(kCheckpointKeyPrefix));
    for (const ObjectInfo& obj : objects) {
      std::optional<CheckpointKey> key = ParseCheckpointKey(obj.key);
      if (!key.has_value() || (key->kind != CheckpointKey::Kind::kManifest &&
                               key->kind != CheckpointKey::Kind::kPart)) {
        continue;
      }
      Result<std::string> text = store.Get(obj.key);
      if (!text.ok()) {
        if (text.status().code() == StatusCode::kNotFound) continue;  // removed meanwhile
        return text.status();
      }
      Result<CheckpointManifest> m = CheckpointManifest::FromJson(*text, obj.key);
      if (!m.ok()) {
        const StatusCode code = m.status().code();
        if (code != StatusCode::kDataLoss && code != StatusCode::kInvalidArgument) {
          return m.status();
        }
        if (warnings != nullptr) {
          warnings->push_back(
              "damaged checkpoint " +
              std::string(key->kind == CheckpointKey::Kind::kManifest ? "manifest" : "part") + " " +
              store.url() + "/" + obj.key + " (job '" + key->job + "', step " +
              std::to_string(key->step) + ") was skipped: chunks only it names are not kept (" +
              m.status().message() + "); remove the step with `gantry ckpt rm --force " +
              std::to_string(key->step) + "`");
        }
        continue;
      }
      for (const ChunkId& id : m->ChunkIds()) mark(id);
    }
    // Saves not yet durable (drain.h): their chunks in a node-local tier are all that is left
    // of them until a drain copies them. A record that does not read is no root (a drain
    // discards it), so it is skipped, not an error.
    GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> records, store.ListAll(kDrainRecordPrefix));
    for (const ObjectInfo& obj : records) {
      Result<std::string> text = store.Get(obj.key);
      if (!text.ok()) {
        if (text.status().code() == StatusCode::kNotFound) continue;  // drained meanwhile
        return text.status();
      }
      Result<DrainRecord> r = DrainRecord::FromJson(*text, obj.key);
      if (!r.ok()) continue;
      for (const ChunkId& id : r->part.ChunkIds()) mark(id);
    }
    return Status::Ok();
  }
};

// The warning for a damaged checkpoint that retention and GC leave in place.
std::string DamagedWarning(const std::string& job, const CheckpointInfo& c) {
  return "step " + std::to_string(c.step) + " of job '" + job +
         "' is damaged and was left in place (not removed, not counted by retention): " +
         c.problem + "; remove it with `gantry ckpt rm --force " + std::to_string(c.step) + "`";
}

}  // namespace

void RegisterCheckpointRoots() {
  static const bool registered = [] {
    RegisterRootProvider("ckpt", std::make_shared<CheckpointRoots>());
    return true;
  }();
  (void)registered;
}

namespace {
// Programs that link the engine can collect a namespace holding checkpoints (gantry cache gc).
const bool kRegistered = [] {
  RegisterCheckpointRoots();
  return true;
}();
}  // namespace

void CheckpointEngine::Impl::TrimLocal(const std::vector<ChunkId>& ids) {
  if (local_tier < 0) return;
  local_history.push_back(ids);
  const size_t keep = static_cast<size_t>(std::max(0, opt().keep_local));
  while (local_history.size() > keep) {
    std::vector<ChunkId> old = std::move(local_history.front());
    local_history.pop_front();
    std::unordered_set<ChunkId, ChunkIdHash> live;
    for (const auto& v : local_history) live.insert(v.begin(), v.end());
    for (const ChunkId& id : old) {
      if (live.count(id) > 0) continue;
      // Only with proof of a durable copy; never a chunk a save in flight has pinned (it pins
      // before writing, so it either keeps the copy or writes it after this delete).
      (void)chunks->DropCopy(local_tier, id);
    }
  }
  if (!local_swept) {
    local_swept = true;
    SweepLocalLeftovers();
  }
}

// Saves that crashed, or processes that ended, leave chunks in the local tier that no history
// of this process names. Those older than the grace period (a save in flight in another
// process rewrites or touches its chunks well within it) and not among the last keep_local
// saves of this rank go, each after proof of a durable copy. Best effort: the local tier is a
// cache, and a failure here must not fail the save that triggered it.
void CheckpointEngine::Impl::SweepLocalLeftovers() {
  Result<std::vector<ObjectInfo>> objects = chunks->ListChunks(local_tier);
  if (!objects.ok()) return;
  std::unordered_set<ChunkId, ChunkIdHash> keep;
  for (const auto& v : local_history) keep.insert(v.begin(), v.end());
  const int64_t cutoff = clock->Now() - opt().gc_grace_seconds;
  for (const ObjectInfo& o : *objects) {
    Result<ChunkId> id = ChunkIdFromKey(o.key);
    if (!id.ok() || keep.count(*id) > 0) continue;
    if (o.mtime_unix == 0 || o.mtime_unix > cutoff) continue;  // unknown age counts as young
    (void)chunks->DropCopy(local_tier, *id);
  }
}

Status CheckpointEngine::Remove(int64_t step) {
  // A save whose Wait() returned may still be finishing its commit (pointer, retention); let
  // it end first, so the removal neither races it nor sees it as a save still in flight.
  // Never from a commit task (retention runs there): it would wait for itself.
  impl_->AwaitCommits();
  return impl_->RemoveStep(step);
}

Status CheckpointEngine::Impl::RemoveStep(int64_t step) {
  const std::string& job = opt().job;
  ObjectStore& durable_store = durable();
  const std::string prefix = StepPrefix(job, step);
  GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, durable_store.ListAll(prefix));
  if (objects.empty()) {
    return NotFound("no checkpoint at step " + std::to_string(step) + " of job '" + job + "'");
  }
  // The manifest first: from then on the checkpoint does not exist, whatever else happens.
  GANTRY_RETURN_IF_ERROR(durable_store.Delete(ManifestKey(job, step)));
  for (const ObjectInfo& obj : objects) GANTRY_RETURN_IF_ERROR(durable_store.Delete(obj.key));
  Result<std::string> pointer = durable_store.Get(LatestKey(job));
  if (pointer.ok() && std::strtoll(pointer->c_str(), nullptr, 10) == step) {
    GANTRY_RETURN_IF_ERROR(durable_store.Delete(LatestKey(job)));
    std::vector<std::string> quiet;  // a damaged step is not pointed at; rm reports the rest
    Result<int64_t> newest = engine->LatestStep(&quiet);
    if (newest.ok()) {
      GANTRY_RETURN_IF_ERROR(durable_store.Put(LatestKey(job), std::to_string(*newest) + "\n"));
    }
  }
  return ForgetRemoved(step);
}

void CheckpointEngine::Impl::AwaitCommits() {
  std::vector<std::future<void>> pending;
  {
    MutexLock lock(mu);
    pending.swap(commits);
  }
  for (const std::future<void>& f : pending) f.wait();  // outside mu: a commit may take it
  MutexLock lock(mu);
  for (std::future<void>& f : pending) commits.push_back(std::move(f));
}

// Saves must go above this engine's newest save (incremental state compares against it). When
// that save is the one removed, the bar drops to the newest step left, so "remove the newest,
// save it again" works on the same engine; while a save is still in flight it stays.
Status CheckpointEngine::Impl::ForgetRemoved(int64_t step) {
  {
    MutexLock lock(mu);
    if (step != last_step) return Status::Ok();
    for (const std::future<void>& f : commits) {
      if (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return Status::Ok();
    }
  }
  GANTRY_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> left, engine->List());
  MutexLock lock(mu);
  if (step != last_step) return Status::Ok();  // a save came in meanwhile
  last_step = left.empty() ? -1 : left.back().step;
  // Chunks known only through the removed checkpoint may be collected by now: the next save
  // writes them again instead of pointing at them.
  std::erase_if(known, [&](const auto& entry) { return entry.second >= step; });
  return Status::Ok();
}

Status CheckpointEngine::Impl::ApplyRetention(const Retention& r, std::vector<int64_t>* removed,
                                              std::vector<std::string>* warnings) {
  if (r.keep_last <= 0) return Status::Ok();
  GANTRY_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> all, engine->List());
  // Only readable commits count and go: a damaged one may hold tags or a step keep_every would
  // keep, which cannot be read, so it is left to a person (the warning says how).
  std::vector<const CheckpointInfo*> committed;
  for (const CheckpointInfo& c : all) {
    if (c.committed) committed.push_back(&c);
    if (c.damaged && warnings != nullptr) warnings->push_back(DamagedWarning(opt().job, c));
  }
  for (size_t i = 0; i < committed.size(); ++i) {
    const CheckpointInfo& c = *committed[i];
    const bool keep = i + static_cast<size_t>(r.keep_last) >= committed.size() ||
                      (r.keep_every > 0 && c.step % r.keep_every == 0) ||
                      (r.keep_tagged && !c.tags.empty());
    if (keep) continue;
    GANTRY_RETURN_IF_ERROR(RemoveStep(c.step));
    removed->push_back(c.step);
  }
  return Status::Ok();
}

Result<CkptGcReport> CheckpointEngine::CollectGarbage(std::optional<Retention> retention) {
  CkptGcReport report;
  GANTRY_RETURN_IF_ERROR(impl_->ApplyRetention(retention.value_or(options_.retention),
                                               &report.removed_steps, nullptr));
  const int64_t now = impl_->clock->Now();
  const int64_t grace = options_.gc_grace_seconds;
  // Unfinished saves older than the grace period will never commit.
  GANTRY_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> all, List());
  for (const CheckpointInfo& c : all) {
    if (c.committed) continue;
    if (c.damaged) {
      // Not an unfinished save (its manifest exists): left for a person to look at.
      report.warnings.push_back(DamagedWarning(options_.job, c));
      continue;
    }
    // Older than the grace period (longer than any commit may wait for the other ranks);
    // an unknown time counts as young.
    const bool stale = c.created_unix != 0 && c.created_unix < now - grace;
    if (stale) {
      GANTRY_RETURN_IF_ERROR(Remove(c.step));
      report.removed_steps.push_back(c.step);
    }
  }
  // Chunks: the chunk store's one GC marks from every registered kind of root (this engine's
  // checkpoints and parts, the store's blobs, ...) and spares what saves in flight here pinned.
  GANTRY_ASSIGN_OR_RETURN(GcReport chunks, impl_->chunks->CollectGarbage());
  report.referenced_chunks = chunks.referenced_chunks;
  report.deleted_chunks = chunks.deleted_chunks;
  report.deleted_bytes = chunks.deleted_bytes;
  report.kept_young = chunks.kept_young + chunks.kept_pinned;
  return report;
}

Result<VerifyCkptReport> CheckpointEngine::Verify(int64_t step, const ProgressFn& progress) {
  GANTRY_ASSIGN_OR_RETURN(CheckpointManifest m, ReadManifest(step));
  // Each chunk once, with its whole size: a pack's refs reach inside it (FromJson checked that
  // every ref fits its pack), and the stored chunk must be exactly that size.
  const std::vector<PackRecord> sizes = m.StoredChunks();
  uint64_t total = 0;
  for (const PackRecord& c : sizes) total += c.size;
  VerifyCkptReport report;
  Mutex mu;
  ThreadPool pool(std::max(2, options_.io_threads));
  std::vector<std::future<void>> work;
  for (const auto& [id, size] : sizes) {
    work.push_back(pool.Submit([&, id = id, size = size] {
      Result<std::string> raw = impl_->chunks->GetChunkFromTier(impl_->durable_tier, id);
      Status s = raw.ok() && raw->size() != size
                     ? DataLoss("corrupt chunk " + id.ToHex() + ": size differs from the manifest")
                     : raw.status();
      MutexLock lock(mu);
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
