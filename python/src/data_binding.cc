// _gantry's dataset reader: the binding of gantry::data's shard sources and per-reader iterator
// (include/gantry/data/loader.h) that gantry/data.py builds StreamingDataset on.
//
//   source = _gantry.DataSource("s3://bkt/train", wds_shard_samples=None, verify_hashes=False,
//                               cache_dir=None, cache_bytes=0, fallback_urls=None, job=None,
//                               map_files=None, large_member_bytes=None)
//   reader = _gantry.DataReader(source, seed=0, shuffle=True, window=262144, epoch=0,
//                               world=1, rank=0, workers=0, worker=0, batch=1, start=0,
//                               read_ahead=4, zero_copy=False, copy_threads=-1)
//   for position, key, fields in reader: ...   # fields: [(name, encoding, bytes|memoryview)]
//   positions, keys, fields, columns = reader.next_batch(64, packed=False)
//   _gantry.data_stats("s3://bkt/train", job)   # the loader's metrics, a dict
//
// The order and the iteration are C++; fetching a shard releases the GIL. With zero_copy each
// field is a read-only memoryview into its shard's bytes (a mapped file, or the fetched copy):
// every view of a shard slices one ShardBuffer that holds the shard (its mapping and cache pin)
// alive for as long as any view of it exists, so views outlive the reader and the source
// safely. Without it, each field's bytes are copied into a Python bytes object.
// Objects are for one thread; a DataLoader worker opens its own (they are not picklable). A
// reader refuses a second thread's call while one is in progress, and any call in a child forked
// after it was made (its read-ahead and copy threads exist only in the parent): EngineError.
#include <pthread.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "gantry/common/buffer_pool.h"
#include "gantry/common/heap.h"
#include "gantry/common/metrics.h"
#include "gantry/common/parallel_copy.h"
#include "gantry/data/batch_ring.h"
#include "gantry/data/dataset.h"
#include "gantry/data/loader.h"
#include "gantry/data/loader_metrics.h"
#include "gantry/data/order.h"
#include "gantry/data/shard_bytes.h"
#include "module.h"

namespace py = pybind11;

namespace gantry::python {
namespace {

using data::EpochOrder;
using data::OrderOptions;
using data::SampleIterator;
using data::ShardSource;

template <typename T>
T Unwrap(Result<T> result) {
  if (!result.ok()) ckpt::ThrowStatus(result.status());
  return std::move(result).value();
}

// `size` bytes at `data` as a read-only buffer of unsigned bytes: what every object here that
// hands out bytes in place (a shard, a batch block) gives the buffer protocol.
py::buffer_info ReadOnlyBytes(const char* data, uint64_t size) {
  return py::buffer_info(const_cast<char*>(data), 1, py::format_descriptor<uint8_t>::format(), 1,
                         {static_cast<ssize_t>(size)}, {ssize_t{1}}, /*readonly=*/true);
}

// How a block pickles where it cannot travel as where it lies: a copy of its bytes.
py::tuple ReduceToBytes(const char* data, uint64_t size) {
  return py::make_tuple(py::module_::import("builtins").attr("bytes"),
                        py::make_tuple(py::bytes(data, size)));
}

// A shard's bytes through the buffer protocol, read-only: what a reader's memoryviews slice.
struct ShardBuffer {
  std::shared_ptr<const data::LoadedShard> shard;
};

struct PySource {
  std::shared_ptr<ShardSource> source;
  std::string url;
};

PySource OpenSource(const std::string& url, std::optional<std::vector<uint64_t>> wds_samples,
                    bool verify_hashes, std::optional<std::string> cache_dir, uint64_t cache_bytes,
                    std::optional<std::vector<std::string>> fallback_urls,
                    std::optional<std::string> job, std::optional<bool> map_files,
                    std::optional<uint64_t> large_member_bytes, bool packed_batches) {
  Result<std::unique_ptr<ShardSource>> opened = [&]() -> Result<std::unique_ptr<ShardSource>> {
    py::gil_scoped_release release;
    GANTRY_ASSIGN_OR_RETURN(data::DatasetLocation d, data::LocateDataset(url, {}));
    data::ShardSourceOptions options;
    options.verify_hashes = verify_hashes;
    if (wds_samples) options.wds_shard_samples = *wds_samples;
    if (cache_dir) options.cache.dir = *cache_dir;
    options.cache.capacity_bytes = cache_bytes;
    if (fallback_urls) options.fallback_urls = *fallback_urls;
    if (job) options.job = *job;
    options.map_files = map_files;
    if (large_member_bytes) options.large_member_bytes = *large_member_bytes;
    options.packed_batches = packed_batches;
    return data::OpenShardSource(std::move(d), options);
  }();
  return PySource{std::shared_ptr<ShardSource>(Unwrap(std::move(opened))), url};
}

// Forks of this process so far, as this process sees it: a child's count is its parent's plus
// one. Cheaper than getpid() (a system call) on every batch.
uint64_t g_forks = 0;

uint64_t ForksSoFar() {
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr, [] { ++g_forks; });
    return true;
  }();
  (void)registered;
  return g_forks;
}

// A DataLoader worker's ring of packed batches in shared memory (include/gantry/data/batch_ring.h),
// as Python holds it: made in the worker, passed to next_batch(ring=...) (or made there, by a
// callable given instead, once the first block's size is known).
struct PyBatchRing {
  std::shared_ptr<data::BatchRing> ring;
  uint64_t made_after_fork = ForksSoFar();
  bool made_here() const { return made_after_fork == ForksSoFar(); }
};

// Every ring this process produces into or has opened to read from, by path: a block that comes
// through the pipe names its ring's path, and the ring is mapped once, not per block. Used with
// the GIL held.
std::map<std::string, std::shared_ptr<data::BatchRing>>& Rings() {
  static auto* rings = new std::map<std::string, std::shared_ptr<data::BatchRing>>();
  return *rings;
}

// A block of a batch ring through the buffer protocol, read-only: one packed batch's bytes. It
// holds a reference to the block, dropped when the object goes, after every view of it. Pickled
// in the process that produced it, it travels as where it lies (batch_block rebuilds it on the
// other side, which maps the ring); pickled anywhere else, as a copy of its bytes.
class RingBlock {
 public:
  RingBlock(std::shared_ptr<data::BatchRing> ring, const data::BatchRing::Block& block)
      : ring_(std::move(ring)), block_(block) {}
  // Inherited by a forked child, the reference is the parent's: the child leaves it alone.
  ~RingBlock() {
    if (made_after_fork_ == ForksSoFar()) ring_->Unref(block_.offset);
  }
  RingBlock(const RingBlock&) = delete;
  RingBlock& operator=(const RingBlock&) = delete;

  py::buffer_info Buffer() const { return ReadOnlyBytes(block_.data, block_.size); }
  uint64_t size() const { return block_.size; }

  py::tuple Reduce() const {
    if (ring_->producer() && made_after_fork_ == ForksSoFar()) {
      ring_->Ref(block_.offset);  // the descriptor's, taken over by batch_block
      // A module-level Python function: pickle cannot name a pybind11 function.
      return py::make_tuple(py::module_::import("gantry.data").attr("_batch_block"),
                            py::make_tuple(ring_->path(), block_.offset, block_.seq, block_.size));
    }
    return ReduceToBytes(block_.data, block_.size);
  }

 private:
  const std::shared_ptr<data::BatchRing> ring_;
  const data::BatchRing::Block block_;
  const uint64_t made_after_fork_ = ForksSoFar();
};

py::object MakeRingBlock(std::shared_ptr<data::BatchRing> ring,
                         const data::BatchRing::Block& block) {
  return py::cast(new RingBlock(std::move(ring), block), py::return_value_policy::take_ownership);
}

// A packed batch's block in pooled memory (include/gantry/common/buffer_pool.h) through the
// buffer protocol, read-only: a large block read in process. Its memory goes back to the pool
// when the object goes, after every view of it, for a later block: a new bytes object per
// batch lands in fresh pages whenever the loop holds a batch or two (each touched page an exit
// to the hypervisor on a VM). Pickled, a copy of its bytes.
class PooledBlock {
 public:
  // A block of `size` bytes, not filled yet; nullptr where no memory could be mapped.
  static std::unique_ptr<PooledBlock> Make(uint64_t size) {
    Result<std::pair<char*, uint64_t>> taken = BufferPool::Get().Take(std::max<uint64_t>(size, 1));
    if (!taken.ok()) return nullptr;
    return std::unique_ptr<PooledBlock>(new PooledBlock(taken->first, taken->second, size));
  }
  ~PooledBlock() { BufferPool::Get().Give(data_, cap_); }
  PooledBlock(const PooledBlock&) = delete;
  PooledBlock& operator=(const PooledBlock&) = delete;

  char* data() const { return data_; }
  uint64_t size() const { return size_; }
  py::buffer_info Buffer() const { return ReadOnlyBytes(data_, size_); }
  py::tuple Reduce() const { return ReduceToBytes(data_, size_); }

 private:
  PooledBlock(char* data, uint64_t cap, uint64_t size) : data_(data), cap_(cap), size_(size) {}

  char* const data_;
  const uint64_t cap_;
  const uint64_t size_;
};

// Forgets the rings this process maps to read whose producers are done with them (their blocks
// still held stay mapped): those whose process is gone, and those whose file is, which a
// producer removes as it exits or retires a ring it grew out of, so that neither a new process
// given an old producer's pid nor a worker's outgrown ring keeps a mapping, and its memory, here.
void ForgetFinishedRings(const std::string& except) {
  auto& rings = Rings();
  for (auto r = rings.begin(); r != rings.end();) {
    const bool gone = r->first != except && !r->second->producer() &&
                      ((kill(r->second->producer_pid(), 0) != 0 && errno == ESRCH) ||
                       (access(r->first.c_str(), F_OK) != 0 && errno == ENOENT));
    r = gone ? rings.erase(r) : std::next(r);
  }
}

// The block a descriptor names, from a ring this process maps, mapping it at its first block.
// Finished rings are forgotten then, and every kSweepEvery blocks: a worker that outgrew its
// ring sends no new ring's first block after the one that replaced it.
py::object BatchBlock(const std::string& path, uint64_t offset, uint64_t seq, uint64_t size) {
  constexpr uint64_t kSweepEvery = 64;  // an access() per ring per 64 blocks, not per block
  static uint64_t blocks = 0;
  auto& rings = Rings();
  auto it = rings.find(path);
  if (it == rings.end()) {
    ForgetFinishedRings(path);
    it = rings.emplace(path, Unwrap(data::BatchRing::Open(path))).first;
  } else if (++blocks % kSweepEvery == 0 && rings.size() > 1) {
    ForgetFinishedRings(path);  // erases no entry but path's other rings': `it` stays valid
  }
  return MakeRingBlock(it->second, Unwrap(it->second->Adopt(offset, seq, size)));
}

class PyReader {
 public:
  PyReader(const PySource& source, const OrderOptions& options, uint64_t epoch,
           const data::Slot& slot, uint64_t start, uint32_t read_ahead, bool zero_copy,
           int copy_threads)
      : made_after_fork_(ForksSoFar()),
        zero_copy_(zero_copy),
        copy_threads_(copy_threads < 0 ? ParallelCopy::DefaultHelpers() : copy_threads),
        source_(source.source),
        order_(Unwrap(EpochOrder::Create(source_->shard_samples(), options, epoch))),
        it_(Unwrap(SampleIterator::Create(
            *source_, order_, slot, start,
            data::ReadAheadOptions{read_ahead, std::min<uint32_t>(read_ahead, 2)}))) {}
  // The read-ahead's threads are joined without the GIL: a fetch in flight may take a while,
  // and it never needs the GIL itself.
  ~PyReader() {
    py::gil_scoped_release release;
    if (ahead_) (void)ParallelCopy::Finish(ahead_->copy);
    it_.StopReadAhead();
  }

  // Samples not returned yet: those read but pending (read ahead, or left by an error) too.
  uint64_t remaining() const { return pending_ + it_.remaining(); }
  uint64_t copied_ahead() const { return copied_ahead_; }
  bool copying_ahead() const { return ahead_.has_value(); }
  uint64_t shards_read() const { return it_.shards_read(); }
  // False in a child forked after the reader was made.
  bool made_here() const { return made_after_fork_ == ForksSoFar(); }

  // (position, key, [(name, encoding, bytes)]); StopIteration at the end.
  py::tuple Next() {
    const Call call(*this);
    DropAhead();
    if (pending_ > 0) {
      // Samples a batch call left pending (read ahead, or read before an error) come first.
      // One that fails as it is handed out (its file cut short) is gone, as below.
      data::ShardBytes::EnsureGuard();
      py::tuple sample;
      try {
        sample = SampleTuple(batch_[0]);
      } catch (...) {
        Release(1, pending_ - 1);
        throw;
      }
      Release(1, pending_ - 1);
      return sample;
    }
    Result<bool> more = [&] {
      py::gil_scoped_release release;  // may fetch a shard
      return it_.Next(sample_);
    }();
    if (!Unwrap(std::move(more))) throw py::stop_iteration();
    // Python code may have replaced the SIGBUS handler since (faulthandler.enable()).
    data::ShardBytes::EnsureGuard();
    return SampleTuple(sample_);
  }

  // Up to `n` samples column-wise, read with the GIL released once for all of them, so a
  // batch costs Python a handful of objects per sample rather than a tuple and a dict:
  //   (positions, keys, fields [(name, encoding)] in first-seen order, columns)
  // Unpacked, columns holds one list per field: each sample's value as Next gives it
  // (memoryview or bytes), None where a sample lacks the field. Packed, every field's bytes
  // are copied into one block and columns is (block, spans): spans is bytes of native int64
  // (begin, end) pairs, field-major, begin -1 where a sample lacks the field; the block is one
  // new bytes object, which pickles as one buffer. One copy, instead of one Python object per
  // field. With `ahead_ok` (in process, no ring), a block of 2 MiB or more is a PooledBlock,
  // and the next batch's is read and copied on the helpers before this call returns
  // (PrepareAhead).
  // StopIteration when nothing is left; an error (a damaged shard) keeps the samples already
  // read for the next call, so no sample is skipped.
  py::tuple NextBatch(uint64_t n, bool packed, const py::object& ring, bool ahead_ok) {
    const Call call(*this);
    if (n == 0) throw py::value_error("a batch needs at least one sample");
    // A block copied ahead is this batch where it was read for the same call: the same size,
    // packed, with no ring. Otherwise its samples are still pending, read before any other.
    std::optional<Ahead> ahead;
    std::optional<Ahead> next;  // the batch after a block copied ahead, read meanwhile
    // An exception before `next` is handed on (below) waits for its copy without the GIL.
    const FinishedWithoutGil next_finished{next};
    if (ahead_) {
      const bool take = packed && ahead_ok && ring.is_none() && ahead_->n == n;
      // The batch after it is read while the helpers finish this one, and its copy starts as
      // soon as they have: they never wait for the reader's thread.
      if (take) next = TryPrepareAhead(n, ahead_->count);
      bool copied = false;
      {
        py::gil_scoped_release release;
        copied = ParallelCopy::Finish(ahead_->copy);
        if (next) next->copy = Copier().Start(next->pieces);
      }
      if (take) {
        ahead = std::move(ahead_);
        ahead->copied = copied;
      }
      ahead_.reset();
    }
    if (!ahead) {
      // Never more slots than samples are left: a huge n (batch_size=10**9) must not allocate.
      n = std::min<uint64_t>(n, pending_ + it_.remaining());
      if (batch_.size() < n) batch_.resize(n);
      if (pending_ < n) {
        Status failed = [&] {
          py::gil_scoped_release release;  // may fetch shards
          uint64_t read = 0;
          // Large members of local shards stay in their files (UnreadFields): packed, they are
          // read straight into the block; unpacked, Value reads each into its shard first.
          Status s = it_.NextBatch(std::span<data::Sample>(batch_.data() + pending_, n - pending_),
                                   &read, data::UnreadFields::kLeave);
          pending_ += read;
          return s;
        }();
        if (!failed.ok()) ckpt::ThrowStatus(failed);
      }
    }
    // A call for fewer samples than a failed call left pending takes the first of them; the
    // rest wait for the next call, in order.
    // The samples stay pending until Release: a call that fails before it (no memory for the
    // block) leaves them for the next.
    const uint64_t count = ahead ? ahead->count : std::min(pending_, n);
    const uint64_t left = pending_ - count;
    if (count == 0) throw py::stop_iteration();
    data::ShardBytes::EnsureGuard();

    const Columns cols = ColumnsOf(0, count);
    py::list positions(count);
    py::list keys(count);
    for (uint64_t i = 0; i < count; ++i) {
      positions[i] = py::int_(batch_[i].position);
      keys[i] = Key(batch_[i]);
    }
    py::list fields;
    for (const auto& [name, encoding] : cols.names) {
      fields.append(py::make_tuple(py::str(name.data(), name.size()),
                                   py::str(encoding.data(), encoding.size())));
    }
    if (!packed) {
      py::list lists;
      try {
        for (size_t c = 0; c < cols.names.size(); ++c) {
          py::list column(count);
          for (uint64_t i = 0; i < count; ++i) {
            column[i] =
                cols.cells[c][i] == nullptr ? py::none() : Value(batch_[i], *cols.cells[c][i]);
          }
          lists.append(column);
        }
      } catch (...) {
        // A field whose file was cut short before it was read (DataLoss): the batch is not
        // handed out, and its samples are gone, as a packed batch's are below.
        Release(count, left);
        throw;
      }
      Release(count, left);
      return py::make_tuple(positions, keys, fields, lists);
    }
    py::object block;
    std::vector<int64_t> spans;
    bool copied = true;
    bool split = false;
    if (ahead) {
      block = std::move(ahead->block);
      spans = std::move(ahead->spans);
      copied = ahead->copied;
      split = true;
    } else {
      const uint64_t total = SpansOf(cols, count, spans);
      // Filled before anyone else can see it, so writing into it is safe: a block of the
      // worker's batch ring where there is one with room, else a new bytes object.
      char* to = nullptr;
      // A callable in place of the ring makes it once the first block's size is known
      // (sized from it), so the first block goes through shared memory too.
      py::object the_ring = ring;
      if (!ring.is_none() && !py::isinstance<PyBatchRing>(ring)) {
        try {
          the_ring = ring(total);
        } catch (py::error_already_set&) {
          Release(count, left);  // this batch's samples are gone with the error
          throw;
        }
      }
      if (py::isinstance<PyBatchRing>(the_ring)) {
        const auto& r = the_ring.cast<const PyBatchRing&>();
        std::optional<data::BatchRing::Block> b;
        if (r.made_here()) b = r.ring->Allocate(total);
        if (b) {
          block = MakeRingBlock(r.ring, *b);
          to = b->data;
        }
      }
      // Large blocks are split with helper threads; smaller ones are copied as they always
      // were, without a list of pieces (bench/reader_ab.py, small set: 0.96-0.97 of the
      // base with the list built for every block, 0.99-1.01 without). A block with a field
      // still in its shard's file takes the pieces too: those are read from the file.
      split = copy_threads_ > 0 && total >= 2 * kMinCopyShare;
      if (to == nullptr && split && ahead_ok) to = NewPooled(total, block);
      if (to == nullptr) to = NewBytes(total, block);
      bool unread = false;
      for (uint64_t i = 0; i < count && !unread; ++i) {
        unread = !batch_[i].shard->bytes()->complete();
      }
      if (split || unread) PiecesOf(cols, 0, count, spans, to, pieces_);
      py::gil_scoped_release release;
      if (split || unread) {
        copied = Copier().Run(pieces_, split ? kMinCopyShare : SIZE_MAX);
      } else {
        for (size_t c = 0; c < cols.names.size(); ++c) {
          for (uint64_t i = 0; i < count; ++i) {
            if (cols.cells[c][i] == nullptr) continue;
            const std::string_view b = cols.cells[c][i]->bytes;
            if (!b.empty()) std::memcpy(to + spans[(c * count + i) * 2], b.data(), b.size());
          }
        }
      }
    }
    if (!copied) {
      // A shard's file was cut short (or failed to read) since it was opened: as a mapping
      // cut short below, the batch is not handed out.
      const std::string name = source_->ShardName(FirstUnread(count).ref.shard);
      Release(count, left);
      HandOn(next);
      ckpt::ThrowStatus(
          DataLoss("shard '" + name + "': its file was cut short while read, under this batch"));
    }
    // The copy is the first touch of these bytes: a file cut short under its mapping faulted
    // to zeros just now. Such a block is not handed out as if it were data (a view already
    // handed out reads zeros; this block is not out yet): DataLoss naming the shard, and the
    // batch's samples are gone from this reader, as its order cannot take them back.
    for (uint64_t i = 0; i < count; ++i) {
      if (batch_[i].shard->bytes()->damaged()) {
        const std::string name = source_->ShardName(batch_[i].ref.shard);
        Release(count, left);
        HandOn(next);
        ckpt::ThrowStatus(DataLoss("shard '" + name +
                                   "': its file was cut short while mapped, under this batch"));
      }
    }
    if (ahead) ++copied_ahead_;
    py::tuple columns = py::make_tuple(block, py::bytes(reinterpret_cast<const char*>(spans.data()),
                                                        spans.size() * sizeof(int64_t)));
    Release(count, left);
    // A large block's copy is what a batch costs: the next one's starts now, on the helpers,
    // while the caller's loop runs.
    if (next) {
      HandOn(next);
    } else if (split && ahead_ok && ring.is_none()) {
      ahead_ = TryPrepareAhead(n, 0);
      if (ahead_) ahead_->copy = Copier().Start(ahead_->pieces);
    }
    return py::make_tuple(positions, keys, fields, columns);
  }

 private:
  // A call that reads, from entry to return. The reader's buffers and iterator are one thread's,
  // and each call releases the GIL while it reads, so a second thread could enter meanwhile: it
  // is refused rather than left to corrupt them. So is a call in a forked child, which would
  // wait forever for read-ahead threads that were not forked with it. busy_ is read and set
  // with the GIL held, which orders it between threads.
  class Call {
   public:
    explicit Call(PyReader& r) : r_(r) {
      if (!r.made_here()) {
        ckpt::ThrowStatus(FailedPrecondition(
            "this DataReader was made before the process forked; its read-ahead threads exist "
            "only in the parent: make a new reader in this process"));
      }
      if (r.busy_) {
        ckpt::ThrowStatus(FailedPrecondition(
            "this DataReader is reading on another thread: a reader is for one thread at a "
            "time (make one per thread)"));
      }
      r.busy_ = true;
    }
    ~Call() { r_.busy_ = false; }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    PyReader& r_;
  };

  // Keys may not be UTF-8 (tar member names are bytes): decoded with surrogateescape.
  static py::object Key(const data::Sample& sample) {
    PyObject* key = PyUnicode_DecodeUTF8(
        sample.key.data(), static_cast<Py_ssize_t>(sample.key.size()), "surrogateescape");
    if (key == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(key);
  }

  // A packed batch read and being copied ahead, for the next call (PrepareAhead): its samples
  // are batch_[0, count), pending.
  struct Ahead {
    uint64_t n = 0;      // the batch size asked for
    uint64_t count = 0;  // samples in it
    py::object block;    // a PooledBlock the copy fills
    std::vector<int64_t> spans;
    std::vector<CopyPiece> pieces;  // the copy's, which reads them until it is finished
    ParallelCopy::Started copy;
    bool copied = false;  // set once the copy is finished: every piece read whole
  };

  // A sample as Next gives it.
  py::tuple SampleTuple(const data::Sample& sample) {
    py::list fields;
    for (const data::SampleField& f : sample.fields) {
      fields.append(py::make_tuple(py::str(f.name.data(), f.name.size()),
                                   py::str(f.encoding.data(), f.encoding.size()),
                                   Value(sample, f)));
    }
    return py::make_tuple(sample.position, Key(sample), fields);
  }

  // Finishes and drops a block copied ahead; its samples stay pending.
  void DropAhead() {
    if (!ahead_) return;
    {
      py::gil_scoped_release release;
      (void)ParallelCopy::Finish(ahead_->copy);
    }
    ahead_.reset();
  }

  // Makes `next`, the batch read ahead after the one being returned, the one the next call
  // takes: once Release has moved its samples to the front of batch_.
  void HandOn(std::optional<Ahead>& next) {
    if (next) ahead_ = std::move(next);
    next.reset();
  }

  // Waits, without the GIL, for the copy of a batch read ahead that an exception leaves
  // behind, before it goes.
  struct FinishedWithoutGil {
    std::optional<Ahead>& ahead;
    ~FinishedWithoutGil() {
      if (ahead && ahead->copy.pending()) {
        py::gil_scoped_release release;
        (void)ParallelCopy::Finish(ahead->copy);
      }
    }
  };

  // PrepareAhead, whose failure (no memory) only means nothing is read ahead: the call that
  // makes it has a batch to return.
  std::optional<Ahead> TryPrepareAhead(uint64_t asked, uint64_t base) {
    try {
      return PrepareAhead(asked, base);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }

  // The fields of batch_[first, first + count), in first-seen order (a sample's field is found by
  // name: fields are few), and each sample's value of each: cells[field][sample], nullptr where the
  // sample lacks it.
  struct Columns {
    std::vector<std::pair<std::string_view, std::string_view>> names;  // (name, encoding)
    std::vector<std::vector<const data::SampleField*>> cells;
  };
  Columns ColumnsOf(uint64_t first, uint64_t count) const {
    Columns cols;
    for (uint64_t i = 0; i < count; ++i) {
      for (const data::SampleField& f : batch_[first + i].fields) {
        size_t c = 0;
        while (c < cols.names.size() && cols.names[c].first != f.name) ++c;
        if (c == cols.names.size()) {
          cols.names.emplace_back(f.name, f.encoding);
          cols.cells.emplace_back(count, nullptr);
        }
        cols.cells[c][i] = &f;
      }
    }
    return cols;
  }

  // A packed block's (begin, end) of each value, field-major, -1 where a sample lacks the
  // field, into `spans`; returns the block's size.
  static uint64_t SpansOf(const Columns& cols, uint64_t count, std::vector<int64_t>& spans) {
    spans.assign(cols.names.size() * count * 2, -1);
    uint64_t total = 0;
    for (size_t c = 0; c < cols.names.size(); ++c) {
      for (uint64_t i = 0; i < count; ++i) {
        if (cols.cells[c][i] == nullptr) continue;
        spans[(c * count + i) * 2] = static_cast<int64_t>(total);
        total += cols.cells[c][i]->bytes.size();
        spans[(c * count + i) * 2 + 1] = static_cast<int64_t>(total);
      }
    }
    return total;
  }

  // The copy of batch_[first, first + count) into the block at `to`, as pieces (read from their
  // files where a field is still in its shard's).
  void PiecesOf(const Columns& cols, uint64_t first, uint64_t count,
                const std::vector<int64_t>& spans, char* to, std::vector<CopyPiece>& pieces) const {
    pieces.clear();
    for (size_t c = 0; c < cols.names.size(); ++c) {
      for (uint64_t i = 0; i < count; ++i) {
        if (cols.cells[c][i] == nullptr) continue;
        batch_[first + i].shard->bytes()->AppendCopyPieces(cols.cells[c][i]->bytes,
                                                           to + spans[(c * count + i) * 2], pieces);
      }
    }
  }

  // A new bytes object of `size` bytes, not filled yet, into `block`; where its bytes lie.
  static char* NewBytes(uint64_t size, py::object& block) {
    PyObject* raw = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(size));
    if (raw == nullptr) throw py::error_already_set();
    block = py::reinterpret_steal<py::object>(raw);
    return PyBytes_AS_STRING(raw);
  }

  // A new PooledBlock of `size` bytes, not filled yet, into `block`; where its bytes lie, or
  // nullptr where no memory could be had for it.
  static char* NewPooled(uint64_t size, py::object& block) {
    std::unique_ptr<PooledBlock> made = PooledBlock::Make(size);
    if (made == nullptr) return nullptr;
    char* to = made->data();
    block = py::cast(made.release(), py::return_value_policy::take_ownership);
    return to;
  }

  const ParallelCopy& Copier() {
    if (copy_ == nullptr) copy_ = std::make_unique<ParallelCopy>(copy_threads_);
    return *copy_;
  }

  // The batch of `asked` samples after the first `base` pending ones (a block being copied, or
  // none), read ahead for the next call (NextBatch) with its block laid out; its copy is for the
  // caller to start, so that it runs on the helpers while the caller's loop does. Its samples
  // are pending meanwhile, so a call that asks for something else reads them as if nothing had
  // been read ahead. Only samples whose shards are here already are read (a batch that is
  // ready does not wait for the next one's shard): short of `asked`, or at an error, nothing is
  // prepared and the samples read wait, pending, for the next call, which reads the rest (and
  // meets the error itself, as it would have without reading ahead). Nothing for a small block.
  std::optional<Ahead> PrepareAhead(uint64_t asked, uint64_t base) {
    const uint64_t have = pending_ - base;
    const uint64_t n = std::min<uint64_t>(asked, have + it_.remaining());
    if (n == 0 || have > n) return std::nullopt;
    if (have < n) {
      // Slots are moved, not copied, as batch_ grows: a block being copied reads from its
      // shards' bytes, which stay where they are.
      if (batch_.size() < base + n) batch_.resize(base + n);
      uint64_t read = 0;
      const Status s = [&] {
        py::gil_scoped_release release;
        return it_.NextReadyBatch(std::span<data::Sample>(batch_.data() + base + have, n - have),
                                  &read, data::UnreadFields::kLeave);
      }();
      pending_ += read;
      if (!s.ok() || have + read < n) return std::nullopt;
    }
    // A shard mapped from its file is left alone: a file cut short under the mapping is
    // caught by the SIGBUS guard that each call puts back on top (EnsureGuard), which Python
    // code may replace (faulthandler.enable()) while a copy runs between calls.
    for (uint64_t i = 0; i < n; ++i) {
      if (batch_[base + i].shard->bytes()->mapped()) return std::nullopt;
    }
    const Columns cols = ColumnsOf(base, n);
    Ahead a;
    const uint64_t total = SpansOf(cols, n, a.spans);
    if (total < 2 * kMinCopyShare) return std::nullopt;  // the next call copies it itself
    a.n = asked;
    a.count = n;
    char* to = NewPooled(total, a.block);
    if (to == nullptr) return std::nullopt;  // the next call's own block, or its MemoryError
    PiecesOf(cols, base, n, a.spans, to, a.pieces);
    return a;
  }

  // The first `count` samples of batch_ are out: they keep their shards alive only until the
  // next batch reuses their slots. The `left` after them move to the front, pending.
  void Release(uint64_t count, uint64_t left) {
    for (uint64_t i = 0; i < count; ++i) batch_[i].shard.reset();
    for (uint64_t i = 0; i < left; ++i) batch_[i] = std::move(batch_[count + i]);
    pending_ = left;
  }

  // The first of the batch's `count` samples whose shard has bytes not read yet.
  const data::Sample& FirstUnread(uint64_t count) const {
    for (uint64_t i = 0; i < count; ++i) {
      if (!batch_[i].shard->bytes()->complete()) return batch_[i];
    }
    return batch_[0];
  }

  // A field of `sample` as Python sees it: with zero_copy a slice of its shard's memoryview
  // (a new view object, no copy, which keeps the shard alive), else a bytes copy. A field its
  // shard has not read yet is read into it first.
  py::object Value(const data::Sample& sample, const data::SampleField& f) {
    Status filled;
    if (!sample.shard->bytes()->complete()) {
      py::gil_scoped_release release;  // may read a large member from its file
      filled = sample.shard->bytes()->Fill(f.bytes);
    }
    if (!filled.ok()) {
      ckpt::ThrowStatus(
          DataLoss("shard '" + source_->ShardName(sample.ref.shard) + "': " + filled.message()));
    }
    if (zero_copy_ && sample.shard != view_shard_) {
      view_ = py::memoryview(py::cast(ShardBuffer{sample.shard}));
      view_shard_ = sample.shard;
    }
    const std::string_view whole = zero_copy_ ? sample.shard->bytes()->view() : std::string_view();
    const auto offset = static_cast<uint64_t>(f.bytes.data() - whole.data());
    if (zero_copy_ && (f.bytes.empty() || (f.bytes.data() >= whole.data() &&
                                           offset + f.bytes.size() <= whole.size()))) {
      const uint64_t begin = f.bytes.empty() ? 0 : offset;
      py::slice range(static_cast<ssize_t>(begin), static_cast<ssize_t>(begin + f.bytes.size()), 1);
      return view_[range];
    }
    return py::bytes(f.bytes.data(), f.bytes.size());
  }

  // A packed block's copy is split with helper threads once each thread's share would be at
  // least this much (docs/performance.md: below it a helper's wake-up costs more than it saves).
  static constexpr size_t kMinCopyShare = size_t{1} << 20;

  const uint64_t made_after_fork_;  // ForksSoFar() when made
  bool busy_ = false;               // a Call is in progress
  const bool zero_copy_;
  const int copy_threads_;              // helpers of a packed block's copy
  std::unique_ptr<ParallelCopy> copy_;  // started at the first block large enough
  std::vector<CopyPiece> pieces_;       // NextBatch's copy, reused
  std::optional<Ahead> ahead_;
  uint64_t copied_ahead_ = 0;  // blocks handed out from ahead_
  std::shared_ptr<ShardSource> source_;
  EpochOrder order_;
  SampleIterator it_;
  data::Sample sample_;
  std::vector<data::Sample> batch_;  // NextBatch's samples, reused
  uint64_t pending_ = 0;             // samples of batch_ read but not yet returned (an error)
  std::shared_ptr<const data::LoadedShard> view_shard_;  // the shard view_ is of
  py::object view_;
};

// DataReader's deleter: a reader made before a fork is not destroyed in the child, as its
// destructor would join read-ahead and copy threads that exist only in the parent (and could
// take locks one of them held at the fork). In the child it is memory the child's copy of the
// parent left behind: leaked.
struct DeleteUnlessForked {
  void operator()(PyReader* reader) const {
    if (reader->made_here()) delete reader;
  }
};
using ReaderHolder = std::unique_ptr<PyReader, DeleteUnlessForked>;

}  // namespace

// More helpers than this would not find memory bandwidth left to use.
constexpr int kMaxCopyThreads = 64;

void DefineDataModule(py::module_& m) {
  py::class_<ShardBuffer>(m, "ShardBuffer", py::buffer_protocol(),
                          "A shard's bytes, read-only, held alive while any view of them exists")
      .def_buffer([](ShardBuffer& b) {
        const std::string_view v = b.shard->bytes()->view();
        return ReadOnlyBytes(v.data(), v.size());
      })
      .def_property_readonly("mapped",
                             [](const ShardBuffer& b) { return b.shard->bytes()->mapped(); })
      // Bytes of the shard still in its file (large members not read yet; for tests).
      .def_property_readonly("unread_bytes",
                             [](const ShardBuffer& b) { return b.shard->bytes()->unread_bytes(); });
  m.attr("MAX_COPY_THREADS") = kMaxCopyThreads;
  m.def("live_mappings", &data::ShardBytes::LiveMappings,
        "Shard files mapped in this process now (for tests)");
  py::class_<PySource>(m, "DataSource",
                       "A dataset's shards (MDS or WebDataset) at a store URL, for DataReader")
      .def(py::init(&OpenSource), py::arg("url"), py::arg("wds_shard_samples") = py::none(),
           py::arg("verify_hashes") = false, py::arg("cache_dir") = py::none(),
           py::arg("cache_bytes") = 0, py::arg("fallback_urls") = py::none(),
           py::arg("job") = py::none(), py::arg("map_files") = py::none(),
           py::arg("large_member_bytes") = py::none(), py::arg("packed_batches") = false)
      .def_readonly("url", &PySource::url)
      .def_property_readonly(
          "format", [](const PySource& s) { return data::DatasetFormatName(s.source->format()); })
      .def_property_readonly("shard_samples",
                             [](const PySource& s) { return s.source->shard_samples(); })
      .def("shard_name", [](const PySource& s, uint32_t i) {
        if (i >= s.source->shard_samples().size()) throw py::index_error("no such shard");
        return s.source->ShardName(i);
      });

  py::class_<PyReader, ReaderHolder>(
      m, "DataReader", "One reader's samples of one epoch, in the global order (docs/data.md)")
      .def(py::init([](const PySource& source, uint64_t seed, bool shuffle, uint64_t window,
                       uint64_t epoch, uint32_t world, uint32_t rank, uint32_t workers,
                       uint32_t worker, uint64_t batch, uint64_t start, uint32_t read_ahead,
                       bool zero_copy, int copy_threads) {
             if (copy_threads > kMaxCopyThreads) {
               throw py::value_error("copy_threads: at most " + std::to_string(kMaxCopyThreads));
             }
             return ReaderHolder(new PyReader(source, OrderOptions{seed, shuffle, window}, epoch,
                                              data::Slot{world, rank, workers, worker, batch},
                                              start, read_ahead, zero_copy, copy_threads));
           }),
           py::arg("source"), py::kw_only(), py::arg("seed") = 0, py::arg("shuffle") = true,
           py::arg("window") = uint64_t{1} << 18, py::arg("epoch") = 0, py::arg("world") = 1,
           py::arg("rank") = 0, py::arg("workers") = 0, py::arg("worker") = 0, py::arg("batch") = 1,
           py::arg("start") = 0, py::arg("read_ahead") = 4, py::arg("zero_copy") = false,
           py::arg("copy_threads") = -1)
      .def_property_readonly("remaining", &PyReader::remaining)
      .def_property_readonly("shards_read", &PyReader::shards_read)
      .def_property_readonly("copied_ahead", &PyReader::copied_ahead,
                             "Packed blocks handed out that were copied ahead (next_batch's "
                             "ahead=True): while the caller was away")
      .def_property_readonly("copying_ahead", &PyReader::copying_ahead,
                             "Whether a packed block is being copied ahead for the next call")
      .def("__iter__", [](PyReader& r) -> PyReader& { return r; })
      .def("__next__", &PyReader::Next)
      .def("next_batch", &PyReader::NextBatch, py::arg("n"), py::arg("packed") = false,
           py::arg("ring") = py::none(), py::arg("ahead") = false);

  py::class_<PyBatchRing>(m, "BatchRing",
                          "A DataLoader worker's ring of packed batches in shared memory "
                          "(next_batch(ring=...)); its file goes when its process ends")
      .def(py::init([](const std::string& path, uint64_t capacity) {
             std::shared_ptr<data::BatchRing> ring =
                 Unwrap(data::BatchRing::Create(path, capacity));
             Rings()[path] = ring;
             return PyBatchRing{ring};
           }),
           py::arg("path"), py::arg("capacity"))
      .def_property_readonly("path", [](const PyBatchRing& r) { return r.ring->path(); })
      .def_property_readonly("capacity", [](const PyBatchRing& r) { return r.ring->capacity(); })
      .def_property_readonly("used_bytes",
                             [](const PyBatchRing& r) { return r.ring->used_bytes(); })
      .def(
          "retire",
          [](const PyBatchRing& r) {
            auto it = Rings().find(r.ring->path());
            if (it != Rings().end() && it->second == r.ring) Rings().erase(it);
          },
          "Drops this process's registry entry for the ring: its file goes with the last "
          "reference (this object's, and those of its blocks still alive here)");
  m.attr("MIN_BATCH_RING") = data::BatchRing::kMinCapacity;
  py::class_<RingBlock>(m, "RingBlock", py::buffer_protocol(),
                        "A packed batch's bytes in a batch ring, read-only (a buffer)")
      .def_buffer(&RingBlock::Buffer)
      .def("__len__", &RingBlock::size)
      .def("__reduce__", &RingBlock::Reduce);
  py::class_<PooledBlock>(m, "PooledBlock", py::buffer_protocol(),
                          "A packed batch's bytes in reused memory, read-only (a buffer)")
      .def_buffer(&PooledBlock::Buffer)
      .def("__len__", &PooledBlock::size)
      .def("__reduce__", &PooledBlock::Reduce);
  m.def("batch_block", &BatchBlock, py::arg("path"), py::arg("offset"), py::arg("seq"),
        py::arg("size"), "The block of the batch ring at path that a pickled RingBlock names");
  m.def(
      "batch_rings",
      [] {
        py::list paths;
        for (const auto& [path, ring] : Rings()) paths.append(path);
        return paths;
      },
      "Paths of the batch rings this process produces into or maps (for tests)");

  m.def(
      "data_stats",
      [](const std::string& url, std::optional<std::string> job) {
        const data::DataStats s = data::LoaderMetrics::For(MetricsRegistry::Default(), url,
                                                           job ? *job : data::DefaultJobId())
                                      ->Snapshot();
        py::dict d;
        d["bytes_cache"] = s.bytes_cache;
        d["bytes_peer"] = s.bytes_peer;
        d["bytes_durable"] = s.bytes_durable;
        d["shards_cache"] = s.shards_cache;
        d["shards_peer"] = s.shards_peer;
        d["shards_durable"] = s.shards_durable;
        d["cache_hit_ratio"] = s.hit_ratio;
        d["cache_damaged"] = s.cache_damaged;
        d["source_damaged"] = s.source_damaged;
        d["uncached"] = s.uncached;
        d["evictions"] = s.evictions;
        d["samples"] = s.samples;
        d["stall_seconds"] = s.stall_seconds;
        d["active_seconds"] = s.active_seconds;
        d["samples_per_second"] = s.samples_per_second;
        d["read_ahead_depth"] = s.read_ahead_depth;
        d["stall_buckets"] = s.stall_buckets;
        return d;
      },
      py::arg("url"), py::arg("job") = py::none(),
      "The loader's metrics for (dataset URL, job) in this process (docs/data.md)");
  m.def(
      "fold_worker_stats",
      [](const std::string& url, std::optional<std::string> job, const py::dict& added,
         double samples_per_second) {
        const auto count = [&](const char* name) {
          const double v = added[name].cast<double>();
          return v > 0 ? static_cast<uint64_t>(v + 0.5) : uint64_t{0};  // sums of doubles
        };
        data::DataStats a;
        a.bytes_cache = count("bytes_cache");
        a.bytes_peer = count("bytes_peer");
        a.bytes_durable = count("bytes_durable");
        a.shards_cache = count("shards_cache");
        a.shards_peer = count("shards_peer");
        a.shards_durable = count("shards_durable");
        a.cache_damaged = count("cache_damaged");
        a.source_damaged = count("source_damaged");
        a.uncached = count("uncached");
        a.evictions = count("evictions");
        a.samples = count("samples");
        a.stall_seconds = std::max(0.0, added["stall_seconds"].cast<double>());
        a.active_seconds = std::max(0.0, added["active_seconds"].cast<double>());
        for (const py::handle b : added["stall_buckets"].cast<py::list>()) {
          const double v = b.cast<double>();
          a.stall_buckets.push_back(v > 0 ? static_cast<uint64_t>(v + 0.5) : 0);
        }
        Status folded = data::LoaderMetrics::For(MetricsRegistry::Default(), url,
                                                 job ? *job : data::DefaultJobId(), "workers")
                            ->Fold(a, samples_per_second);
        if (!folded.ok()) ckpt::ThrowStatus(folded);
      },
      py::arg("url"), py::arg("job"), py::arg("added"), py::arg("samples_per_second"),
      "Adds DataLoader workers' counts gathered since the last call to this process's "
      "registry, as the series labelled process=\"workers\" (docs/data.md, Metrics)");
  m.attr("stall_bounds") = data::LoaderMetrics::StallBounds();
  m.def("keep_large_blocks_in_heap", &KeepLargeBlocksInHeap, py::arg("max_bytes"),
        "glibc's malloc: blocks below max_bytes from the heap, up to twice that kept free at its "
        "top (include/gantry/common/heap.h); False where the allocator is another or refuses");
  m.def("mapped_heap_blocks", &MappedHeapBlocks,
        "Blocks glibc's malloc holds as mappings of their own; -1 where it cannot tell");
  m.def(
      "metrics_text", [] { return MetricsRegistry::Default().PrometheusText(); },
      "This process's metrics registry in the Prometheus text format");

  m.def(
      "slot_samples",
      [](uint32_t world, uint32_t rank, uint32_t workers, uint32_t worker, uint64_t batch,
         uint64_t start, uint64_t end) {
        return Unwrap(
                   data::SlotPositions::Create({world, rank, workers, worker, batch}, start, end))
            .size();
      },
      py::arg("world"), py::arg("rank"), py::arg("workers"), py::arg("worker"), py::arg("batch"),
      py::arg("start"), py::arg("end"),
      "How many positions of [start, end) the slot reads (the uneven tail: docs/data.md)");
}

}  // namespace gantry::python
