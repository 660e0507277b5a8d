// The ObjectStore pieces every backend shares: key validation, the whole-file and asynchronous
// defaults, ListAll, and the URL opener that dispatches to a backend.
#include "gantry/storage/object_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "gantry/common/thread_pool.h"
#include "gantry/storage/http_store.h"
#include "gantry/storage/memory_store.h"
#include "gantry/storage/posix_store.h"
#include "gantry/storage/s3.h"

namespace gantry {
namespace {

constexpr size_t kMaxKeyBytes = 1024;
constexpr size_t kMaxSegmentBytes = 255;

// Renders a key for an error message: control characters would garble terminals and logs.
std::string Printable(std::string_view key) {
  std::string out;
  for (unsigned char c : key.substr(0, 120)) {
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (key.size() > 120) out += "...";
  return out;
}

Status BadKey(std::string_view key, const std::string& why) {
  return InvalidArgument("invalid object key '" + Printable(key) + "': " + why);
}

}  // namespace

Status ValidateKey(std::string_view key) {
  if (key.empty()) return BadKey(key, "empty");
  if (key.size() > kMaxKeyBytes) {
    return BadKey(key, "longer than " + std::to_string(kMaxKeyBytes) + " bytes (" +
                           std::to_string(key.size()) + ")");
  }
  if (key.front() == '/') return BadKey(key, "absolute path (leading '/')");
  for (unsigned char c : key) {
    if (c == 0) return BadKey(key, "contains a NUL byte");
    if (c < 0x20 || c == 0x7f) return BadKey(key, "contains a control character");
    if (c == '\\') return BadKey(key, "contains a backslash");
  }
  size_t start = 0;
  while (start <= key.size()) {
    size_t end = key.find('/', start);
    if (end == std::string_view::npos) end = key.size();
    std::string_view seg = key.substr(start, end - start);
    if (seg.empty()) {
      return BadKey(key, end == key.size() ? "ends with '/'" : "empty segment ('//')");
    }
    if (seg == "." || seg == "..") return BadKey(key, "'" + std::string(seg) + "' segment");
    // The stores' own files (posix temp files, the chunk store's lock) live under these names
    // at the top of a root: a key there would clash with them, or be swept as a leftover.
    if (start == 0 && (seg == ".gantry-tmp" || seg == ".gantry-lock")) {
      return BadKey(key, "'" + std::string(seg) + "' is reserved for the store's own files");
    }
    if (seg.size() > kMaxSegmentBytes) {
      return BadKey(key, "segment longer than " + std::to_string(kMaxSegmentBytes) + " bytes");
    }
    start = end + 1;
  }
  return Status::Ok();
}

namespace {

// The default PutFile and PutFileIfAbsent: the whole file in memory, then one Put.
Status PutWholeFile(ObjectStore& store, std::string_view key, const std::string& path,
                    const PutOptions& options) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return StatusFromErrno(errno, store.url() + ": put '" + std::string(key) + "': open " + path);
  }
  std::string data;
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) data.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return StatusFromErrno(err, store.url() + ": put '" + std::string(key) + "': read " + path);
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return store.Put(key, data, options);
}

}  // namespace

Status ObjectStore::PutFile(std::string_view key, const std::string& path) {
  return PutWholeFile(*this, key, path, PutOptions{});
}

Status ObjectStore::PutFileIfAbsent(std::string_view key, const std::string& path) {
  PutOptions o;
  o.create_if_absent = true;
  return PutWholeFile(*this, key, path, o);
}

Status ObjectStore::GetToFile(std::string_view key, const std::string& path) {
  GANTRY_ASSIGN_OR_RETURN(std::string data, Get(key));
  // Write beside the destination and rename, so the file appears whole or not at all.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".gantry-part." + std::to_string(::getpid()) + "." +
                          std::to_string(counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return StatusFromErrno(errno, url() + ": get '" + std::string(key) + "': create " + tmp);
  }
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return StatusFromErrno(err, url() + ": get '" + std::string(key) + "': write " + path);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return StatusFromErrno(err, url() + ": get '" + std::string(key) + "': flush " + path);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return StatusFromErrno(err, url() + ": get '" + std::string(key) + "': rename to " + path);
  }
  return Status::Ok();
}

std::future<Status> ObjectStore::PutAsync(ThreadPool& pool, std::string key, std::string data) {
  return pool.Submit(
      [this, key = std::move(key), data = std::move(data)]() -> Status { return Put(key, data); });
}

std::future<Result<std::string>> ObjectStore::GetAsync(ThreadPool& pool, std::string key) {
  return pool.Submit([this, key = std::move(key)]() -> Result<std::string> { return Get(key); });
}

Result<uint64_t> ObjectStore::GetParts(std::string_view key, uint64_t offset,
                                       std::span<const std::span<char>> parts) {
  uint64_t total = 0;
  for (std::span<char> p : parts) total += p.size();
  GANTRY_ASSIGN_OR_RETURN(std::string bytes, GetRange(key, offset, total));
  uint64_t done = 0;
  for (std::span<char> p : parts) {
    const uint64_t n = std::min<uint64_t>(p.size(), bytes.size() - done);
    if (n > 0) std::memcpy(p.data(), bytes.data() + done, n);
    done += n;
  }
  return done;
}

Status ObjectStore::PutParts(std::string_view key, std::span<const std::string_view> parts,
                             const PutOptions& options) {
  std::string joined;
  size_t n = 0;
  for (std::string_view p : parts) n += p.size();
  joined.reserve(n);
  for (std::string_view p : parts) joined.append(p);
  return Put(key, joined, options);
}

Result<std::vector<ObjectInfo>> ObjectStore::ListAll(std::string_view prefix) {
  std::vector<ObjectInfo> all;
  std::string token;
  while (true) {
    GANTRY_ASSIGN_OR_RETURN(ListPage page, List(prefix, token, 1000));
    for (ObjectInfo& o : page.objects) all.push_back(std::move(o));
    if (page.next_token.empty()) break;
    if (page.next_token <= token) {
      return Internal(url() + ": list '" + std::string(prefix) +
                      "': page token did not advance ('" + page.next_token + "')");
    }
    token = std::move(page.next_token);
  }
  return all;
}

Result<std::unique_ptr<ObjectStore>> OpenObjectStore(const std::string& url,
                                                     const StoreOptions& options) {
  constexpr std::string_view kMem = "mem://";
  constexpr std::string_view kFile = "file://";
  constexpr std::string_view kS3 = "s3://";
  constexpr std::string_view kHttp = "http://";
  std::string_view u = url;
  if (u.starts_with(kHttp)) {  // a peer's gantry-agent, read-only
    HttpStoreOptions http;
    http.connect_timeout_ms = options.connect_timeout_ms;
    http.timeout_ms = options.request_timeout_ms;
    http.token = options.agent_token;
    return OpenHttpStore(url, http);
  }
  if (u.starts_with(kMem)) {
    std::string name(u.substr(kMem.size()));
    if (name.empty()) return InvalidArgument("store URL '" + url + "': mem:// needs a name");
    return OpenMemoryStore(name);
  }
  if (u.starts_with(kS3)) {
    std::string_view rest = u.substr(kS3.size());
    const size_t slash = rest.find('/');
    std::string bucket(rest.substr(0, slash));
    std::string prefix(slash == std::string_view::npos ? "" : rest.substr(slash + 1));
    if (bucket.empty()) return InvalidArgument("store URL '" + url + "': s3:// needs a bucket");
    return OpenS3Store(bucket, prefix, options);
  }
  std::string path;
  if (u.starts_with(kFile)) {
    path = std::string(u.substr(kFile.size()));
    // Only the empty (local) host is meaningful: file:///abs/dir.
    if (path.empty() || path.front() != '/') {
      return InvalidArgument("store URL '" + url +
                             "': file URLs must be absolute, like file:///data/tier");
    }
  } else if (u.find("://") != std::string_view::npos) {
    return InvalidArgument(
        "store URL '" + url +
        "': unknown scheme (expected mem://, file://, s3://, http:// or a path)");
  } else {
    path = url;
  }
  if (path.empty()) return InvalidArgument("store URL is empty");
  PosixStoreOptions posix;
  posix.create_root = options.create_root;
  GANTRY_ASSIGN_OR_RETURN(std::unique_ptr<PosixStore> store, OpenPosixStore(path, posix));
  return std::unique_ptr<ObjectStore>(std::move(store));
}

}  // namespace gantry
