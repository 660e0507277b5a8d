// BatchRing: the file's layout and the producer's reuse of its space.
//
// The file is a 64-byte header, then records, each 64-byte aligned: a record header of 64 bytes
// (its reference count, a tag, the sequence number, the record's length and the data's size)
// followed by the block's data. Between records is free space; the producer alone knows where
// its records are (live_), and the shared reference counts say which it may take back.
#include "gantry/data/batch_ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace gantry::data {
namespace {

constexpr uint64_t kFileMagic = 0x31524e5259524e47;  // "GNRYRNR1"
constexpr uint32_t kLive = 0x4b4c4252;               // a block

struct FileHeader {
  uint64_t magic;
  uint64_t capacity;
  int64_t producer_pid;
  uint64_t reserved[5];
};
static_assert(sizeof(FileHeader) == 64);

struct Record {
  uint32_t refs;  // read and written only through std::atomic_ref
  uint32_t tag;
  uint64_t seq;
  uint64_t length;  // of the whole record, header and padding included
  uint64_t size;    // of the data
  uint64_t reserved[4];
};
static_assert(sizeof(Record) == BatchRing::kRecordBytes);

constexpr uint64_t kFirst = sizeof(FileHeader);  // where records start

uint64_t RoundUp(uint64_t n) { return (n + 63) & ~uint64_t{63}; }

std::atomic_ref<uint32_t> Refs(Record* r) { return std::atomic_ref<uint32_t>(r->refs); }

}  // namespace

BatchRing::BatchRing(std::string path, char* base, uint64_t capacity, bool producer)
    : path_(std::move(path)),
      base_(base),
      capacity_(capacity),
      producer_(producer),
      creator_(producer ? getpid() : 0) {}

BatchRing::~BatchRing() {
  munmap(base_, capacity_);
  // A forked child that inherited the producer's object leaves the parent's file alone.
  if (producer_ && getpid() == creator_) unlink(path_.c_str());
}

Result<std::shared_ptr<BatchRing>> BatchRing::Create(const std::string& path, uint64_t capacity) {
  capacity &= ~uint64_t{63};
  if (capacity < kMinCapacity) {
    return InvalidArgument("a batch ring needs at least " + std::to_string(kMinCapacity) +
                           " bytes, not " + std::to_string(capacity));
  }
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return StatusFromErrno(errno, "create " + path);
  // Reserved now, so a full tmpfs is an error here rather than a SIGBUS at a later write.
  const int reserved = posix_fallocate(fd, 0, static_cast<off_t>(capacity));
  if (reserved != 0) {
    close(fd);
    unlink(path.c_str());
    return StatusFromErrno(reserved, "reserve " + std::to_string(capacity) + " bytes for " + path);
  }
  void* p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    unlink(path.c_str());
    return StatusFromErrno(err, "map " + path);
  }
  // Every page mapped writable now, in one call, where the first lap of blocks would take a
  // fault per page. On this project's VMs (shadow paging) that first lap ran the worker at a
  // fraction of its rate and was most of a training loop's wait for data at 0.9 of the
  // loader's rate: 6.3% of the loop's time against 2.4% with this (docs/performance.md, "the
  // ring's pages mapped at once"). Best effort: a kernel before 5.14 says EINVAL, and the
  // pages are then mapped as they are first written.
  (void)madvise(p, capacity, MADV_POPULATE_WRITE);
  auto* header = static_cast<FileHeader*>(p);
  header->capacity = capacity;
  header->producer_pid = getpid();
  header->magic = kFileMagic;
  return std::shared_ptr<BatchRing>(new BatchRing(path, static_cast<char*>(p), capacity, true));
}

Result<std::shared_ptr<BatchRing>> BatchRing::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return StatusFromErrno(errno, "open batch ring " + path);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return StatusFromErrno(err, "stat " + path);
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < kMinCapacity || size % 64 != 0) {
    close(fd);
    return DataLoss(path + " is not a batch ring (" + std::to_string(size) + " bytes)");
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) return StatusFromErrno(err, "map " + path);
  const auto* header = static_cast<const FileHeader*>(p);
  if (header->magic != kFileMagic || header->capacity != size) {
    munmap(p, size);
    return DataLoss(path + " is not a batch ring");
  }
  return std::shared_ptr<BatchRing>(new BatchRing(path, static_cast<char*>(p), size, false));
}

pid_t BatchRing::producer_pid() const {
  return static_cast<pid_t>(reinterpret_cast<const FileHeader*>(base_)->producer_pid);
}

void BatchRing::Reclaim() {
  for (auto it = live_.begin(); it != live_.end();) {
    auto* r = reinterpret_cast<Record*>(base_ + it->first);
    if (Refs(r).load(std::memory_order_acquire) != 0) {
      ++it;
      continue;
    }
    used_ -= it->second;
    it = live_.erase(it);
  }
}

std::optional<BatchRing::Block> BatchRing::Allocate(uint64_t size) {
  if (!producer_) return std::nullopt;
  if (size > capacity_) return std::nullopt;
  const uint64_t need = RoundUp(kRecordBytes + size);
  const std::lock_guard lock(mu_);
  Reclaim();
  // The lowest gap that holds it: the blocks in use stay within the fewest pages, as a heap's
  // reused blocks do (on a shadow-paged VM a page not touched for a while costs an exit to the
  // hypervisor again: cycling through the whole file, as a ring would, made one batch in 25
  // of a slow loop 5-80 ms late; docs/performance.md).
  uint64_t at = kFirst;
  for (const auto& [offset, length] : live_) {
    if (offset - at >= need) break;
    at = offset + length;
  }
  if (capacity_ - at < need) return std::nullopt;
  auto* r = reinterpret_cast<Record*>(base_ + at);
  r->tag = kLive;
  r->seq = ++seq_;
  r->length = need;
  r->size = size;
  Refs(r).store(1, std::memory_order_release);
  live_.emplace(at, need);
  used_ += need;
  return Block{at, r->seq, base_ + at + kRecordBytes, size};
}

void BatchRing::Ref(uint64_t offset) {
  Refs(reinterpret_cast<Record*>(base_ + offset)).fetch_add(1, std::memory_order_relaxed);
}

void BatchRing::Unref(uint64_t offset) {
  // Release: this side's reads of the block happen before the producer writes over it.
  Refs(reinterpret_cast<Record*>(base_ + offset)).fetch_sub(1, std::memory_order_release);
}

Result<BatchRing::Block> BatchRing::Adopt(uint64_t offset, uint64_t seq, uint64_t size) {
  const auto gone = [&] {
    return DataLoss("batch ring " + path_ + ": no block " + std::to_string(seq) + " of " +
                    std::to_string(size) + " bytes at " + std::to_string(offset) +
                    " (it was dropped, or the ring is another one)");
  };
  if (offset < kFirst || offset % 64 != 0 || offset > capacity_ - kRecordBytes ||
      size > capacity_ - offset - kRecordBytes) {
    return gone();
  }
  auto* r = reinterpret_cast<Record*>(base_ + offset);
  // Acquire: the producer's writes of the block happen before this side reads it.
  if (Refs(r).load(std::memory_order_acquire) == 0 || r->tag != kLive || r->seq != seq ||
      r->size != size) {
    return gone();
  }
  return Block{offset, seq, base_ + offset + kRecordBytes, size};
}

uint64_t BatchRing::used_bytes() {
  const std::lock_guard lock(mu_);
  Reclaim();
  return used_;
}

}  // namespace gantry::data
