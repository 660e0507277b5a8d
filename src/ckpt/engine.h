// The checkpoint engine's private parts, shared by its files: save.cc (the save pipeline:
// snapshot into host buffers, hash, local write, drain), commit.cc (the multi-rank commit
// protocol and what a finished save leaves behind), restore.cc (the resharding plan and the
// parallel fetch), retention.cc (removal, retention, GC roots, verification) and checkpoint.cc
// (opening, listing, reading manifests).
//
// Chunks are stored and fetched only through the engine's ChunkStore, whose tiers are the local
// tier (if any, index 0) and the durable tier (the checkpoint root, last). The engine decides
// when a chunk moves (a whole save goes local first, then drains), the store how.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "ckpt/buffer_pool.h"
#include "gantry/cache/chunk_store.h"
#include "gantry/ckpt/checkpoint.h"
#include "gantry/common/thread_annotations.h"
#include "gantry/common/thread_pool.h"
#include "gantry/common/time.h"

namespace gantry::ckpt {

using SteadyClock = std::chrono::steady_clock;

// Seconds since `start`, for the stats users read (measured, never simulated).
double SecondsSince(SteadyClock::time_point start);

// Polls `ready` with growing sleeps on `clock` until it returns true, an error, or `timeout_ms`
// of that clock passes (false).
Result<bool> PollUntil(Clock& clock, const std::function<Result<bool>()>& ready,
                       int64_t timeout_ms);

// Creates the manifest at `key` unless one exists; an existing one holding the same data counts
// as this commit (a relaunch redoing it, a drain racing rank 0), another's is AlreadyExists.
Status PutManifestOnce(ObjectStore& durable, const std::string& key,
                       const CheckpointManifest& merged);
// Points `latest` of `job` at `step`, unless it already names a later step.
Status WriteLatestPointer(ObjectStore& durable, std::string_view job, int64_t step);

// The chunk namespace of a checkpoint root: [the node-local tier, stored raw (restores read it
// in place),] then the root with `codec`; reads are not promoted (a restore reads each chunk
// once; copies would only cost time). No tier has a capacity: keep_local, not eviction, bounds
// the local tier. Callers set the clock, chunk size and the rest.
ChunkStoreOptions CheckpointTiers(std::shared_ptr<ObjectStore> local,
                                  std::shared_ptr<ObjectStore> durable, Codec codec);

// Registers the "ckpt" root provider (every checkpoint and part under a root) with the chunk
// store's GC; idempotent.
void RegisterCheckpointRoots();

// One chunk write that later chunks with the same content wait for instead of rewriting.
struct ChunkWrite {
  Mutex mu;
  CondVar cv;
  bool done GUARDED_BY(mu) = false;
  Status status GUARDED_BY(mu);
  void Finish(Status s) EXCLUDES(mu) {
    MutexLock lock(mu);
    done = true;
    status = std::move(s);
    cv.NotifyAll();
  }
  Status Wait() EXCLUDES(mu) {
    MutexLock lock(mu);
    while (!done) cv.Wait(mu);
    return status;
  }
};

// A small slice's bytes inside a pack.
struct PackMember {
  size_t tensor = 0;  // index in the part's tensors; its one slice has one ref
  const char* src = nullptr;
  uint64_t offset = 0;  // in the pack
  uint64_t size = 0;
};

// One chunk, snapshotted into a host buffer: a chunk of one tensor, or a pack of small slices
// of several tensors (`members` not empty; `tensor`, `chunk` and `src` unused).
struct Piece {
  size_t tensor = 0;
  size_t chunk = 0;
  const char* src = nullptr;
  HostBufferPool::Buffer* buffer = nullptr;
  char* data = nullptr;
  uint64_t size = 0;
  std::vector<PackMember> members;
  size_t pack = 0;  // index in the part's packs
};

struct SaveJob {
  std::shared_ptr<SaveHandle> handle;
  SaveOptions options;
  CheckpointManifest part;
  std::vector<Piece> pieces;
  SteadyClock::time_point start;

  Mutex mu;
  CondVar cv;
  size_t local_left GUARDED_BY(mu) = 0;
  size_t durable_left GUARDED_BY(mu) = 0;
  Status error GUARDED_BY(mu);
  std::vector<std::shared_ptr<ChunkWrite>> borrowed GUARDED_BY(mu);
  // Chunks in the local tier waiting for the save to be wholly local before draining.
  std::vector<std::pair<ChunkId, std::shared_ptr<ChunkWrite>>> to_drain GUARDED_BY(mu);
  uint64_t chunks_written GUARDED_BY(mu) = 0;
  uint64_t bytes_written GUARDED_BY(mu) = 0;
  std::vector<ChunkId> written GUARDED_BY(mu);  // chunks this save made durable
  std::vector<ChunkId> reused GUARDED_BY(mu);   // chunks skipped as already durable
  // Chunks this save pinned in the chunk store (GC in this process keeps them until the save
  // is finished, referenced by its part or not); unpinned by Finish.
  std::vector<ChunkId> pinned GUARDED_BY(mu);
  // A drain record for this save is in the local tier (drain.h), removed with the part's write.
  bool drain_record GUARDED_BY(mu) = false;

  void RecordError(const Status& s) EXCLUDES(mu) {
    MutexLock lock(mu);
    if (error.ok()) error = s;
    cv.NotifyAll();
  }
};

struct CheckpointEngine::Impl {
  CheckpointEngine* engine;
  Clock* clock = nullptr;
  std::unique_ptr<ChunkStore> chunks;
  std::shared_ptr<ObjectStore> local_store;  // the local tier's store; null: none
  int local_tier = -1;                       // -1: no local tier
  int durable_tier = 0;
  std::unique_ptr<HostBufferPool> pool;
  std::unique_ptr<ThreadPool> copy_pool;    // the blocking snapshot copies
  std::unique_ptr<ThreadPool> io_pool;      // hashing and local writes
  std::unique_ptr<ThreadPool> drain_pool;   // durable writes
  std::unique_ptr<ThreadPool> commit_pool;  // one thread: finishes saves in step order

  // One snapshot at a time: concurrent Saves each holding part of the pool while waiting for
  // more would deadlock (their pieces are only handed to the background after the copy).
  Mutex save_mu;  // guards no member: held for a whole snapshot
  Mutex mu;
  // Chunks known durable, with the newest step that referenced them; pruned to the last save.
  std::unordered_map<ChunkId, int64_t, ChunkIdHash> known GUARDED_BY(mu);
  std::unordered_map<ChunkId, std::shared_ptr<ChunkWrite>, ChunkIdHash> inflight GUARDED_BY(mu);
  // Chunk ids of this rank's recent saves, for keep_local (commit thread only).
  std::deque<std::vector<ChunkId>> local_history;
  bool local_swept = false;     // leftovers of earlier processes swept (commit thread only)
  bool roots_declared = false;  // commit thread only
  int64_t last_step GUARDED_BY(mu) = -1;
  std::vector<std::future<void>> commits GUARDED_BY(mu);
  Status first_error GUARDED_BY(mu);  // since the last WaitAll
  std::set<std::string> warned;       // retention warnings already printed (commit thread only)

  const EngineOptions& opt() const { return engine->options_; }
  ObjectStore& durable() { return *engine->durable_; }

  // save.cc
  void ProcessPiece(const std::shared_ptr<SaveJob>& job, size_t index) EXCLUDES(mu);
  void DrainPiece(const std::shared_ptr<SaveJob>& job, const ChunkId& id,
                  const std::shared_ptr<ChunkWrite>& write, HostBufferPool::Buffer* buffer,
                  const char* data, uint64_t size) EXCLUDES(mu);
  void PieceLocal(const std::shared_ptr<SaveJob>& job);
  void PieceDurable(const std::shared_ptr<SaveJob>& job);
  // Leaves the save's drain record in the local tier; best effort (the save drains itself).
  void WriteDrainRecord(const std::shared_ptr<SaveJob>& job) EXCLUDES(mu);
  // commit.cc
  void Finish(const std::shared_ptr<SaveJob>& job) EXCLUDES(mu);
  Status Commit(const std::shared_ptr<SaveJob>& job);
  Status CheckReused(const std::shared_ptr<SaveJob>& job) EXCLUDES(mu);
  // The part as written: packs sorted and deduplicated, the rank's counts, the time.
  void FinalizePart(SaveJob& job);
  // retention.cc
  // After Remove(step): lowers the bar for the next save's step if `step` was the newest save.
  Status ForgetRemoved(int64_t step);
  // Remove without waiting for commits: for retention, which runs inside a commit task.
  Status RemoveStep(int64_t step);
  // Blocks until every commit this engine started has finished; the futures stay for WaitAll.
  void AwaitCommits() EXCLUDES(mu);
  // Removes what `r` does not keep; damaged checkpoints are left, one warning each (if given).
  Status ApplyRetention(const Retention& r, std::vector<int64_t>* removed,
                        std::vector<std::string>* warnings);
  // Drops local copies of chunks that no save among the last keep_local references (after
  // proof of a durable copy); the first call also sweeps what earlier processes left.
  void TrimLocal(const std::vector<ChunkId>& ids);
  void SweepLocalLeftovers();
};

}  // namespace gantry::ckpt
