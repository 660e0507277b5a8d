// The multi-rank commit protocol: each rank writes its part once its chunks are durable; rank 0
// waits for every part of this run, merges them, and writes the manifest, then `latest`. Polls
// run on the engine's clock, so the protocol's timeouts are tested on simulated time. Finish
// also settles what a save leaves behind (incremental state, local copies, pins).
#include <algorithm>
#include <cstdio>
#include <map>
#include <unordered_set>

#include "ckpt/engine.h"

namespace gantry::ckpt {

namespace {

bool SameSlices(const SliceRecord& a, const SliceRecord& b) {
  if (a.row_offset != b.row_offset || a.rows != b.rows || a.nbytes != b.nbytes ||
      a.chunks.size() != b.chunks.size()) {
    return false;
  }
  for (size_t i = 0; i < a.chunks.size(); ++i) {
    if (a.chunks[i].id != b.chunks[i].id || a.chunks[i].size != b.chunks[i].size ||
        a.chunks[i].offset != b.chunks[i].offset) {
      return false;
    }
  }
  return true;
}

// True if two commit records hold the same tensors with the same bytes (chunk ids).
bool SameData(const CheckpointManifest& a, const CheckpointManifest& b) {
  if (a.tensors.size() != b.tensors.size()) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const TensorRecord& x = a.tensors[i];
    const TensorRecord& y = b.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.global_shape != y.global_shape ||
        x.slices.size() != y.slices.size()) {
      return false;
    }
    for (size_t j = 0; j < x.slices.size(); ++j) {
      if (x.slices[j].rank != y.slices[j].rank || !SameSlices(x.slices[j], y.slices[j])) {
        return false;
      }
    }
  }
  return true;
}

// True unless the commit record holds, for a row range this rank saved, another writer's
// slice of this rank (a second process saved the same rank of the same step). A range the merge
// gave to a lower rank (replicated rows) or dropped (no rows) is not this rank's to check.
bool HoldsPart(const CheckpointManifest& m, const CheckpointManifest& part, int rank) {
  for (const TensorRecord& t : part.tensors) {
    const SliceRecord& mine = t.slices.front();
    if (mine.rows == 0) continue;
    const TensorRecord* rec = m.FindTensor(t.name);
    if (rec == nullptr || rec->dtype != t.dtype || rec->global_shape != t.global_shape) {
      return false;
    }
    for (const SliceRecord& s : rec->slices) {
      if (s.rank == rank && s.row_offset == mine.row_offset && !SameSlices(s, mine)) return false;
    }
  }
  return true;
}

}  // namespace

Result<bool> PollUntil(Clock& clock, const std::function<Result<bool>()>& ready,
                       int64_t timeout_ms) {
  const int64_t deadline = clock.NowMillis() + timeout_ms;
  int64_t sleep_ms = 10;
  for (;;) {
    GANTRY_ASSIGN_OR_RETURN(bool done, ready());
    if (done) return true;
    if (clock.NowMillis() >= deadline) return false;
    clock.SleepForMillis(sleep_ms);
    sleep_ms = std::min<int64_t>(sleep_ms * 2, 500);
  }
}

Status WriteLatestPointer(ObjectStore& durable, std::string_view job, int64_t step) {
  const std::string key = LatestKey(job);
  Result<std::string> current = durable.Get(key);
  if (current.ok()) {
    char* end = nullptr;
    long long cur = std::strtoll(current->c_str(), &end, 10);
    if (end != current->c_str() && cur > step) return Status::Ok();  // never move backwards
  }
  return durable.Put(key, std::to_string(step) + "\n");
}

void CheckpointEngine::Impl::FinalizePart(SaveJob& job) {
  job.part.created_unix = clock->Now();
  // Packs in id order, each once, as FindPack expects: pieces were hashed in any order, and
  // packs of equal bytes share one id.
  std::vector<PackRecord>& packs = job.part.packs;
  std::sort(packs.begin(), packs.end(),
            [](const PackRecord& a, const PackRecord& b) { return a.id < b.id; });
  packs.erase(std::unique(packs.begin(), packs.end(),
                          [](const PackRecord& a, const PackRecord& b) { return a.id == b.id; }),
              packs.end());
  MutexLock lock(job.mu);
  RankRecord& rr = job.part.ranks.front();
  rr.chunks_written = job.chunks_written;
  rr.bytes_written = job.bytes_written;
}

Status CheckpointEngine::Impl::Commit(const std::shared_ptr<SaveJob>& job) {
  const EngineOptions& o = opt();
  const int64_t step = job->part.step;
  // Part: this rank's chunks are all durable (waited for by the caller).
  FinalizePart(*job);
  if (!roots_declared) {
    // Before the first part: a GC in a program that cannot read checkpoints must refuse.
    GANTRY_RETURN_IF_ERROR(chunks->DeclareRootKind("ckpt"));
    roots_declared = true;
  }
  GANTRY_RETURN_IF_ERROR(durable().Put(PartKey(o.job, step, o.rank), job->part.ToJson()));
  bool had_record = false;
  {
    MutexLock lock(job->mu);
    std::swap(had_record, job->drain_record);
  }
  if (had_record) {
    // The part is durable: nothing is left for a drain to do (best effort; a drain that finds
    // the record anyway rewrites the same part).
    (void)local_store->Delete(DrainRecordKey(durable().url(), o.job, step, o.rank));
  }
  {
    MutexLock lock(job->handle->mu_);
    job->handle->stats_.durable_seconds = SecondsSince(job->start);
  }
  job->handle->Reach(Durability::kDurable);

  const std::string manifest_key = ManifestKey(o.job, step);
  if (o.rank != 0) {
    // Committed once a manifest of this step from this run exists (one a crashed earlier
    // attempt wrote at the same step does not count).
    GANTRY_ASSIGN_OR_RETURN(
        bool committed,
        PollUntil(
            *clock,
            [&]() -> Result<bool> {
              Result<std::string> text = durable().Get(manifest_key);
              if (!text.ok()) {
                if (text.status().code() == StatusCode::kNotFound) return false;
                return text.status();
              }
              Result<CheckpointManifest> m = CheckpointManifest::FromJson(*text, manifest_key);
              if (!m.ok() || m->run_id != o.run_id) return false;
              if (!HoldsPart(*m, job->part, o.rank)) {
                return AlreadyExists("another process saved rank " + std::to_string(o.rank) +
                                     " of this step at the same time, and the checkpoint "
                                     "holds its data, not this save's");
              }
              return true;
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
  std::map<std::string, CheckpointManifest> accepted;  // by key
  // Its own part as it wrote it: the stored one may be another process's, saving the same
  // rank of the same step, that overwrote it.
  accepted.emplace(PartKey(o.job, step, o.rank), job->part);
  GANTRY_ASSIGN_OR_RETURN(
      bool all_parts, PollUntil(
                          *clock,
                          [&]() -> Result<bool> {
                            GANTRY_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objs,
                                                    durable().ListAll(PartKeyPrefix(o.job, step)));
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
                              if (m->run_id == o.run_id) accepted.emplace(info.key, std::move(*m));
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
  GANTRY_RETURN_IF_ERROR(PutManifestOnce(durable(), manifest_key, merged));
  GANTRY_RETURN_IF_ERROR(WriteLatestPointer(durable(), o.job, step));
  if (o.retention.keep_last > 0) {
    std::vector<int64_t> removed;
    std::vector<std::string> warnings;
    Status s = ApplyRetention(o.retention, &removed, &warnings);
    (void)s;  // retention is housekeeping: the checkpoint is committed whatever happens here
    // A damaged checkpoint is skipped by every later commit's retention too; said once per
    // engine (the library has no log of its own; stderr reaches the job's log).
    for (const std::string& w : warnings) {
      if (warned.insert(w).second)
        std::fprintf(stderr, "gantry checkpoint: warning: %s\n", w.c_str());
    }
  }
  return Status::Ok();
}

// The manifest is created, never replaced: of two processes committing the same step, the
// second finds the first's manifest. If it holds exactly the same data (a relaunch redoing a
// commit whose `latest` was never written), the commit stands; otherwise this save fails with
// AlreadyExists, so no writer is told "saved" while another's data is what the step holds.
Status PutManifestOnce(ObjectStore& durable, const std::string& key,
                       const CheckpointManifest& merged) {
  PutOptions po;
  po.create_if_absent = durable.SupportsCreateIfAbsent();
  Status put;
  if (!po.create_if_absent && durable.Head(key).ok()) {
    put = AlreadyExists(key + ": exists");  // best effort where the store cannot create-only
  } else {
    put = durable.Put(key, merged.ToJson(), po);
  }
  if (put.ok()) return put;
  // Backends report an existing name as AlreadyExists (older ones FailedPrecondition); whether
  // it exists is read from the store itself.
  if (put.code() != StatusCode::kAlreadyExists && put.code() != StatusCode::kFailedPrecondition) {
    return put;
  }
  Result<std::string> text = durable.Get(key);
  if (!text.ok()) return text.status().code() == StatusCode::kNotFound ? put : text.status();
  Result<CheckpointManifest> existing = CheckpointManifest::FromJson(*text, key);
  if (existing.ok() && SameData(*existing, merged)) return Status::Ok();
  return AlreadyExists("step " + std::to_string(merged.step) + " of job '" + merged.job +
                       "' was committed meanwhile by another writer" +
                       (existing.ok() ? " (run '" + existing->run_id + "')" : "") +
                       " with different data; this save was not committed (two processes "
                       "saved the same step)");
}

// Chunks skipped because the previous save stored them are referenced by no manifest of this
// save yet: if something removed them meanwhile (`gantry ckpt rm` of that checkpoint, then a GC
// in another process), the part must not point at them. One HEAD each, in parallel.
Status CheckpointEngine::Impl::CheckReused(const std::shared_ptr<SaveJob>& job) {
  std::vector<ChunkId> reused;
  {
    MutexLock lock(job->mu);
    reused = job->reused;
  }
  std::vector<std::future<Status>> heads;
  heads.reserve(reused.size());
  for (const ChunkId& id : reused) {
    heads.push_back(drain_pool->Submit([this, id] { return chunks->HasDurableCopy(id); }));
  }
  Status first;
  for (size_t i = 0; i < heads.size(); ++i) {
    Status s = heads[i].get();
    if (s.ok()) continue;
    {
      MutexLock lock(mu);
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

void CheckpointEngine::Impl::Finish(const std::shared_ptr<SaveJob>& job) {
  Status s;
  {
    MutexLock lock(job->mu);
    while (job->durable_left != 0) job->cv.Wait(job->mu);
    s = job->error;
    MutexLock hl(job->handle->mu_);
    job->handle->stats_.chunks_written = job->chunks_written;
    job->handle->stats_.bytes_written = job->bytes_written;
  }
  if (s.ok()) {
    std::vector<std::shared_ptr<ChunkWrite>> borrowed;
    {
      MutexLock lock(job->mu);
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
    MutexLock lock(mu);
    if (s.ok()) {
      // Incremental saves compare against the chunks of the newest committed save only.
      for (auto it = known.begin(); it != known.end();) {
        it = it->second < job->part.step ? known.erase(it) : std::next(it);
      }
    } else {
      // What a failed save wrote is referenced by no checkpoint and may be collected: later
      // saves must write it again rather than point at it.
      MutexLock jl(job->mu);
      for (const ChunkId& id : job->written) {
        auto it = known.find(id);
        if (it != known.end() && it->second == job->part.step) known.erase(it);
      }
    }
  }
  std::vector<ChunkId> pinned;
  {
    MutexLock lock(job->mu);
    pinned.swap(job->pinned);
  }
  for (const ChunkId& id : pinned) chunks->Unpin(id);
  if (s.ok()) {
    TrimLocal(ids);
    {
      MutexLock lock(job->handle->mu_);
      job->handle->stats_.committed_seconds = SecondsSince(job->start);
    }
    job->handle->Reach(Durability::kCommitted);
  } else {
    job->handle->Fail(s);
    MutexLock lock(mu);
    if (first_error.ok())
      first_error = s.WithContext("checkpoint step " + std::to_string(job->part.step));
  }
}

}  // namespace gantry::ckpt
