// The posix-directory backend. Durability protocol for a put (why each step is there):
//   1. write a temp file in <root>/.gantry-tmp (same file system, so rename is atomic);
//   2. fsync it (the data is on disk before the name points at it);
//   3. rename(2) over the final name, or link(2) for create-if-absent (fails with EEXIST
//      atomically, no check-then-act race);
//   4. fsync the final name's directory (the new name survives a power cut).
// Parents are created on demand; Delete removes emptied parents, so a put racing a delete can
// see its parent vanish between mkdir and rename: it recreates the parents and retries.
#include "gantry/storage/posix_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

namespace gantry {
namespace {

constexpr std::string_view kTempDirName = ".gantry-tmp";
constexpr uint64_t kAlign = 4096;
constexpr int kCommitAttempts = 64;
// Buffered writes at least this big stream their writeback (see Writeback).
constexpr uint64_t kStreamThreshold = 64ull << 20;

// errno as text, with the storage-specific meaning first where a caller has to act on it.
std::string ErrText(int err) {
  switch (err) {
    case ENOSPC:
      return std::string("disk full (") + std::strerror(err) + ")";
    case EDQUOT:
      return std::string("disk full: quota exceeded (") + std::strerror(err) + ")";
    case EFBIG:
      return std::string("file too large (") + std::strerror(err) + ")";
    default:
      return std::strerror(err);
  }
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Closes a descriptor on scope exit unless released.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  // close(2) reports deferred write errors (NFS), so the put path checks it.
  int Close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// One 4 KiB-aligned scratch buffer per thread, allocated once: O_DIRECT needs aligned memory,
// and touching fresh pages on every call is slow (see RECIPES.md).
char* AlignedScratch(uint64_t size) {
  struct Buf {
    char* p = nullptr;
    uint64_t size = 0;
    ~Buf() { std::free(p); }
  };
  thread_local Buf buf;
  if (buf.size < size) {
    std::free(buf.p);
    void* p = nullptr;
    if (::posix_memalign(&p, kAlign, size) != 0) {
      buf.p = nullptr;
      buf.size = 0;
      return nullptr;
    }
    buf.p = static_cast<char*>(p);
    buf.size = size;
  }
  return buf.p;
}

bool IsAligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kAlign == 0; }

// Clears O_DIRECT on fd after the file system refused a direct transfer.
void DropDirect(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_DIRECT);
}

int PwriteAll(int fd, const char* p, uint64_t n, uint64_t off) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= static_cast<uint64_t>(w);
    off += static_cast<uint64_t>(w);
  }
  return 0;
}

// Reads up to n bytes; *got is what was read (short only at end of file).
int PreadAll(int fd, char* p, uint64_t n, uint64_t off, uint64_t* got) {
  *got = 0;
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (r == 0) break;
    p += r;
    n -= static_cast<uint64_t>(r);
    off += static_cast<uint64_t>(r);
    *got += static_cast<uint64_t>(r);
  }
  return 0;
}

// Starts writeback of each chunk as soon as it is written (SYNC_FILE_RANGE_WRITE, which does
// not wait), so a big buffered put streams to disk while it copies instead of leaving gigabytes
// of dirty pages to the final fsync. Why: with the whole object in the caller's memory, a 2 GiB
// put ran into the kernel's dirty-page throttling and measured 0.1-0.2x fio; streaming brought
// it to about 0.4-1x on this (very noisy) VM. Waiting for older chunks (a bounded window) was
// measured slower than not waiting. Best effort: errors surface at the fsync.
class Writeback {
 public:
  Writeback(int fd, bool on) : fd_(fd), on_(on) {}
  void Wrote(uint64_t off, uint64_t len) {
    if (on_) {
      ::sync_file_range(fd_, static_cast<off64_t>(off), static_cast<off64_t>(len),
                        SYNC_FILE_RANGE_WRITE);
    }
  }

 private:
  const int fd_;
  const bool on_;
};

// Writes data[0, n) at file offset off. With direct I/O, whole aligned blocks go straight from
// the caller's memory when it is aligned, otherwise through the scratch buffer; a tail shorter
// than a block is written padded (the caller truncates the file to its real size afterwards).
int WriteSpan(int fd, bool direct, const char* data, uint64_t n, uint64_t off, uint64_t io,
              bool stream = false) {
  if (!direct) {
    Writeback wb(fd, stream);
    for (uint64_t done = 0; done < n;) {
      const uint64_t len = std::min(io, n - done);
      if (int err = PwriteAll(fd, data + done, len, off + done)) return err;
      wb.Wrote(off + done, len);
      done += len;
    }
    return 0;
  }
  char* scratch = AlignedScratch(io);
  if (scratch == nullptr) return ENOMEM;
  for (uint64_t done = 0; done < n;) {
    const uint64_t len = std::min(io, n - done);
    const uint64_t padded = (len + kAlign - 1) / kAlign * kAlign;
    const char* src = data + done;
    if (padded != len || !IsAligned(src)) {
      if (src != scratch) std::memcpy(scratch, src, len);
      std::memset(scratch + len, 0, padded - len);
      src = scratch;
    }
    int err = PwriteAll(fd, src, padded, off + done);
    if (err == EINVAL) {  // the file system took the O_DIRECT open but not the transfer
      DropDirect(fd);
      err = PwriteAll(fd, data + done, len, off + done);
    }
    if (err) return err;
    done += len;
  }
  return 0;
}

// Runs fn(begin, end) over [0, n) split into `parts` io-aligned ranges, on threads when
// parts > 1; returns the first non-zero errno.
template <typename Fn>
int Parallel(uint64_t n, int parts, uint64_t io, Fn fn) {
  if (parts <= 1 || n < 2 * io) return fn(0, n);
  uint64_t step = (n + parts - 1) / parts;
  step = (step + io - 1) / io * io;
  std::vector<std::thread> threads;
  std::vector<int> errs(parts, 0);
  for (int i = 0; i < parts; ++i) {
    const uint64_t b = std::min(n, i * step);
    const uint64_t e = std::min(n, b + step);
    if (b >= e) break;
    threads.emplace_back([&, i, b, e] { errs[i] = fn(b, e); });
  }
  for (auto& t : threads) t.join();
  for (int e : errs) {
    if (e) return e;
  }
  return 0;
}

// Copies [off, off + n) of src to the same offsets of dst. copy_file_range keeps the bytes in
// the kernel; where it is refused (other file system, O_DIRECT wanted) a buffer loop does it.
int CopySpan(int src, int dst, uint64_t off, uint64_t n, bool direct, uint64_t io,
             bool stream = false) {
  Writeback wb(dst, stream && !direct);
  if (!direct) {
    loff_t in = static_cast<loff_t>(off);
    loff_t out = static_cast<loff_t>(off);
    uint64_t left = n;
    while (left > 0) {
      const loff_t before = out;
      const ssize_t c = ::copy_file_range(src, &in, dst, &out, std::min(left, io), 0);
      if (c < 0) {
        if (errno == EINTR) continue;
        if (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP ||
            errno == EBADF) {
          break;  // fall through to the buffer loop for the rest
        }
        return errno;
      }
      if (c == 0) return EIO;  // source shrank under us
      wb.Wrote(static_cast<uint64_t>(before), static_cast<uint64_t>(c));
      left -= static_cast<uint64_t>(c);
    }
    if (left == 0) return 0;
    off = static_cast<uint64_t>(in);
    n = left;
  }
  char* buf = AlignedScratch(io);
  if (buf == nullptr) return ENOMEM;
  for (uint64_t done = 0; done < n;) {
    const uint64_t len = std::min(io, n - done);
    uint64_t got = 0;
    if (int err = PreadAll(src, buf, len, off + done, &got)) return err;
    if (got != len) return EIO;
    if (int err = WriteSpan(dst, direct, buf, len, off + done, io)) return err;
    wb.Wrote(off + done, len);
    done += len;
  }
  return 0;
}

// A file created for writing: O_DIRECT when asked and allowed, else buffered.
int OpenForWrite(const std::string& path, bool direct, bool* got_direct) {
  *got_direct = false;
  if (direct) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0644);
    if (fd >= 0) {
      *got_direct = true;
      return fd;
    }
    if (errno != EINVAL) return -1;  // tmpfs and friends refuse O_DIRECT with EINVAL
  }
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
}

std::string RandomSuffix() {
  thread_local std::mt19937_64 gen(std::random_device{}() ^
                                   (static_cast<uint64_t>(::getpid()) << 32) ^
                                   std::hash<std::thread::id>{}(std::this_thread::get_id()));
  static std::atomic<uint64_t> counter{0};
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%d.%llu.%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(counter.fetch_add(1)),
                static_cast<unsigned long long>(gen()));
  return buf;
}

int FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int rc = ::fsync(fd);
  const int err = rc == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

}  // namespace

Result<std::unique_ptr<PosixStore>> OpenPosixStore(const std::string& root,
                                                   const PosixStoreOptions& options) {
  if (root.empty()) return InvalidArgument("posix store: empty root directory");
  std::string abs = root;
  if (abs.front() != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) {
      return IoError("posix store '" + root + "': getcwd: " + ErrText(errno));
    }
    abs = std::string(cwd) + "/" + abs;
  }
  // "//" and "." segments would make url() differ between handles on the same directory.
  abs = std::filesystem::path(abs).lexically_normal().string();
  while (abs.size() > 1 && abs.back() == '/') abs.pop_back();
  // mkdir -p the root: a tier directory on a fresh node does not exist yet.
  for (size_t pos = 1; options.create_root && pos <= abs.size(); ++pos) {
    if (pos != abs.size() && abs[pos] != '/') continue;
    const std::string part = abs.substr(0, pos);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      return IoError("posix store: cannot create directory " + part + ": " + ErrText(errno));
    }
  }
  struct stat st;
  if (::stat(abs.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return NotFound("posix store: directory " + abs + " does not exist");
    }
    return IoError("posix store: " + abs + ": " + ErrText(err));
  }
  if (!S_ISDIR(st.st_mode)) {
    return FailedPrecondition("posix store: " + abs + " is not a directory");
  }
  const std::string tmp = abs + "/" + std::string(kTempDirName);
  // Without create_root nothing is written here; a put recreates the temp directory.
  if (options.create_root && ::mkdir(tmp.c_str(), 0755) != 0 && errno != EEXIST) {
    return IoError("posix store: cannot create " + tmp + ": " + ErrText(errno));
  }
  PosixStoreOptions opts = options;
  if (opts.parallelism < 1) opts.parallelism = 1;
  if (opts.io_size < kAlign) opts.io_size = kAlign;
  opts.io_size = opts.io_size / kAlign * kAlign;
  return std::unique_ptr<PosixStore>(new PosixStore(abs, opts));
}

namespace {

// Shared pieces of the put paths, bound to one store and key.
class PutTxn {
 public:
  PutTxn(const PosixStore& store, std::string_view key)
      : store_(store), key_(key), final_(store.root() + "/" + std::string(key)) {}
  ~PutTxn() {
    fd_.Reset();
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
  }

  std::string Where() const { return store_.url() + ": put '" + key_ + "'"; }

  Status Fail(const std::string& what, const std::string& dir, int err) const {
    return IoError(Where() + ": " + what + " (directory " + dir + "): " + ErrText(err));
  }

  Status Begin(bool direct) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      tmp_ = store_.temp_dir() + "/.tmp." + RandomSuffix();
      const int fd = OpenForWrite(tmp_, direct, &direct_);
      if (fd >= 0) {
        fd_.Reset(fd);
        return Status::Ok();
      }
      const int err = errno;
      tmp_.clear();
      if (err == ENOENT && attempt == 0) {  // someone removed the temp dir: recreate it
        ::mkdir(store_.temp_dir().c_str(), 0755);
        continue;
      }
      return Fail("create temp file", store_.temp_dir(), err);
    }
    return Internal(Where() + ": unreachable");
  }

  int fd() const { return fd_.get(); }
  bool direct() const { return direct_; }
  const std::string& tmp() const { return tmp_; }

  // Truncates to the real size (direct writes pad the tail), flushes and closes.
  Status Finish(uint64_t size) {
    if (direct_ && size % kAlign != 0 && ::ftruncate(fd_.get(), static_cast<off_t>(size)) != 0) {
      return Fail("truncate temp file " + tmp_, store_.temp_dir(), errno);
    }
    if (store_.options().sync && ::fsync(fd_.get()) != 0) {
      return Fail("fsync temp file " + tmp_, store_.temp_dir(), errno);
    }
    if (fd_.Close() != 0) return Fail("close temp file " + tmp_, store_.temp_dir(), errno);
    return Status::Ok();
  }

  // Moves the temp file to the final name (see the protocol at the top of the file).
  Status Commit(bool create_if_absent) {
    const std::string dir = DirOf(final_);
    for (int attempt = 0; attempt < kCommitAttempts; ++attempt) {
      GANTRY_RETURN_IF_ERROR(MakeParents());
      const int rc = create_if_absent ? ::link(tmp_.c_str(), final_.c_str())
                                      : ::rename(tmp_.c_str(), final_.c_str());
      if (rc == 0) {
        if (create_if_absent) ::unlink(tmp_.c_str());
        tmp_.clear();
        if (store_.options().sync) {
          if (int err = FsyncDir(dir); err != 0 && err != ENOENT) {
            return Fail("fsync directory", dir, err);
          }
        }
        return Status::Ok();
      }
      const int err = errno;
      if (err == ENOENT) continue;  // a concurrent Delete removed an emptied parent: redo
      if (err == EEXIST && create_if_absent) {
        return FailedPrecondition(Where() + ": already exists");
      }
      if (err == EISDIR || err == ENOTEMPTY || (err == EEXIST && !create_if_absent)) {
        return FailedPrecondition(Where() + ": " + final_ +
                                  " is a directory holding other objects");
      }
      if (err == ENOTDIR) return ParentIsObject();
      return Fail(create_if_absent ? "link into place" : "rename into place", dir, err);
    }
    return IoError(Where() + ": parent directory kept disappearing (concurrent deletes)");
  }

 private:
  Status ParentIsObject() const {
    return FailedPrecondition(Where() + ": a parent of the key is itself an object");
  }

  Status MakeParents() {
    size_t pos = store_.root().size() + 1;
    while (true) {
      pos = final_.find('/', pos);
      if (pos == std::string::npos) return Status::Ok();
      const std::string dir = final_.substr(0, pos);
      if (::mkdir(dir.c_str(), 0755) == 0) {
        // The new directory entry must be durable too, or the object can vanish with it.
        if (store_.options().sync) FsyncDir(DirOf(dir));
      } else if (errno == ENOTDIR) {
        return ParentIsObject();
      } else if (errno == EEXIST) {
        struct stat st;
        if (::stat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) return ParentIsObject();
      } else if (errno != ENOENT) {  // ENOENT: a racing Delete; the caller's loop retries
        return Fail("create directory " + dir, DirOf(dir), errno);
      }
      ++pos;
    }
  }

  const PosixStore& store_;
  const std::string key_;
  const std::string final_;
  std::string tmp_;  // non-empty while a temp file exists that we must remove on failure
  Fd fd_;
  bool direct_ = false;
};

Status CheckPosixKey(const PosixStore& store, const char* op, std::string_view key) {
  Status s = ValidateKey(key);
  if (!s.ok()) return s.WithContext(store.url() + ": " + op);
  if (key == kTempDirName || key.starts_with(std::string(kTempDirName) + "/")) {
    return InvalidArgument(store.url() + ": " + op + " '" + std::string(key) +
                           "': the name '.gantry-tmp' is reserved by the posix store");
  }
  return Status::Ok();
}

}  // namespace

Status PosixStore::Put(std::string_view key, std::string_view data, const PutOptions& options) {
  GANTRY_RETURN_IF_ERROR(CheckPosixKey(*this, "put", key));
  PutTxn txn(*this, key);
  GANTRY_RETURN_IF_ERROR(txn.Begin(options_.direct_io));
  const int parts = data.size() >= options_.parallel_threshold ? options_.parallelism : 1;
  const int fd = txn.fd();
  const bool direct = txn.direct();
  const uint64_t io = options_.io_size;
  const bool stream = options_.sync && data.size() >= kStreamThreshold;
  if (int err = Parallel(data.size(), parts, io, [&](uint64_t b, uint64_t e) {
        return WriteSpan(fd, direct, data.data() + b, e - b, b, io, stream);
      })) {
    return txn.Fail("write temp file " + txn.tmp(), temp_dir(), err);
  }
  GANTRY_RETURN_IF_ERROR(txn.Finish(data.size()));
  return txn.Commit(options.create_if_absent);
}

Status PosixStore::PutParts(std::string_view key, std::span<const std::string_view> parts,
                            const PutOptions& options) {
  uint64_t total = 0;
  for (std::string_view p : parts) total += p.size();
  // O_DIRECT needs aligned offsets, and big objects are written in parallel: both take the
  // joined path.
  if (options_.direct_io || total >= options_.parallel_threshold) {
    return ObjectStore::PutParts(key, parts, options);
  }
  GANTRY_RETURN_IF_ERROR(CheckPosixKey(*this, "put", key));
  PutTxn txn(*this, key);
  GANTRY_RETURN_IF_ERROR(txn.Begin(false));
  const bool stream = options_.sync && total >= kStreamThreshold;
  uint64_t off = 0;
  for (std::string_view p : parts) {
    if (int err = WriteSpan(txn.fd(), false, p.data(), p.size(), off, options_.io_size, stream)) {
      return txn.Fail("write temp file " + txn.tmp(), temp_dir(), err);
    }
    off += p.size();
  }
  GANTRY_RETURN_IF_ERROR(txn.Finish(total));
  return txn.Commit(options.create_if_absent);
}

Status PosixStore::PutFile(std::string_view key, const std::string& path) {
  GANTRY_RETURN_IF_ERROR(CheckPosixKey(*this, "put", key));
  Fd src(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (src.get() < 0) {
    const int err = errno;
    const std::string where = url() + ": put '" + std::string(key) + "': " + path;
    if (err == ENOENT) return NotFound(where + ": no such file");
    return IoError(where + ": " + ErrText(err));
  }
  struct stat st;
  if (::fstat(src.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return FailedPrecondition(url() + ": put '" + std::string(key) + "': " + path +
                              " is not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  PutTxn txn(*this, key);
  GANTRY_RETURN_IF_ERROR(txn.Begin(options_.direct_io));
  const int parts = size >= options_.parallel_threshold ? options_.parallelism : 1;
  const int in = src.get();
  const int out = txn.fd();
  const bool direct = txn.direct();
  const uint64_t io = options_.io_size;
  const bool stream = options_.sync && size >= kStreamThreshold;
  if (int err = Parallel(size, parts, io, [&](uint64_t b, uint64_t e) {
        return CopySpan(in, out, b, e - b, direct, io, stream);
      })) {
    return txn.Fail("copy " + path + " to temp file " + txn.tmp(), temp_dir(), err);
  }
  GANTRY_RETURN_IF_ERROR(txn.Finish(size));
  return txn.Commit(false);
}

namespace {

// Opens an object for reading; NotFound for missing keys and for directories (not objects).
Result<int> OpenObject(const PosixStore& store, const char* op, std::string_view key,
                       uint64_t* size, struct stat* st_out = nullptr) {
  GANTRY_RETURN_IF_ERROR(CheckPosixKey(store, op, key));
  const std::string path = store.root() + "/" + std::string(key);
  const std::string where = store.url() + ": " + op + " '" + std::string(key) + "'";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return NotFound(where + ": no such object");
    return IoError(where + ": open " + path + ": " + ErrText(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return NotFound(where + ": no such object (" + path + " is not a regular file)");
  }
  *size = static_cast<uint64_t>(st.st_size);
  if (st_out != nullptr) *st_out = st;
  return fd;
}

Status ReadError(const PosixStore& store, std::string_view key, int err) {
  return IoError(store.url() + ": get '" + std::string(key) + "': read " + store.root() + "/" +
                 std::string(key) + ": " + ErrText(err));
}

}  // namespace

Result<std::string> PosixStore::Get(std::string_view key) { return GetRange(key, 0, kToEnd); }

Result<std::string> PosixStore::GetRange(std::string_view key, uint64_t offset, uint64_t length) {
  uint64_t size = 0;
  GANTRY_ASSIGN_OR_RETURN(int raw, OpenObject(*this, "get", key, &size));
  Fd fd(raw);
  if (offset > size) {
    return OutOfRange(url() + ": get '" + std::string(key) + "': offset " + std::to_string(offset) +
                      " is past the end (size " + std::to_string(size) + ")");
  }
  const uint64_t n = std::min(length, size - offset);
  std::string out(n, '\0');
  const int parts = n >= options_.parallel_threshold ? options_.parallelism : 1;
  std::atomic<bool> short_read{false};
  if (int err = Parallel(n, parts, options_.io_size, [&](uint64_t b, uint64_t e) {
        uint64_t got = 0;
        const int rc = PreadAll(fd.get(), out.data() + b, e - b, offset + b, &got);
        if (rc == 0 && got != e - b) short_read = true;
        return rc;
      })) {
    return ReadError(*this, key, err);
  }
  if (short_read) {
    // Truncated by a writer that bypassed the store; puts never shrink a file in place.
    return Status(StatusCode::kUnavailable,
                  url() + ": get '" + std::string(key) + "': object shrank while being read");
  }
  return out;
}

Result<uint64_t> PosixStore::GetParts(std::string_view key, uint64_t offset,
                                      std::span<const std::span<char>> parts) {
  uint64_t size = 0;
  GANTRY_ASSIGN_OR_RETURN(int raw, OpenObject(*this, "get", key, &size));
  Fd fd(raw);
  if (offset > size) {
    return OutOfRange(url() + ": get '" + std::string(key) + "': offset " + std::to_string(offset) +
                      " is past the end (size " + std::to_string(size) + ")");
  }
  uint64_t done = 0;
  for (std::span<char> p : parts) {
    const uint64_t want = std::min<uint64_t>(p.size(), size - offset - done);
    if (want == 0) break;
    uint64_t got = 0;
    if (int rc = PreadAll(fd.get(), p.data(), want, offset + done, &got)) {
      return ReadError(*this, key, rc);
    }
    done += got;
    if (got != want) break;  // shrank under us: the caller checks the count
  }
  return done;
}

Result<uint64_t> PosixStore::ReadInto(std::string_view key, uint64_t offset, char* buf,
                                      uint64_t buf_len) {
  uint64_t size = 0;
  GANTRY_ASSIGN_OR_RETURN(int raw, OpenObject(*this, "get", key, &size));
  Fd fd(raw);
  if (offset > size) {
    return OutOfRange(url() + ": get '" + std::string(key) + "': offset " + std::to_string(offset) +
                      " is past the end (size " + std::to_string(size) + ")");
  }
  const uint64_t n = std::min(buf_len, size - offset);
  // Direct reads need aligned memory, offsets and lengths; the unaligned tail is read buffered.
  Fd direct_fd;
  uint64_t direct_len = 0;
  if (options_.direct_io && IsAligned(buf) && offset % kAlign == 0) {
    const std::string path = root_ + "/" + std::string(key);
    direct_fd.Reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
    if (direct_fd.get() >= 0) direct_len = n / kAlign * kAlign;
  }
  const int parts = n >= options_.parallel_threshold ? options_.parallelism : 1;
  const uint64_t io = options_.io_size;
  int err = Parallel(direct_len, parts, io, [&](uint64_t b, uint64_t e) {
    for (uint64_t pos = b; pos < e;) {
      const uint64_t len = std::min(io, e - pos);
      uint64_t got = 0;
      int rc = PreadAll(direct_fd.get(), buf + pos, len, offset + pos, &got);
      if (rc == EINVAL) rc = PreadAll(fd.get(), buf + pos, len, offset + pos, &got);
      if (rc) return rc;
      if (got != len) return EIO;
      pos += len;
    }
    return 0;
  });
  if (err == 0 && n > direct_len) {
    err = Parallel(n - direct_len, direct_len == 0 ? parts : 1, io, [&](uint64_t b, uint64_t e) {
      uint64_t got = 0;
      const int rc = PreadAll(fd.get(), buf + direct_len + b, e - b, offset + direct_len + b, &got);
      return rc ? rc : (got == e - b ? 0 : EIO);
    });
  }
  if (err) return ReadError(*this, key, err);
  return n;
}

Status PosixStore::GetToFile(std::string_view key, const std::string& path) {
  uint64_t size = 0;
  GANTRY_ASSIGN_OR_RETURN(int raw, OpenObject(*this, "get", key, &size));
  Fd src(raw);
  const std::string where = url() + ": get '" + std::string(key) + "'";
  // Beside the destination, then rename: the file appears whole or not at all.
  std::string tmp = path + ".gantry-part." + RandomSuffix();
  bool direct = false;
  Fd dst(OpenForWrite(tmp, options_.direct_io, &direct));
  if (dst.get() < 0) {
    return IoError(where + ": create " + tmp + " (directory " + DirOf(tmp) +
                   "): " + ErrText(errno));
  }
  auto fail = [&](const std::string& what, int err) {
    dst.Reset();
    ::unlink(tmp.c_str());
    return IoError(where + ": " + what + " " + path + " (directory " + DirOf(tmp) +
                   "): " + ErrText(err));
  };
  const int parts = size >= options_.parallel_threshold ? options_.parallelism : 1;
  const uint64_t io = options_.io_size;
  const bool stream = options_.sync && size >= kStreamThreshold;
  if (int err = Parallel(size, parts, io, [&](uint64_t b, uint64_t e) {
        return CopySpan(src.get(), dst.get(), b, e - b, direct, io, stream);
      })) {
    return fail("write", err);
  }
  if (direct && size % kAlign != 0 && ::ftruncate(dst.get(), static_cast<off_t>(size)) != 0) {
    return fail("truncate", errno);
  }
  if (options_.sync && ::fsync(dst.get()) != 0) return fail("fsync", errno);
  if (dst.Close() != 0) return fail("close", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename into", errno);
  return Status::Ok();
}

Result<ObjectInfo> PosixStore::Head(std::string_view key) {
  uint64_t size = 0;
  struct stat st;
  GANTRY_ASSIGN_OR_RETURN(int raw, OpenObject(*this, "head", key, &size, &st));
  ::close(raw);
  ObjectInfo info;
  info.key = std::string(key);
  info.size = size;
  info.mtime_unix = st.st_mtim.tv_sec;
  // A put replaces the inode (rename), so inode + mtime identify a version.
  char etag[80];
  std::snprintf(
      etag, sizeof(etag), "%llx-%llx-%llx", static_cast<unsigned long long>(st.st_ino),
      static_cast<unsigned long long>(st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec),
      static_cast<unsigned long long>(size));
  info.etag = etag;
  return info;
}

namespace {

// Depth-first walk in key order. Entries sort by name, with '/' appended to directories, so
// that "a-c" (a file) comes before "a/b" exactly as the full keys compare.
struct Walker {
  const PosixStore& store;
  std::string_view prefix;
  std::string_view token;
  size_t limit;  // collect up to this many
  std::vector<ObjectInfo>* out;
  Status status;

  // rel: the directory's key prefix ("" or "a/b/").
  bool Walk(const std::string& rel) {
    const std::string dir =
        rel.empty() ? store.root() : store.root() + "/" + rel.substr(0, rel.size() - 1);
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
      if (errno == ENOENT || errno == ENOTDIR) return true;  // removed by a concurrent delete
      status = IoError(store.url() + ": list '" + std::string(prefix) + "': open directory " + dir +
                       ": " + ErrText(errno));
      return false;
    }
    std::vector<std::pair<std::string, bool>> entries;  // (sort key, is_dir)
    while (struct dirent* e = ::readdir(d)) {
      const std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      if (rel.empty() && name == kTempDirName) continue;
      bool is_dir = e->d_type == DT_DIR;
      bool is_reg = e->d_type == DT_REG;
      if (e->d_type == DT_UNKNOWN) {
        struct stat st;
        if (::fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        is_dir = S_ISDIR(st.st_mode);
        is_reg = S_ISREG(st.st_mode);
      }
      if (!is_dir && !is_reg) continue;
      std::string key = rel + std::string(name);
      if (is_dir) key += '/';
      // Prune: the subtree must overlap the prefix and may hold keys after the token.
      if (!(key.starts_with(prefix) || (is_dir && std::string_view(prefix).starts_with(key)))) {
        continue;
      }
      if (!token.empty()) {
        if (is_dir ? (key < token && !token.starts_with(key)) : (key <= token)) continue;
      }
      entries.emplace_back(std::move(key), is_dir);
    }
    ::closedir(d);
    std::sort(entries.begin(), entries.end());
    for (auto& [key, is_dir] : entries) {
      if (is_dir) {
        if (!Walk(key)) return false;
        continue;
      }
      struct stat st;
      const std::string path = store.root() + "/" + key;
      if (::stat(path.c_str(), &st) != 0) continue;  // deleted meanwhile
      ObjectInfo info;
      info.key = key;
      info.size = static_cast<uint64_t>(st.st_size);
      info.mtime_unix = st.st_mtim.tv_sec;
      out->push_back(std::move(info));
      if (out->size() >= limit) return false;
    }
    return true;
  }
};

}  // namespace

Result<ListPage> PosixStore::List(std::string_view prefix, std::string_view page_token,
                                  int max_keys) {
  if (max_keys <= 0) max_keys = 1000;
  ListPage page;
  // One extra object tells whether another page exists.
  Walker w{*this, prefix, page_token, static_cast<size_t>(max_keys) + 1, &page.objects, {}};
  w.Walk("");
  if (!w.status.ok()) return w.status;
  if (page.objects.size() > static_cast<size_t>(max_keys)) {
    page.objects.pop_back();
    page.next_token = page.objects.back().key;
  }
  return page;
}

Status PosixStore::Delete(std::string_view key) {
  GANTRY_RETURN_IF_ERROR(CheckPosixKey(*this, "delete", key));
  std::string path = root_ + "/" + std::string(key);
  if (::unlink(path.c_str()) != 0) {
    const int err = errno;
    // Missing, or a directory of other objects (not an object itself): nothing to delete.
    if (err == ENOENT || err == ENOTDIR || err == EISDIR) return Status::Ok();
    return IoError(url() + ": delete '" + std::string(key) + "': unlink " + path + ": " +
                   ErrText(err));
  }
  // Best effort: rmdir refuses non-empty directories atomically, so racing puts are safe
  // (they recreate what they need, see PutTxn::Commit).
  while (true) {
    path = DirOf(path);
    if (path.size() <= root_.size()) break;
    if (::rmdir(path.c_str()) != 0) break;
  }
  if (options_.sync) FsyncDir(path);
  return Status::Ok();
}

Result<int> PosixStore::CleanupTemp(int64_t max_age_seconds) {
  const std::string dir = temp_dir();
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return 0;
    return IoError(url() + ": cleanup: open " + dir + ": " + ErrText(errno));
  }
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  int removed = 0;
  while (struct dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (!name.starts_with(".tmp.")) continue;
    struct stat st;
    if (::fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode) || now - st.st_mtim.tv_sec < max_age_seconds) continue;
    if (::unlinkat(dirfd(d), e->d_name, 0) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

}  // namespace gantry
