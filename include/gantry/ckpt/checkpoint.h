// CheckpointEngine: asynchronous, incremental, multi-rank checkpoints of tensors on the tiered
// storage of the data layer, restored from the fastest source first (local tier -> peer agents
// -> durable tier), with resharding of row-sliced tensors, retention and garbage collection.
// Chunks are stored and fetched only through the chunk store (gantry/cache/chunk_store.h),
// whose one GC marks checkpoints through the "ckpt" root provider the engine registers.
//
// Save is split at the point where the caller may touch its tensors again: Save() copies them
// into a bounded pool of reused host buffers (small chunks share a buffer; slices smaller than
// pack_below_bytes are packed into shared chunks) and returns; background
// threads hash each chunk, skip those the previous checkpoint already stored (incremental), and
// write the rest to the local tier and the durable tier in parallel. A rank whose chunks are all
// durable writes its part manifest; rank 0 commits the checkpoint when every rank's part is
// there: the manifest is written last, then the `latest` pointer, so a crash at any instant
// leaves the previous checkpoint restorable. Ranks coordinate only through the durable store
// (S3 alone suffices; no shared file system).
//
//   EngineOptions o;
//   o.durable_url = "s3://bkt/ckpt"; o.local_url = "/nvme/gantry"; o.rank = r; o.world_size = n;
//   GANTRY_ASSIGN_OR_RETURN(auto engine, CheckpointEngine::Open(o));
//   GANTRY_ASSIGN_OR_RETURN(auto handle, engine->Save(tensors, {.step = 100}));
//   ... train on; the tensors may change now ...
//   GANTRY_RETURN_IF_ERROR(handle->Wait());  // committed
//
// Thread-safe. Saves run in step order; a Save while the pool is full blocks until background
// writes free buffers.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gantry/cache/chunk.h"
#include "gantry/ckpt/manifest.h"
#include "gantry/common/status.h"
#include "gantry/common/thread_annotations.h"
#include "gantry/common/time.h"
#include "gantry/storage/object_store.h"

namespace gantry::ckpt {

// What a checkpoint keeps when retention runs (after each commit, and by `gantry ckpt gc`): a
// checkpoint survives if any rule keeps it. The newest committed checkpoint always survives.
struct Retention {
  int keep_last = 0;        // the newest N; 0: keep every checkpoint (retention off)
  int64_t keep_every = 0;   // steps that are multiples of K; 0: none
  bool keep_tagged = true;  // checkpoints with at least one tag
};

struct EngineOptions {
  // The checkpoint root: the durable tier, the copy of record ("file:///shared/ckpt",
  // "s3://bucket/prefix", or a path). Required.
  std::string durable_url;
  // The node-local tier ("/nvme/gantry"); empty: none (chunks go straight to durable). Must not
  // overlap the durable root (the same or nested directories): Open refuses it.
  std::string local_url;
  // Peer agents' base URLs ("http://node7:7070"), tried after the local tier on restore.
  std::vector<std::string> peers;
  std::string job = "default";  // checkpoints of one training run; one key segment
  int rank = 0;
  int world_size = 1;
  // Names this launch of the job; every rank of it must pass the same one, and a relaunch after
  // a crash a new one, so parts the crashed attempt left are never merged into a checkpoint.
  // Default: $GANTRY_RUN_ID, else $TORCHELASTIC_RUN_ID (torchrun), else $SLURM_JOB_ID plus
  // $SLURM_RESTART_COUNT, else empty (no protection: fine for one rank, whose own part is
  // simply rewritten).
  std::string run_id;
  uint64_t chunk_size = kDefaultChunkSize;
  // Slices with fewer bytes than this are packed, in tensor-name order, into shared chunks of up
  // to chunk_size (a pack is rewritten whole when any of its slices changes, so the threshold is
  // kept small against chunk_size). Default: chunk_size / 16 (256 KiB for 4 MiB chunks); 0 never
  // packs (manifests are then version 1, as older builds wrote them).
  std::optional<uint64_t> pack_below_bytes;
  // Host buffer pool for asynchronous save: bytes of snapshots in flight. Save blocks (pipelined
  // with the background writes) when a state is larger. Default 1 GiB.
  uint64_t host_buffer_bytes = 1ull << 30;
  int io_threads = 4;  // chunk writes and reads in flight
  Codec durable_codec = Codec::kNone;
  // Checkpoints of this rank whose chunks stay in the local tier; older ones' local chunks are
  // deleted after a commit (the durable copies remain). Default 2.
  int keep_local = 2;
  // fsync chunks written to a file:// local tier. Off by default: the local tier is a cache of
  // the durable one, a process crash keeps the page cache, and after a node crash every chunk
  // is verified on read and fetched from a peer or the durable tier if it did not survive.
  bool local_fsync = false;
  Retention retention;
  // Rank 0 waits this long for the other ranks' parts before giving up the commit.
  int64_t commit_timeout_ms = 10 * 60 * 1000;
  // Every peer request: connect and total time. A peer that times out is skipped for the rest
  // of the restore.
  int peer_timeout_ms = 5000;
  // GC never deletes a chunk younger than this (protects saves in flight), and the local tier's
  // cleanup leaves younger leftovers of other processes alone. Default one hour.
  int64_t gc_grace_seconds = 3600;
  // Time for the commit protocol (polling, commit_timeout_ms) and grace periods. Default: the
  // real clock; tests pass a SimulatedClock.
  Clock* clock = nullptr;
  StoreOptions store_options;  // S3 endpoint and credentials
  // Already-open stores used instead of opening durable_url / local_url (tests wrap them in a
  // FaultyStore; an embedding process may share them). The URLs still name them in messages.
  std::shared_ptr<ObjectStore> durable_store;
  std::shared_ptr<ObjectStore> local_store;
};

// One tensor, or a row slice of one, to save. The bytes are contiguous and row-major.
struct SaveTensor {
  std::string name;  // unique within the rank's state, e.g. "model/layer1.weight"
  DType dtype = DType::kFloat32;
  std::vector<int64_t> global_shape;
  int64_t row_offset = 0;  // first row (of dim 0) held here
  int64_t rows = -1;       // rows held here; -1: the whole tensor
  const void* data = nullptr;
};

enum class Durability {
  kLocal,      // this rank's chunks are in the local tier (or durable, if there is no local tier)
  kDurable,    // this rank's chunks and part manifest are in the durable tier
  kCommitted,  // the checkpoint's manifest and latest pointer are written (every rank's part)
};
Result<Durability> ParseDurability(std::string_view name);  // "local", "durable", "committed"

struct SaveOptions {
  int64_t step = 0;
  Durability durability = Durability::kCommitted;  // what SaveHandle::Wait waits for
  std::vector<std::string> tags;                   // kept by retention; rank 0's are recorded
  std::string metadata_json = "{}";                // a JSON object; rank 0's is recorded
  std::string structure_json = "null";             // opaque, stored with this rank's part
};

struct SaveStats {
  int64_t step = 0;
  uint64_t tensors = 0;
  uint64_t bytes_total = 0;
  uint64_t chunks_total = 0;
  uint64_t chunks_written = 0;
  uint64_t bytes_written = 0;  // raw bytes of chunks written (not deduplicated)
  double blocking_seconds = 0;
  double local_seconds = 0;  // from Save's start; 0 until reached
  double durable_seconds = 0;
  double committed_seconds = 0;
  // bytes_written / bytes_total (1 for a first save, near 0 when nothing changed).
  double written_fraction() const {
    return bytes_total == 0 ? 0.0 : static_cast<double>(bytes_written) / bytes_total;
  }
};

class SaveHandle {
 public:
  int64_t step() const { return step_; }
  // True once the level requested at Save is reached or the save failed.
  bool done() const EXCLUDES(mu_);
  // Waits for the level requested at Save; the save's error, if any.
  Status Wait();
  Status WaitFor(Durability level) EXCLUDES(mu_);
  SaveStats stats() const EXCLUDES(mu_);

 private:
  friend class CheckpointEngine;
  friend struct SaveJob;
  explicit SaveHandle(int64_t step, Durability level) : step_(step), level_(level) {}
  void Reach(Durability level) EXCLUDES(mu_);
  void Fail(Status s) EXCLUDES(mu_);

  int64_t step_;
  Durability level_;
  mutable Mutex mu_;
  CondVar cv_;
  int reached_ GUARDED_BY(mu_) = -1;  // highest Durability reached, as int
  Status error_ GUARDED_BY(mu_);
  SaveStats stats_ GUARDED_BY(mu_);
};

// A tensor (or rows of one) to restore into caller memory of exactly the slice's bytes.
struct RestoreTarget {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> global_shape;  // must equal the checkpoint's
  int64_t row_offset = 0;
  int64_t rows = -1;  // -1: the whole tensor
  void* data = nullptr;
};

struct RestoreStats {
  uint64_t bytes = 0;   // raw bytes copied into targets
  uint64_t chunks = 0;  // chunks fetched
  uint64_t from_local = 0;
  uint64_t from_peers = 0;
  uint64_t from_durable = 0;
  uint64_t corrupt = 0;  // copies that failed verification (then fetched from the next source)
  double seconds = 0;
};

struct CheckpointInfo {
  int64_t step = 0;
  // false: parts without a manifest (a save in flight or abandoned), or a damaged manifest.
  bool committed = false;
  // A manifest that cannot be read back (truncated, bad checksum, another step's): listed so
  // one bad object does not hide the job's other checkpoints; retention and GC leave it alone
  // (docs/checkpoint.md), `gantry ckpt rm --force` removes it.
  bool damaged = false;
  std::string problem;  // damaged: what is wrong, naming the object
  int parts = 0;
  int world_size = 0;
  uint64_t bytes = 0;
  int64_t created_unix = 0;
  std::vector<std::string> tags;
};

struct CkptGcReport {
  std::vector<int64_t> removed_steps;  // by retention, or unfinished saves older than the grace
  uint64_t deleted_chunks = 0;
  uint64_t deleted_bytes = 0;
  uint64_t kept_young = 0;
  uint64_t referenced_chunks = 0;
  // One line per damaged checkpoint left in place (neither removed nor counted by retention).
  std::vector<std::string> warnings;
};

struct VerifyCkptReport {
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  uint64_t missing = 0;
  uint64_t corrupt = 0;
  std::vector<std::string> errors;
};

// Progress of long operations (restore, verify, export): bytes done of total.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

class CheckpointEngine {
 public:
  static Result<std::unique_ptr<CheckpointEngine>> Open(EngineOptions options);
  // Waits for every save in flight (errors are in their handles).
  ~CheckpointEngine();
  CheckpointEngine(const CheckpointEngine&) = delete;
  CheckpointEngine& operator=(const CheckpointEngine&) = delete;

  // Snapshots `tensors` into the host buffer pool and returns; the rest runs in the background.
  // InvalidArgument for a duplicate name, a bad slice or a step not above the previous save's.
  // The handle fails with AlreadyExists if another process committed this step with different
  // data (or saved this rank of it at the same time): no two writers are both told "saved".
  Result<std::shared_ptr<SaveHandle>> Save(std::span<const SaveTensor> tensors,
                                           const SaveOptions& options);
  // Waits for every save in flight to finish; the first save error since the last WaitAll.
  Status WaitAll();

  // Every step with a manifest or parts, ascending (CheckpointInfo); a damaged manifest is a
  // damaged entry, not an error. Errors only for a failing store.
  Result<std::vector<CheckpointInfo>> List();
  // The newest committed step: the step the latest pointer names if its manifest reads back
  // whole; otherwise (no pointer, or it names a missing or damaged step) the newest step whose
  // manifest does. A damaged pointed-at step adds one warning naming it to `warnings`, or, when
  // that is null, prints it on stderr. NotFound if there is none.
  Result<int64_t> LatestStep(std::vector<std::string>* warnings = nullptr);
  // The commit record of `step`, checked: NotFound when there is none, DataLoss (or the
  // parser's InvalidArgument) naming the object when it is damaged.
  Result<CheckpointManifest> ReadManifest(int64_t step);
  // Fills the targets from the checkpoint, fetching chunks in parallel from the local tier,
  // then the peers, then the durable tier, verifying each. Errors name the tensor and why
  // (missing, dtype or shape mismatch, a chunk missing or corrupt in every source).
  Status Restore(const CheckpointManifest& manifest, std::span<const RestoreTarget> targets,
                 RestoreStats* stats = nullptr, const ProgressFn& progress = nullptr);

  // Deletes the checkpoint's manifest (and the latest pointer, moved back to the newest other
  // commit) and parts; chunks go at the next GC.
  Status Remove(int64_t step);
  // Applies `retention` (default: the engine's), removes unfinished saves older than the grace
  // period, then runs the chunk store's GC over both tiers: chunks that no root of any
  // registered kind (checkpoints, the chunk store's blobs, ...) references and that are older
  // than the grace period go; chunks of saves in flight in this process are pinned.
  Result<CkptGcReport> CollectGarbage(std::optional<Retention> retention = std::nullopt);
  // Reads every chunk of the checkpoint from the durable tier and checks it.
  Result<VerifyCkptReport> Verify(int64_t step, const ProgressFn& progress = nullptr);

  const EngineOptions& options() const { return options_; }
  ObjectStore& durable() { return *durable_; }

 private:
  struct Impl;
  explicit CheckpointEngine(EngineOptions options);
  EngineOptions options_;
  std::shared_ptr<ObjectStore> durable_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry::ckpt
