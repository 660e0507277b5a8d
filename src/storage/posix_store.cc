// The posix-directory backend. Durability protocol for a put (why each step is there):
//   1. write a temp file in <root>/.gantry-tmp (same file system, so rename is atomic);
//   2. fsync it (the data is on disk before the name points at it);
//   3. rename(2) over the final name, or link(2) for create-if-absent (fails with EEXIST
//      atomically, no check-then-act race);
//   4. fsync the final name's directory (the new name survives a power cut).
// Parents are created on demand; Delete removes emptied parents, so a put racing a delete can
// see its parent vanish between mkdir and rename: it recreates the parents and retries.
//
// Keys never leave the root: every path is resolved beneath the root's descriptor without
// following a symbolic link (openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or, on kernels
// without openat2, one openat(O_NOFOLLOW) per component), and names change only through the
// *at calls on those descriptors. A link someone planted inside the root is no object: reads
// answer NotFound, writes through it FailedPrecondition, and nothing outside is touched.
#include "gantry/storage/posix_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

// ObjectInfo::etag of a file. A put replaces the inode (rename), and an edit in place moves the
// mtime, so inode, mtime (to the nanosecond) and size name one version of an object.
std::string VersionTag(const struct stat& st, uint64_t size) {
  char tag[80];
  std::snprintf(
      tag, sizeof(tag), "%llx-%llx-%llx", static_cast<unsigned long long>(st.st_ino),
      static_cast<unsigned long long>(st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec),
      static_cast<unsigned long long>(size));
  return tag;
}

constexpr std::string_view kTempDirName = ".gantry-tmp";
constexpr std::string_view kLockName = ".gantry-lock";  // the chunk store's lock file
constexpr uint64_t kAlign = 4096;
constexpr int kCommitAttempts = 64;
// Buffered writes at least this big stream their writeback (see Writeback).
constexpr uint64_t kStreamThreshold = 64ull << 20;

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
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
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

// A file created for writing (`name` relative to dirfd, never through a link): O_DIRECT when
// asked and allowed, else buffered.
int OpenForWrite(int dirfd, const std::string& name, bool direct, bool* got_direct) {
  *got_direct = false;
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  if (direct) {
    const int fd = ::openat(dirfd, name.c_str(), kFlags | O_DIRECT, 0644);
    if (fd >= 0) {
      *got_direct = true;
      return fd;
    }
    if (errno != EINVAL) return -1;  // tmpfs and friends refuse O_DIRECT with EINVAL
  }
  return ::openat(dirfd, name.c_str(), kFlags, 0644);
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

int FsyncDir(int dirfd) { return ::fsync(dirfd) == 0 ? 0 : errno; }

// --- Resolution beneath the root, following no link ---------------------------------------

std::atomic<bool> g_use_openat2{true};  // cleared once the kernel answers ENOSYS

bool IsSymlinkAt(int dirfd, const std::string& name) {
  struct stat st;
  return ::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
}

// The fallback: one openat per component, each with O_NOFOLLOW (O_DIRECTORY for the parents).
// Keys hold no "." or ".." segments (ValidateKey), so no component can climb out.
int OpenByComponents(int dirfd, std::string_view rel, int flags, mode_t mode) {
  int dir = dirfd;
  size_t start = 0;
  while (true) {
    const size_t slash = rel.find('/', start);
    const bool last = slash == std::string_view::npos;
    const std::string seg(rel.substr(start, last ? std::string_view::npos : slash - start));
    const int fd =
        last ? ::openat(dir, seg.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode)
             : ::openat(dir, seg.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int err = errno;
    // A link where a directory is wanted answers ENOTDIR; say ELOOP like openat2 does.
    if (fd < 0 && err == ENOTDIR && IsSymlinkAt(dir, seg)) err = ELOOP;
    if (dir != dirfd) ::close(dir);
    if (fd < 0) {
      errno = err;
      return -1;
    }
    if (last) return fd;
    dir = fd;
    start = slash + 1;
  }
}

bool LinkInTheWay(int err) { return err == ELOOP || err == EXDEV; }

// The root, opened for one operation. It is the real path found at open time, so no link is
// followed here either (unless someone replaces the root itself).
int OpenRoot(const std::string& root) {
  return ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

// Opens, segment by segment without following links, the directories from the root down to
// the one holding `key`'s object (one descriptor each, in *chain); with `create`, makes the
// missing ones (and fsyncs each new entry's directory when `sync`). 0 or an errno: ELOOP (a
// link in the way), ENOTDIR (a parent is an object), ENOENT (a parent is missing; with create,
// a racing Delete removed one: the caller retries).
int OpenParents(int root_fd, std::string_view key, bool create, bool sync, std::vector<Fd>* chain) {
  chain->clear();
  int dir = root_fd;
  size_t start = 0;
  while (true) {
    const size_t slash = key.find('/', start);
    if (slash == std::string_view::npos) return 0;
    const std::string seg(key.substr(start, slash - start));
    if (create) {
      if (::mkdirat(dir, seg.c_str(), 0755) == 0) {
        // The new directory entry must be durable too, or the object can vanish with it.
        if (sync) FsyncDir(dir);
      } else if (errno != EEXIST) {
        return errno;
      }
    }
    const int fd = ::openat(dir, seg.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == ENOTDIR || err == ELOOP) return IsSymlinkAt(dir, seg) ? ELOOP : ENOTDIR;
      return err;
    }
    chain->emplace_back(fd);
    dir = fd;
    start = slash + 1;
  }
}

std::string_view LeafOf(std::string_view key) {
  const size_t slash = key.rfind('/');
  return slash == std::string_view::npos ? key : key.substr(slash + 1);
}

}  // namespace

int OpenBeneath(int dirfd, std::string_view rel, int flags, mode_t mode) {
  if (g_use_openat2.load(std::memory_order_relaxed)) {
    struct open_how how {};
    how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
    how.mode = (flags & O_CREAT) != 0 ? mode : 0;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    const std::string path(rel);
    // EAGAIN: a concurrent rename raced the lookup (the kernel refuses to guess); retry.
    for (int attempt = 0; attempt < 16; ++attempt) {
      const long fd = ::syscall(SYS_openat2, dirfd, path.c_str(), &how, sizeof(how));
      if (fd >= 0) return static_cast<int>(fd);
      if (errno == EINTR || errno == EAGAIN) continue;
      if (errno != ENOSYS) return -1;
      g_use_openat2.store(false);
      break;
    }
  }
  return OpenByComponents(dirfd, rel, flags, mode);
}

Result<std::unique_ptr<PosixStore>> OpenPosixStore(const std::string& root,
                                                   const PosixStoreOptions& options) {
  if (root.empty()) return InvalidArgument("posix store: empty root directory");
  std::string abs = root;
  if (abs.front() != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) {
      return StatusFromErrno(errno, "posix store '" + root + "': getcwd");
    }
    abs = std::string(cwd) + "/" + abs;
  }
  abs = std::filesystem::path(abs).lexically_normal().string();
  while (abs.size() > 1 && abs.back() == '/') abs.pop_back();
  // mkdir -p the root: a tier directory on a fresh node does not exist yet.
  for (size_t pos = 1; options.create_root && pos <= abs.size(); ++pos) {
    if (pos != abs.size() && abs[pos] != '/') continue;
    const std::string part = abs.substr(0, pos);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      return StatusFromErrno(errno, "posix store: cannot create directory " + part);
    }
  }
  // The root may be reached through links (a mount point, /scratch -> /nvme0): resolve them
  // once, here; every key below it is then resolved without following any (see the top).
  char* real = ::realpath(abs.c_str(), nullptr);
  if (real == nullptr) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return NotFound("posix store: directory " + abs + " does not exist");
    }
    return StatusFromErrno(err, "posix store: resolve " + abs);
  }
  abs = real;
  std::free(real);
  struct stat st;
  if (::stat(abs.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return NotFound("posix store: directory " + abs + " does not exist");
    }
    return StatusFromErrno(err, "posix store: " + abs);
  }
  if (!S_ISDIR(st.st_mode)) {
    return FailedPrecondition("posix store: " + abs + " is not a directory");
  }
  Fd root_fd(OpenRoot(abs));
  if (root_fd.get() < 0) return StatusFromErrno(errno, "posix store: open " + abs);
  // Without create_root nothing is written here; a put recreates the temp directory.
  if (options.create_root &&
      ::mkdirat(root_fd.get(), std::string(kTempDirName).c_str(), 0755) != 0 && errno != EEXIST) {
    return StatusFromErrno(errno,
                           "posix store: cannot create " + abs + "/" + std::string(kTempDirName));
  }
  PosixStoreOptions opts = options;
  if (opts.parallelism < 1) opts.parallelism = 1;
  if (opts.io_size < kAlign) opts.io_size = kAlign;
  opts.io_size = opts.io_size / kAlign * kAlign;
  return std::unique_ptr<PosixStore>(new PosixStore(abs, opts));
}

void SetPosixStoreOpenat2ForTesting(bool enabled) { g_use_openat2.store(enabled); }

namespace {

// Shared pieces of the put paths, bound to one store and key.
class PutTxn {
 public:
  PutTxn(const PosixStore& store, std::string_view key)
      : store_(store), key_(key), final_(store.root() + "/" + std::string(key)) {}
  ~PutTxn() {
    fd_.Reset();
    if (!tmp_name_.empty()) ::unlinkat(tmp_dir_.get(), tmp_name_.c_str(), 0);
  }

  std::string Where() const { return store_.url() + ": put '" + key_ + "'"; }

  Status Fail(const std::string& what, const std::string& dir, int err) const {
    return StatusFromErrno(err, Where() + ": " + what + " (directory " + dir + ")");
  }

  Status Begin(bool direct) {
    root_.Reset(OpenRoot(store_.root()));
    if (root_.get() < 0) return Fail("open the root", store_.root(), errno);
    const std::string tmp_dir_name(kTempDirName);
    for (int attempt = 0; attempt < 2; ++attempt) {
      tmp_dir_.Reset(::openat(root_.get(), tmp_dir_name.c_str(),
                              O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      int err = errno;
      if (tmp_dir_.get() >= 0) {
        const std::string name = ".tmp." + RandomSuffix();
        const int fd = OpenForWrite(tmp_dir_.get(), name, direct, &direct_);
        if (fd >= 0) {
          fd_.Reset(fd);
          tmp_name_ = name;
          return Status::Ok();
        }
        err = errno;
      }
      if (err == ENOENT && attempt == 0) {  // someone removed the temp dir: recreate it
        ::mkdirat(root_.get(), tmp_dir_name.c_str(), 0755);
        continue;
      }
      return Fail("create temp file", store_.temp_dir(), err);
    }
    return Internal(Where() + ": unreachable");
  }

  int fd() const { return fd_.get(); }
  bool direct() const { return direct_; }
  std::string tmp() const { return store_.temp_dir() + "/" + tmp_name_; }

  // Truncates to the real size (direct writes pad the tail), flushes and closes.
  Status Finish(uint64_t size) {
    if (direct_ && size % kAlign != 0 && ::ftruncate(fd_.get(), static_cast<off_t>(size)) != 0) {
      return Fail("truncate temp file " + tmp(), store_.temp_dir(), errno);
    }
    if (store_.options().sync && ::fsync(fd_.get()) != 0) {
      return Fail("fsync temp file " + tmp(), store_.temp_dir(), errno);
    }
    if (fd_.Close() != 0) return Fail("close temp file " + tmp(), store_.temp_dir(), errno);
    return Status::Ok();
  }

  // Moves the temp file to the final name (see the protocol at the top of the file).
  Status Commit(bool create_if_absent) {
    const std::string dir = DirOf(final_);
    const std::string leaf(LeafOf(key_));
    const bool sync = store_.options().sync;
    std::vector<Fd> chain;
    for (int attempt = 0; attempt < kCommitAttempts; ++attempt) {
      int err = OpenParents(root_.get(), key_, /*create=*/true, sync, &chain);
      if (err == ENOENT) continue;  // a concurrent Delete removed an emptied parent: redo
      if (err == ENOTDIR) return ParentIsObject();
      if (err == ELOOP) return ParentIsLink();
      if (err != 0) return Fail("create the parent directories", dir, err);
      const int parent = chain.empty() ? root_.get() : chain.back().get();
      const int rc = create_if_absent
                         ? ::linkat(tmp_dir_.get(), tmp_name_.c_str(), parent, leaf.c_str(), 0)
                         : ::renameat(tmp_dir_.get(), tmp_name_.c_str(), parent, leaf.c_str());
      if (rc == 0) {
        if (create_if_absent) ::unlinkat(tmp_dir_.get(), tmp_name_.c_str(), 0);
        tmp_name_.clear();
        if (sync) {
          if (int e = FsyncDir(parent); e != 0) return Fail("fsync directory", dir, e);
        }
        return Status::Ok();
      }
      err = errno;
      if (err == ENOENT) continue;  // the parent was removed after we opened it: redo
      if (err == EEXIST && create_if_absent) {
        struct stat st;
        if (::fstatat(parent, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISDIR(st.st_mode)) {
          return AlreadyExists(Where() + ": already exists");
        }
      }
      if (err == EISDIR || err == ENOTEMPTY || err == EEXIST) {
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
  Status ParentIsLink() const {
    return FailedPrecondition(Where() + ": a parent of the key is a symbolic link, which the " +
                              "posix store does not follow");
  }

  const PosixStore& store_;
  const std::string key_;
  const std::string final_;  // for messages
  Fd root_;
  Fd tmp_dir_;
  std::string tmp_name_;  // non-empty while a temp file exists that we must remove on failure
  Fd fd_;
  bool direct_ = false;
};

Status CheckPosixKey(const PosixStore& store, const char* op, std::string_view key) {
  // ValidateKey also refuses the reserved top-level names (.gantry-tmp, .gantry-lock).
  Status s = ValidateKey(key);
  if (!s.ok()) return s.WithContext(store.url() + ": " + op);
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
  return CopyFileIn(key, path, /*create_if_absent=*/false);
}

Status PosixStore::PutFileIfAbsent(std::string_view key, const std::string& path) {
  return CopyFileIn(key, path, /*create_if_absent=*/true);
}

// The file is copied into a temp file beside the tree (copy_file_range, in parallel for large
// ones), then renamed into place, or linked for a create-only put (EEXIST: AlreadyExists).
Status PosixStore::CopyFileIn(std::string_view key, const std::string& path,
                              bool create_if_absent) {
  GANTRY_RETURN_IF_ERROR(CheckPosixKey(*this, "put", key));
  Fd src(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (src.get() < 0) {
    const int err = errno;
    const std::string where = url() + ": put '" + std::string(key) + "': " + path;
    if (err == ENOENT) return NotFound(where + ": no such file");
    return StatusFromErrno(err, where);
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
  return txn.Commit(create_if_absent);
}

namespace {

// Opens an object for reading (with `extra_flags`, O_DIRECT say) beneath the root without
// following links; -1 with errno.
int OpenObjectFd(const PosixStore& store, std::string_view key, int extra_flags) {
  Fd root(OpenRoot(store.root()));
  if (root.get() < 0) return -1;
  // O_NONBLOCK: opening a FIFO someone left in the tree must not hang the reader.
  return OpenBeneath(root.get(), key, O_RDONLY | O_NONBLOCK | extra_flags);
}

// Opens an object for reading; NotFound for missing keys, for directories and for anything
// reached through a symbolic link (not objects).
Result<int> OpenObject(const PosixStore& store, const char* op, std::string_view key,
                       uint64_t* size, struct stat* st_out = nullptr) {
  GANTRY_RETURN_IF_ERROR(CheckPosixKey(store, op, key));
  const std::string path = store.root() + "/" + std::string(key);
  const std::string where = store.url() + ": " + op + " '" + std::string(key) + "'";
  const int fd = OpenObjectFd(store, key, 0);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return NotFound(where + ": no such object");
    if (LinkInTheWay(err)) {
      return NotFound(where + ": no such object (a symbolic link is in the way, and the posix " +
                      "store follows none)");
    }
    return StatusFromErrno(err, where + ": open " + path);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return NotFound(where + ": no such object (" + path + " is not a regular file)");
  }
  // Back to blocking reads (O_NONBLOCK was only for the open; it means nothing for files).
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  *size = static_cast<uint64_t>(st.st_size);
  if (st_out != nullptr) *st_out = st;
  return fd;
}

Status ReadError(const PosixStore& store, std::string_view key, int err) {
  return StatusFromErrno(err, store.url() + ": get '" + std::string(key) + "': read " +
                                  store.root() + "/" + std::string(key));
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
    direct_fd.Reset(OpenObjectFd(*this, key, O_DIRECT));
    if (direct_fd.get() >= 0) {
      ::fcntl(direct_fd.get(), F_SETFL, ::fcntl(direct_fd.get(), F_GETFL) & ~O_NONBLOCK);
      direct_len = n / kAlign * kAlign;
    }
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
  Fd dst(OpenForWrite(AT_FDCWD, tmp, options_.direct_io, &direct));
  if (dst.get() < 0) {
    return StatusFromErrno(errno, where + ": create " + tmp + " (directory " + DirOf(tmp) + ")");
  }
  auto fail = [&](const std::string& what, int err) {
    dst.Reset();
    ::unlink(tmp.c_str());
    return StatusFromErrno(err,
                           where + ": " + what + " " + path + " (directory " + DirOf(tmp) + ")");
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
  info.etag = VersionTag(st, size);
  return info;
}

namespace {

// Depth-first walk in key order. Entries sort by name, with '/' appended to directories, so
// that "a-c" (a file) comes before "a/b" exactly as the full keys compare. Directories are
// opened relative to their parent with O_NOFOLLOW, so a link (or a directory swapped for one
// mid-walk) is never entered; links are not objects and are not listed.
struct Walker {
  const PosixStore& store;
  std::string_view prefix;
  std::string_view token;
  size_t limit;  // collect up to this many
  std::vector<ObjectInfo>* out;
  Status status;

  // fd: the directory (taken over and closed here); rel: its key prefix ("" or "a/b/").
  bool Walk(int fd, const std::string& rel) {
    DIR* d = ::fdopendir(fd);
    if (d == nullptr) {
      const int err = errno;
      ::close(fd);
      status = StatusFromErrno(err, store.url() + ": list '" + std::string(prefix) +
                                        "': read directory " + store.root() + "/" + rel);
      return false;
    }
    std::vector<std::pair<std::string, bool>> entries;  // (sort key, is_dir)
    while (struct dirent* e = ::readdir(d)) {
      const std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      // The store's own files (temp files, the chunk store's lock) are not objects.
      if (rel.empty() && (name == kTempDirName || name == kLockName)) continue;
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
    std::sort(entries.begin(), entries.end());
    bool more = true;
    for (auto& [key, is_dir] : entries) {
      const std::string name = key.substr(rel.size(), key.size() - rel.size() - (is_dir ? 1 : 0));
      if (is_dir) {
        const int sub =
            ::openat(dirfd(d), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0) {
          const int err = errno;
          // Removed by a concurrent delete, or swapped for something else: not a directory now.
          if (err == ENOENT || err == ENOTDIR || err == ELOOP) continue;
          status = StatusFromErrno(err, store.url() + ": list '" + std::string(prefix) +
                                            "': open directory " + store.root() + "/" + key);
          more = false;
          break;
        }
        if (!Walk(sub, key)) {
          more = false;
          break;
        }
        continue;
      }
      struct stat st;
      if (::fstatat(dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          !S_ISREG(st.st_mode)) {
        continue;  // deleted meanwhile, or replaced by a non-object
      }
      ObjectInfo info;
      info.key = key;
      info.size = static_cast<uint64_t>(st.st_size);
      info.mtime_unix = st.st_mtim.tv_sec;
      info.etag = VersionTag(st, info.size);
      out->push_back(std::move(info));
      if (out->size() >= limit) {
        more = false;
        break;
      }
    }
    ::closedir(d);
    return more;
  }
};

}  // namespace

Result<ListPage> PosixStore::List(std::string_view prefix, std::string_view page_token,
                                  int max_keys) {
  if (max_keys <= 0) max_keys = 1000;
  ListPage page;
  // One extra object tells whether another page exists.
  Walker w{*this, prefix, page_token, static_cast<size_t>(max_keys) + 1, &page.objects, {}};
  const int root = OpenRoot(root_);
  if (root < 0) {
    if (errno == ENOENT) return page;  // the whole tree is gone: nothing to list
    return StatusFromErrno(errno, url() + ": list '" + std::string(prefix) + "': open " + root_);
  }
  w.Walk(root, "");
  if (!w.status.ok()) return w.status;
  if (page.objects.size() > static_cast<size_t>(max_keys)) {
    page.objects.pop_back();
    page.next_token = page.objects.back().key;
  }
  return page;
}

Status PosixStore::Delete(std::string_view key) {
  GANTRY_RETURN_IF_ERROR(CheckPosixKey(*this, "delete", key));
  const std::string path = root_ + "/" + std::string(key);
  const std::string where = url() + ": delete '" + std::string(key) + "'";
  Fd root(OpenRoot(root_));
  if (root.get() < 0) {
    if (errno == ENOENT) return Status::Ok();
    return StatusFromErrno(errno, where + ": open " + root_);
  }
  std::vector<Fd> chain;
  const int err = OpenParents(root.get(), key, /*create=*/false, false, &chain);
  // A missing parent, a parent that is an object or a link: no such object, nothing to delete.
  if (err == ENOENT || err == ENOTDIR || err == ELOOP) return Status::Ok();
  if (err != 0) return StatusFromErrno(err, where + ": open the parent directories of " + path);
  const int parent = chain.empty() ? root.get() : chain.back().get();
  const std::string leaf(LeafOf(key));
  // Only objects are deleted: a directory of other objects or a planted link is not one.
  struct stat st;
  if (::fstatat(parent, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return Status::Ok();
    return StatusFromErrno(errno, where + ": stat " + path);
  }
  if (!S_ISREG(st.st_mode)) return Status::Ok();
  if (::unlinkat(parent, leaf.c_str(), 0) != 0) {
    if (errno == ENOENT) return Status::Ok();  // a concurrent delete won
    return StatusFromErrno(errno, where + ": unlink " + path);
  }
  // Best effort: rmdir refuses non-empty directories atomically, so racing puts are safe
  // (they recreate what they need, see PutTxn::Commit).
  size_t depth = chain.size();
  std::string_view dirs = key.substr(0, key.size() - leaf.size());  // "a/b/" or ""
  while (depth > 0) {
    dirs.remove_suffix(1);  // the '/'
    const std::string name(LeafOf(dirs));
    const int above = depth >= 2 ? chain[depth - 2].get() : root.get();
    if (::unlinkat(above, name.c_str(), AT_REMOVEDIR) != 0) break;
    dirs.remove_suffix(name.size());
    --depth;
  }
  if (options_.sync) FsyncDir(depth == 0 ? root.get() : chain[depth - 1].get());
  return Status::Ok();
}

Result<bool> PosixStore::RemoveTempDirIfEmpty() {
  Fd root(OpenRoot(root_));
  if (root.get() < 0) return StatusFromErrno(errno, url() + ": open the root " + root_);
  const std::string name(kTempDirName);
  struct stat st;
  if (::fstatat(root.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return true;
    return StatusFromErrno(errno, url() + ": stat " + temp_dir());
  }
  // A link or a file in its place is not ours to remove (puts fail on it, and say so).
  if (!S_ISDIR(st.st_mode)) return false;
  if (::unlinkat(root.get(), name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) return true;
  if (errno == ENOTEMPTY || errno == EEXIST) return false;
  return StatusFromErrno(errno, url() + ": remove " + temp_dir());
}

Result<int> PosixStore::CleanupTemp(int64_t max_age_seconds) {
  const std::string dir = temp_dir();
  Fd root(OpenRoot(root_));
  const int fd = root.get() < 0 ? -1
                                : ::openat(root.get(), std::string(kTempDirName).c_str(),
                                           O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DIR* d = fd < 0 ? nullptr : ::fdopendir(fd);
  if (d == nullptr) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    if (err == ENOENT) return 0;
    return StatusFromErrno(err, url() + ": cleanup: open " + dir);
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
