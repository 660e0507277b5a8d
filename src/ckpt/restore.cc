// Restore: plans which byte ranges of which chunks land in which target (resharding row
// slices), then fetches the chunks in parallel through the chunk store's source chain (local
// tier, peers' agents, durable tier), whole chunks straight into the tensors. A pack (small
// slices of many tensors in one chunk) is one fetch, copied out to every tensor it feeds.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <unordered_map>

#include "ckpt/engine.h"

namespace gantry::ckpt {

namespace {

struct Fetch {
  ChunkId id;
  uint64_t size = 0;        // the chunk's raw bytes (a pack's whole size)
  std::string what;         // "restore: tensor 'x'" for errors: the first target it feeds
  size_t more_targets = 0;  // other targets it feeds (a pack)
  const void* last_target = nullptr;
  std::vector<ChunkCopy> copies;
};

}  // namespace

Status CheckpointEngine::Restore(const CheckpointManifest& m,
                                 std::span<const RestoreTarget> targets, RestoreStats* stats_out,
                                 const ProgressFn& progress) {
  const auto start = SteadyClock::now();
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
          // FromJson refuses such refs; a manifest built in memory is checked here, before
          // any copy could read past the chunk.
          const PackRecord* pack = m.FindPack(c.id);
          const uint64_t stored = pack != nullptr ? pack->size : c.size;
          if (c.offset > stored || c.size > stored - c.offset) {
            return InvalidArgument(what + ": bytes " + std::to_string(c.offset) + "+" +
                                   std::to_string(c.size) + " reach outside chunk " + c.id.ToHex() +
                                   " of " + std::to_string(stored) + " bytes");
          }
          auto [it, fresh] = index.try_emplace(c.id, fetches.size());
          if (fresh) fetches.push_back({c.id, stored, what, 0, &t, {}});
          Fetch& f = fetches[it->second];
          if (f.last_target != &t) {
            ++f.more_targets;
            f.last_target = &t;
          }
          // The ref's bytes start at c.offset in the chunk (0 unless the chunk is a pack).
          f.copies.push_back({c.offset + (lo - chunk_begin), hi - lo,
                              static_cast<char*>(t.data) + (lo - want_begin)});
        }
        chunk_begin += c.size;
      }
    }
  }

  // The source chain (local tier, peers, durable tier) is the chunk store's; one reader for the
  // whole restore, so a peer found dead is skipped for every later chunk.
  Result<std::unique_ptr<ChunkStore::ChunkReader>> opened = impl_->chunks->NewReader();
  if (!opened.ok()) return opened.status().WithContext("restore");
  ChunkStore::ChunkReader& reader = **opened;

  std::atomic<uint64_t> done_bytes{0}, from_local{0}, from_peers{0}, from_durable{0}, corrupt{0};
  Mutex progress_mu;
  auto fetch_one = [&](Fetch& f) -> Status {
    uint64_t bad = 0;
    Result<ChunkSource> from = reader.ReadInto(f.id, f.size, f.copies, &bad);
    corrupt.fetch_add(bad);
    if (!from.ok()) {
      const std::string others = f.more_targets > 0 ? " (and " + std::to_string(f.more_targets) +
                                                          " more tensors packed in that chunk)"
                                                    : "";
      return Status(from.status().code(), f.what + others + ": " + from.status().message());
    }
    (*from == ChunkSource::kCache  ? from_local
     : *from == ChunkSource::kPeer ? from_peers
                                   : from_durable)
        .fetch_add(1);
    uint64_t bytes = 0;
    for (const ChunkCopy& c : f.copies) bytes += c.length;
    const uint64_t now = done_bytes.fetch_add(bytes) + bytes;
    if (progress) {
      MutexLock lock(progress_mu);
      progress(now, total);
    }
    return Status::Ok();
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

}  // namespace gantry::ckpt
