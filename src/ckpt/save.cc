// The save pipeline: Save snapshots tensors into host buffers; background threads hash each
// chunk, skip chunks already durable (incremental), write the rest to the local tier and, once
// the whole save is local, drain them to the durable tier, all through the chunk store.
#include <algorithm>
#include <cstring>

#include "ckpt/engine.h"
#include "gantry/ckpt/drain.h"

namespace gantry::ckpt {

void CheckpointEngine::Impl::PieceLocal(const std::shared_ptr<SaveJob>& job) {
  bool reached = false;
  {
    MutexLock lock(job->mu);
    reached = --job->local_left == 0;
  }
  if (reached) {
    std::vector<std::pair<ChunkId, std::shared_ptr<ChunkWrite>>> drain;
    {
      MutexLock lock(job->mu);
      drain.swap(job->to_drain);
    }
    // Chunks left to drain: should this process end before they are durable, the record lets
    // a drain on the node finish the save (drain.h). Written before `local` is reported, and
    // before the drains start, so the commit thread (which waits for them) never races it.
    if (!drain.empty()) WriteDrainRecord(job);
    {
      MutexLock lock(job->handle->mu_);
      job->handle->stats_.local_seconds = SecondsSince(job->start);
    }
    job->handle->Reach(Durability::kLocal);
    for (auto& [id, write] : drain) {
      drain_pool->Submit(
          [this, job, id = id, write = write] { DrainPiece(job, id, write, nullptr, nullptr, 0); });
    }
  }
}

void CheckpointEngine::Impl::WriteDrainRecord(const std::shared_ptr<SaveJob>& job) {
  FinalizePart(*job);
  DrainRecord record;
  // The opened root's own URL: absolute (a relative path would name another directory in the
  // drain's working directory), and the same in the key the commit removes.
  record.durable_url = durable().url();
  record.durable_codec = opt().durable_codec;
  record.part = job->part;
  const std::string key = DrainRecordKey(record.durable_url, opt().job, job->part.step, opt().rank);
  if (!local_store->Put(key, record.ToJson()).ok()) return;
  MutexLock lock(job->mu);
  job->drain_record = true;
}

void CheckpointEngine::Impl::PieceDurable(const std::shared_ptr<SaveJob>& job) {
  MutexLock lock(job->mu);
  --job->durable_left;
  job->cv.NotifyAll();
}

void CheckpointEngine::Impl::ProcessPiece(const std::shared_ptr<SaveJob>& job, size_t index) {
  Piece& p = job->pieces[index];
  const ChunkId id = HashChunk(std::string_view(p.data, p.size));
  if (p.members.empty()) {
    job->part.tensors[p.tensor].slices[0].chunks[p.chunk] = {id, p.size};
  } else {
    job->part.packs[p.pack] = {id, p.size};
    for (const PackMember& m : p.members) {
      job->part.tensors[m.tensor].slices[0].chunks[0] = {id, m.size, m.offset};
    }
  }
  std::shared_ptr<ChunkWrite> write;
  // Pinned before anything can see it, until the save is finished: a GC in this process keeps
  // it whether or not a part references it yet.
  chunks->Pin(id);
  {
    MutexLock jl(job->mu);
    job->pinned.push_back(id);
  }
  {
    MutexLock lock(mu);
    auto k = known.find(id);
    if (k != known.end()) {
      k->second = std::max(k->second, job->part.step);
      MutexLock jl(job->mu);
      job->reused.push_back(id);
    } else if (auto f = inflight.find(id); f != inflight.end()) {
      MutexLock jl(job->mu);
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
    MutexLock lock(job->mu);
    ++job->chunks_written;
    job->bytes_written += p.size;
  }
  if (local_tier >= 0) {
    Status s = chunks->PutChunkToTier(local_tier, id, std::string_view(p.data, p.size));
    if (s.ok()) {
      pool->Release(p.buffer);
      {
        // Drained once the whole save is local: the local tier comes first, so its writes do
        // not share the disk and CPUs with reading chunks back for the durable tier.
        MutexLock lock(job->mu);
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
  Status s;
  if (buffer != nullptr) {
    // Straight from the host buffer (the local tier failed or there is none): header and
    // payload without a joined copy when the durable tier stores chunks raw.
    s = chunks->PutChunkToTier(durable_tier, id, std::string_view(data, size));
    pool->Release(buffer);
  } else {
    // The local copy becomes the copy of record: the chunk store verifies it first (a rotted
    // local disk must not reach the durable tier, where later saves would trust it).
    s = chunks->CopyChunk(local_tier, durable_tier, id).WithContext("drain to durable tier");
  }
  {
    MutexLock lock(mu);
    inflight.erase(id);
    if (s.ok()) known[id] = std::max(known[id], job->part.step);
  }
  if (s.ok()) {
    MutexLock lock(job->mu);
    job->written.push_back(id);
  }
  write->Finish(s);
  if (!s.ok()) job->RecordError(s);
  PieceDurable(job);
}

Result<std::shared_ptr<SaveHandle>> CheckpointEngine::Save(std::span<const SaveTensor> tensors,
                                                           const SaveOptions& so) {
  const auto start = SteadyClock::now();
  Impl& impl = *impl_;
  const EngineOptions& o = options_;
  if (so.step < 0) return InvalidArgument("save: step must not be negative");
  MutexLock one_snapshot(impl.save_mu);
  {
    MutexLock lock(impl.mu);
    if (so.step <= impl.last_step) {
      return InvalidArgument(
          "save: step " + std::to_string(so.step) + " is not above step " +
          std::to_string(impl.last_step) + ", the newest save or checkpoint of job '" + o.job +
          "' (steps only increase): save a later step, or first remove every checkpoint from "
          "step " +
          std::to_string(so.step) + " on through this engine (Checkpointer.remove(step))");
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

  // Validate and lay out, sorted by name (the manifest's order). Slices smaller than the pack
  // threshold go, in that order, into packs of up to chunk_size: a checkpoint of 100k tiny
  // tensors is then a few chunks, not 100k, and an unchanged state packs into the same chunks
  // again (deduplicated by the next save).
  const uint64_t pack_below =
      std::min(o.pack_below_bytes.value_or(o.chunk_size / 16), o.chunk_size);
  size_t open_pack = SIZE_MAX;  // index in job->pieces of the pack being filled
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
    const bool packed = s.nbytes > 0 && s.nbytes < pack_below;  // then one chunk ref
    if (packed) {
      if (open_pack == SIZE_MAX || job->pieces[open_pack].size + s.nbytes > o.chunk_size) {
        open_pack = job->pieces.size();
        Piece p;
        p.pack = part.packs.size();
        part.packs.emplace_back();
        job->pieces.push_back(std::move(p));
      }
      Piece& pack = job->pieces[open_pack];
      pack.members.push_back(
          {part.tensors.size(), static_cast<const char*>(t.data), pack.size, s.nbytes});
      pack.size += s.nbytes;
    }
    for (uint64_t c = 0; c < n_chunks && !packed; ++c) {
      Piece p;
      p.tensor = part.tensors.size();
      p.chunk = c;
      p.src = static_cast<const char*>(t.data) + c * o.chunk_size;
      p.size = std::min(o.chunk_size, s.nbytes - c * o.chunk_size);
      job->pieces.push_back(p);
    }
    rr.bytes_total += s.nbytes;
    TensorRecord tr;
    tr.name = t.name;
    tr.dtype = t.dtype;
    tr.global_shape = t.global_shape;
    tr.slices.push_back(std::move(s));
    part.tensors.push_back(std::move(tr));
  }
  rr.chunks_total = job->pieces.size();
  part.ranks.push_back(rr);
  {
    MutexLock lock(job->mu);  // the job is not shared yet; held so that the analysis can check
    job->local_left = job->pieces.size();
    job->durable_left = job->pieces.size();
  }
  job->handle.reset(new SaveHandle(so.step, so.durability));
  {
    MutexLock lock(job->handle->mu_);
    SaveStats& st = job->handle->stats_;
    st.step = so.step;
    st.tensors = part.tensors.size();
    st.bytes_total = rr.bytes_total;
    st.chunks_total = rr.chunks_total;
  }
  {
    MutexLock lock(impl.mu);
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
        if (p.members.empty()) {
          std::memcpy(p.data, p.src, p.size);
        } else {
          for (const PackMember& m : p.members) std::memcpy(p.data + m.offset, m.src, m.size);
        }
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
    MutexLock lock(job->handle->mu_);
    job->handle->stats_.blocking_seconds = SecondsSince(start);
  }
  if (job->pieces.empty()) job->handle->Reach(Durability::kLocal);
  std::future<void> commit = impl.commit_pool->Submit([&impl, job] { impl.Finish(job); });
  {
    MutexLock lock(impl.mu);
    impl.commits.push_back(std::move(commit));
  }
  return job->handle;
}

}  // namespace gantry::ckpt
