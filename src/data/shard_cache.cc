// The node-local shard cache (shard_cache.h): files, OFD byte-range locks and flock.
#include "gantry/data/shard_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <vector>

namespace gantry::data {
namespace {

constexpr char kMagic[8] = {'G', 'N', 'T', 'S', 'H', 'R', 'D', '1'};
constexpr size_t kTrailer =
    ShardCache::kTrailerBytes;  // u64 xxh3-64 of the bytes (little-endian), then kMagic
constexpr int64_t kStaleTmpSeconds = 3600;

Status Errno(const std::string& what) { return StatusFromErrno(errno, what); }

// Byte `shard` of the lock file `fd`: F_RDLCK, F_WRLCK or F_UNLCK; `wait` blocks.
int RangeLock(int fd, uint32_t shard, short type, bool wait) {
  struct flock fl;
  std::memset(&fl, 0, sizeof(fl));
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(shard);
  fl.l_len = 1;
  int rc;
  do {
    rc = fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl);
  } while (rc != 0 && errno == EINTR && wait);
  return rc;
}

Result<int> OpenLockFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return Errno("shard cache: open " + path);
  return fd;
}

Status WriteAll(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Errno("shard cache: write " + path);
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status FsyncDir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("shard cache: open " + dir);
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  return rc == 0 ? Status::Ok() : StatusFromErrno(err, "shard cache: fsync " + dir);
}

// A shard file's name: "<index>.<name with '/' as '%'>"; the index is what the locks use.
std::string FileName(uint32_t shard, std::string_view name) {
  std::string out = std::to_string(shard) + ".";
  for (char c : name) out.push_back(c == '/' ? '%' : c);
  return out;
}

// The index a shard file name starts with, or -1 for other files (locks, URL, temporaries).
int64_t IndexOf(const char* file) {
  if (file[0] < '0' || file[0] > '9') return -1;
  int64_t v = 0;
  const char* p = file;
  for (; *p >= '0' && *p <= '9'; ++p) {
    v = v * 10 + (*p - '0');
    if (v > UINT32_MAX) return -1;
  }
  return *p == '.' ? v : -1;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      out.emplace_back(e->d_name);
    }
  }
  closedir(d);
  return out;
}

struct CachedFile {
  std::string dir;  // its dataset folder
  std::string path;
  uint32_t shard = 0;
  uint64_t bytes = 0;
  int64_t mtime_ns = 0;
};

// A dataset folder Open made: its name is 16 hex digits and it holds the pin lock. Anything
// else under the root (a user's files, when the cache was pointed at a folder already in use) is
// never counted or evicted.
bool IsDatasetFolder(const std::string& root, const std::string& sub) {
  if (sub.size() != 16 ||
      !std::all_of(sub.begin(), sub.end(), [](char c) { return std::isxdigit(c) != 0; })) {
    return false;
  }
  struct stat st;
  return lstat((root + "/" + sub + "/.pin-lock").c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Every shard file under `root`, by dataset folder.
std::vector<CachedFile> ListCached(const std::string& root) {
  std::vector<CachedFile> out;
  for (const std::string& sub : ListDir(root)) {
    if (!IsDatasetFolder(root, sub)) continue;
    const std::string dir = root + "/" + sub;
    for (const std::string& f : ListDir(dir)) {
      const int64_t index = IndexOf(f.c_str());
      if (index < 0) continue;
      struct stat st;
      const std::string path = dir + "/" + f;
      if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      out.push_back(CachedFile{dir, path, static_cast<uint32_t>(index),
                               static_cast<uint64_t>(st.st_size),
                               int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec});
    }
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<ShardCache>> ShardCache::Open(const ShardCacheOptions& options,
                                                     std::string_view dataset_url,
                                                     std::string_view fingerprint) {
  if (options.dir.empty()) return InvalidArgument("shard cache: no directory given");
  std::string identity(dataset_url);
  if (!fingerprint.empty()) identity += std::string("\n") + std::string(fingerprint);
  char id[17];
  std::snprintf(id, sizeof(id), "%016llx",
                static_cast<unsigned long long>(XXH64(identity.data(), identity.size(), 0)));
  std::string root = options.dir;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  const std::string dir = root + "/" + id;
  // The cache's own folder with its parents (a node's fresh /nvme/gantry/data-cache), then the
  // dataset's.
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) {
    errno = ec.value();
    return Errno("shard cache: mkdir " + root);
  }
  if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) {
    return Errno("shard cache: mkdir " + dir);
  }
  ShardCacheOptions o = options;
  o.dir = root;
  auto cache = std::unique_ptr<ShardCache>(new ShardCache(std::move(o), dir));
  GANTRY_ASSIGN_OR_RETURN(cache->pin_fd_, OpenLockFile(dir + "/.pin-lock"));
  GANTRY_ASSIGN_OR_RETURN(cache->evict_fd_, OpenLockFile(root + "/.evict-lock"));
  // The URL, for whoever looks into the directory; written once, atomically.
  const std::string url_file = dir + "/URL";
  if (access(url_file.c_str(), F_OK) != 0) {
    const std::string tmp = dir + "/.tmp-url-" + std::to_string(getpid());
    const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd >= 0) {
      const std::string text = std::string(dataset_url) + "\n";
      const Status s = WriteAll(fd, text.data(), text.size(), tmp);
      close(fd);
      if (!s.ok() || rename(tmp.c_str(), url_file.c_str()) != 0) unlink(tmp.c_str());
    }
  }
  const time_t now = time(nullptr);
  for (const std::string& f : ListDir(dir)) {
    if (f.rfind(".tmp-", 0) != 0) continue;
    struct stat st;
    const std::string path = dir + "/" + f;
    if (stat(path.c_str(), &st) == 0 && now - st.st_mtime > kStaleTmpSeconds) unlink(path.c_str());
  }
  return cache;
}

ShardCache::~ShardCache() {
  if (pin_fd_ >= 0) close(pin_fd_);  // drops every pin this object still holds
  if (evict_fd_ >= 0) close(evict_fd_);
}

ShardCache::Pin& ShardCache::Pin::operator=(Pin&& o) noexcept {
  if (this != &o) {
    if (cache_ != nullptr) cache_->Unpin(shard_);
    cache_ = o.cache_;
    shard_ = o.shard_;
    o.cache_ = nullptr;
  }
  return *this;
}

ShardCache::Pin::~Pin() {
  if (cache_ != nullptr) cache_->Unpin(shard_);
}

Result<ShardCache::Pin> ShardCache::PinShard(uint32_t shard) {
  MutexLock lock(mu_);
  int& n = pins_[shard];
  if (n == 0) {
    // Blocks only while an evictor holds this byte to delete the shard (a moment).
    if (RangeLock(pin_fd_, shard, F_RDLCK, /*wait=*/true) != 0) {
      pins_.erase(shard);
      return Errno("shard cache: pin shard " + std::to_string(shard) + " in " + dataset_dir_);
    }
  }
  ++n;
  return Pin(this, shard);
}

void ShardCache::Unpin(uint32_t shard) {
  MutexLock lock(mu_);
  auto it = pins_.find(shard);
  if (it == pins_.end()) return;
  if (--it->second == 0) {
    RangeLock(pin_fd_, shard, F_UNLCK, false);
    pins_.erase(it);
  }
}

ShardCache::FetchLock::~FetchLock() {
  if (fd_ >= 0) close(fd_);
}

Result<ShardCache::FetchLock> ShardCache::LockFetch(uint32_t shard) {
  // A file of its own per lock: OFD locks of one open file never conflict with each other, and
  // two threads of this process fetching one shard must.
  GANTRY_ASSIGN_OR_RETURN(int fd, OpenLockFile(dataset_dir_ + "/.fetch-lock"));
  if (RangeLock(fd, shard, F_WRLCK, /*wait=*/true) != 0) {
    const Status s = Errno("shard cache: lock shard " + std::to_string(shard) + " for fetching");
    close(fd);
    return s;
  }
  return FetchLock(fd);
}

std::string ShardCache::PathOf(uint32_t shard, std::string_view name) const {
  return dataset_dir_ + "/" + FileName(shard, name);
}

Result<std::string> ShardCache::Get(uint32_t shard, std::string_view name) {
  const std::string path = PathOf(shard, name);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound("shard cache: " + path + " is not cached");
    return Errno("shard cache: open " + path);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const Status s = Errno("shard cache: stat " + path);
    close(fd);
    return s;
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t r = pread(fd, bytes.data() + got, bytes.size() - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  // Most recently used now: eviction goes by modification time, which every file system keeps
  // (atime is often off or relaxed).
  futimens(fd, nullptr);
  close(fd);
  bool intact = got == bytes.size() && got >= kTrailer &&
                std::memcmp(bytes.data() + got - sizeof(kMagic), kMagic, sizeof(kMagic)) == 0;
  if (intact) {
    uint64_t want = 0;
    std::memcpy(&want, bytes.data() + got - kTrailer, sizeof(want));
    intact = XXH3_64bits(bytes.data(), got - kTrailer) == want;
  }
  if (!intact) {
    unlink(path.c_str());
    MutexLock lock(mu_);
    ++counters_.damaged;
    return DataLoss("shard cache: " + path + " is damaged (checksum mismatch); deleted");
  }
  bytes.resize(got - kTrailer);
  return bytes;
}

Result<std::shared_ptr<const ShardBytes>> ShardCache::Map(uint32_t shard, std::string_view name) {
  const std::string path = PathOf(shard, name);
  Result<std::shared_ptr<ShardBytes>> mapped = ShardBytes::MapFile(path, {});
  if (!mapped.ok()) {
    if (mapped.status().code() == StatusCode::kNotFound) {
      return NotFound("shard cache: " + path + " is not cached");
    }
    if (mapped.status().code() == StatusCode::kResourceExhausted) {
      GANTRY_ASSIGN_OR_RETURN(std::string bytes, Get(shard, name));
      return ShardBytes::FromString(std::move(bytes));
    }
    return Status(mapped.status().code(), "shard cache: " + mapped.status().message());
  }
  std::shared_ptr<ShardBytes> b = std::move(*mapped);
  // Most recently used now (see Get).
  utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  const uint64_t got = b->size();
  bool intact =
      got >= kTrailer && std::memcmp(b->data() + got - sizeof(kMagic), kMagic, sizeof(kMagic)) == 0;
  if (intact) {
    uint64_t want = 0;
    std::memcpy(&want, b->data() + got - kTrailer, sizeof(want));
    intact = XXH3_64bits(b->data(), got - kTrailer) == want;
  }
  // Cut short while being checked: the guard zeroed the missing pages, which the checksum
  // likely caught, but the flag is certain.
  if (b->damaged()) intact = false;
  if (!intact) {
    unlink(path.c_str());
    MutexLock lock(mu_);
    ++counters_.damaged;
    return DataLoss("shard cache: " + path + " is damaged (checksum mismatch); deleted");
  }
  b->Truncate(got - kTrailer);
  return std::shared_ptr<const ShardBytes>(std::move(b));
}

Status ShardCache::Put(uint32_t shard, std::string_view name, std::string_view bytes) {
  const uint64_t need = bytes.size() + kTrailer;
  if (options_.capacity_bytes != 0 && need > options_.capacity_bytes) {
    return ResourceExhausted("shard cache: shard " + std::string(name) + " (" +
                             std::to_string(need) + " bytes) is larger than the cache (" +
                             std::to_string(options_.capacity_bytes) + " bytes)");
  }
  static std::atomic<uint64_t> sequence{0};
  const std::string tmp = dataset_dir_ + "/.tmp-" + std::to_string(getpid()) + "-" +
                          std::to_string(sequence.fetch_add(1));
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return Errno("shard cache: create " + tmp);
  char trailer[kTrailer];
  const uint64_t sum = XXH3_64bits(bytes.data(), bytes.size());
  std::memcpy(trailer, &sum, sizeof(sum));
  std::memcpy(trailer + sizeof(sum), kMagic, sizeof(kMagic));
  Status s = WriteAll(fd, bytes.data(), bytes.size(), tmp);
  if (s.ok()) s = WriteAll(fd, trailer, sizeof(trailer), tmp);
  if (s.ok() && fsync(fd) != 0) s = Errno("shard cache: fsync " + tmp);
  close(fd);
  if (!s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  // Making room and renaming under one node-wide lock: two publishers cannot both count the
  // same free space.
  int rc;
  do {
    rc = flock(evict_fd_, LOCK_EX);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    s = Errno("shard cache: lock " + options_.dir + "/.evict-lock");
    unlink(tmp.c_str());
    return s;
  }
  s = options_.capacity_bytes == 0 ? Status::Ok() : MakeRoom(need);
  const std::string path = PathOf(shard, name);
  if (s.ok() && rename(tmp.c_str(), path.c_str()) != 0) s = Errno("shard cache: rename " + path);
  flock(evict_fd_, LOCK_UN);
  if (!s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  return FsyncDir(dataset_dir_);
}

Status ShardCache::MakeRoom(uint64_t incoming) {
  std::vector<CachedFile> files = ListCached(options_.dir);
  uint64_t used = 0;
  for (const CachedFile& f : files) used += f.bytes;
  if (used + incoming <= options_.capacity_bytes) return Status::Ok();
  std::sort(files.begin(), files.end(), [](const CachedFile& a, const CachedFile& b) {
    return a.mtime_ns != b.mtime_ns ? a.mtime_ns < b.mtime_ns : a.path < b.path;
  });
  std::map<std::string, int> pin_files;  // a dataset folder's .pin-lock, opened for probing
  uint64_t evicted = 0, evicted_bytes = 0;
  for (const CachedFile& f : files) {
    if (used + incoming <= options_.capacity_bytes) break;
    auto it = pin_files.find(f.dir);
    if (it == pin_files.end()) {
      Result<int> fd = OpenLockFile(f.dir + "/.pin-lock");
      it = pin_files.emplace(f.dir, fd.ok() ? *fd : -1).first;
    }
    if (it->second < 0) continue;
    // A write lock is granted only when no reader (in any process, this one included: its pins
    // are on another open file) holds the byte; holding it while unlinking keeps a reader from
    // pinning the shard halfway through.
    if (RangeLock(it->second, f.shard, F_WRLCK, /*wait=*/false) != 0) continue;
    if (unlink(f.path.c_str()) == 0) {
      used -= f.bytes;
      ++evicted;
      evicted_bytes += f.bytes;
    }
    RangeLock(it->second, f.shard, F_UNLCK, false);
  }
  for (const auto& [dir, fd] : pin_files) {
    if (fd >= 0) close(fd);
  }
  {
    MutexLock lock(mu_);
    counters_.evictions += evicted;
    counters_.evicted_bytes += evicted_bytes;
  }
  if (used + incoming > options_.capacity_bytes) {
    return ResourceExhausted("shard cache " + options_.dir + ": " + std::to_string(used) +
                             " bytes are pinned by readers; " + std::to_string(incoming) +
                             " more do not fit in " + std::to_string(options_.capacity_bytes));
  }
  return Status::Ok();
}

Result<uint64_t> ShardCache::UsedBytes() const {
  uint64_t used = 0;
  for (const CachedFile& f : ListCached(options_.dir)) used += f.bytes;
  return used;
}

ShardCacheCounters ShardCache::counters() const {
  MutexLock lock(mu_);
  return counters_;
}

}  // namespace gantry::data
