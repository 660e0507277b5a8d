// PosixStore: an ObjectStore over a local directory (a node-local NVMe tier or a shared file
// system mount).
//
// Key "a/b/c" is the file <root>/a/b/c. Puts write a temporary file under <root>/.gantry-tmp/,
// fsync it, rename(2) it over the final name (link(2) for create-if-absent) and fsync the
// directory, so a crash at any instant leaves the old object or the whole new one; a killed
// writer can leave only a temp file, which CleanupTemp() removes. Deleting the last object in a
// directory removes the empty directories up to the root. The top-level names ".gantry-tmp"
// and ".gantry-lock" are reserved (ValidateKey). A key cannot be both an object and a
// "directory" of other keys ("a" and "a/b").
//
// No operation leaves the root: keys are resolved beneath it without following any symbolic
// link (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or O_NOFOLLOW per component on kernels
// without openat2). A link planted inside the root is not an object: Get, Head and GetRange
// answer NotFound, List skips it, Delete leaves it, and a put whose parent is a link fails with
// FailedPrecondition. The root itself may be reached through links: they are resolved once, by
// OpenPosixStore, and root() is the resolved path.
//
// Thread-safe and multi-process safe: every operation works on the file system alone (no
// in-process state besides options), so several processes may share one root.
//
//   GANTRY_ASSIGN_OR_RETURN(auto store, OpenPosixStore("/nvme/tier", {}));
//   GANTRY_RETURN_IF_ERROR(store->PutFile("ckpt/step-9/shard-0", "/tmp/shard-0"));
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "gantry/storage/object_store.h"

namespace gantry {

struct PosixStoreOptions {
  // Write (and read, for ReadInto/GetToFile/PutFile) with O_DIRECT through aligned buffers,
  // bypassing the page cache. Falls back to buffered I/O where the file system refuses
  // O_DIRECT (tmpfs answers EINVAL). Default: false (buffered).
  bool direct_io = false;
  // fsync files and directories on put. Turning this off gives up crash safety, not atomicity.
  // Default: true.
  bool sync = true;
  // Threads copying one large object (PutFile/GetToFile, and Put/ReadInto of big buffers).
  // Default: 2.
  int parallelism = 2;
  // Objects at least this big are copied by `parallelism` threads. Default: 256 MiB.
  uint64_t parallel_threshold = 256ull << 20;
  // Size of each write/read call. Default: 8 MiB.
  uint64_t io_size = 8ull << 20;
  // Create the root directory (mkdir -p) and its temp directory on open. False: the root must
  // exist (NotFound naming it otherwise) and open writes nothing. Default: true.
  bool create_root = true;
};

class PosixStore : public ObjectStore {
 public:
  std::string_view backend() const override { return "posix"; }
  std::string url() const override { return "file://" + root_; }
  bool SupportsCreateIfAbsent() const override { return true; }
  const std::string& root() const { return root_; }
  const PosixStoreOptions& options() const { return options_; }

  Status Put(std::string_view key, std::string_view data, const PutOptions& options) override;
  using ObjectStore::Put;
  Status PutParts(std::string_view key, std::span<const std::string_view> parts,
                  const PutOptions& options) override;
  Result<std::string> Get(std::string_view key) override;
  Result<uint64_t> GetParts(std::string_view key, uint64_t offset,
                            std::span<const std::span<char>> parts) override;
  Result<std::string> GetRange(std::string_view key, uint64_t offset, uint64_t length) override;
  Result<ObjectInfo> Head(std::string_view key) override;
  Result<ListPage> List(std::string_view prefix, std::string_view page_token,
                        int max_keys) override;
  Status Delete(std::string_view key) override;
  Status PutFile(std::string_view key, const std::string& path) override;
  Status PutFileIfAbsent(std::string_view key, const std::string& path) override;
  Status GetToFile(std::string_view key, const std::string& path) override;

  // Reads bytes [offset, offset + buf_len) of the object into buf (clipped at the end of the
  // object) and returns how many were read. Lets hot paths reuse one pre-touched buffer instead
  // of allocating a fresh string per object.
  Result<uint64_t> ReadInto(std::string_view key, uint64_t offset, char* buf, uint64_t buf_len);

  // Removes temp files older than max_age_seconds (left by writers that crashed or were
  // killed mid-put) and returns how many it removed. Safe to run while other processes put:
  // a live put's temp file is younger than any sensible max_age.
  Result<int> CleanupTemp(int64_t max_age_seconds);

  // Removes the temp directory if it is empty, so that a folder written once and then handed
  // on (a packed dataset, read by tools that list every entry) holds only its objects. True if
  // it was removed or was not there; false, changing nothing, while another writer's temp file
  // is in it. A later put creates it again, and a put racing this one retries (PutTxn::Begin).
  Result<bool> RemoveTempDirIfEmpty();

  // Where temp files live (for tests and operators).
  std::string temp_dir() const { return root_ + "/.gantry-tmp"; }

 private:
  friend Result<std::unique_ptr<PosixStore>> OpenPosixStore(const std::string&,
                                                            const PosixStoreOptions&);
  PosixStore(std::string root, PosixStoreOptions options)
      : root_(std::move(root)), options_(options) {}
  Status CopyFileIn(std::string_view key, const std::string& path, bool create_if_absent);

  const std::string root_;  // absolute, no trailing '/'
  const PosixStoreOptions options_;
};

// Opens the directory `root`, creating it unless options.create_root is false; relative paths
// are made absolute and links in the path resolved.
Result<std::unique_ptr<PosixStore>> OpenPosixStore(const std::string& root,
                                                   const PosixStoreOptions& options);

// Opens `rel` (a valid key, or a run of its leading segments) beneath the directory `dirfd`
// without following any symbolic link: openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or one
// openat(O_NOFOLLOW) per component where the kernel lacks openat2. The posix store's
// resolution, shared with the peer agent. Returns a close-on-exec descriptor, or -1 with errno
// set (ELOOP or EXDEV when a link is in the way).
int OpenBeneath(int dirfd, std::string_view rel, int flags, mode_t mode = 0);

// Tests only: false makes every posix store resolve keys with the per-component fallback, as on
// kernels without openat2 (process-wide).
void SetPosixStoreOpenat2ForTesting(bool enabled);

}  // namespace gantry
