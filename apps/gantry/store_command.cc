// `gantry store`: put, get, list, stat and remove objects in any backend by URL — the same
// ObjectStore interface every Gantry tier uses, so operators can inspect a tier by hand.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "gantry/common/progress.h"
#include "gantry/common/units.h"
#include "gantry/storage/object_store.h"

namespace gantry::cli {
namespace {

// Bytes a streamed get asks for at a time (and so holds in memory at once).
constexpr uint64_t kStreamWindow = 8ull << 20;

struct StoreArgs {
  std::string store;  // URL of the store root
  StoreOptions options;
  bool virtual_host = false;
  bool json = false;
  bool bytes = false;
  bool quiet = false;
  std::string key;
  std::string file;
  std::vector<std::string> keys;
  std::string prefix;
  bool create_if_absent = false;
};

int Fail(const std::string& what, const Status& s) { return ReportFailure("store " + what, s); }

// `writes`: a put may create a file:// root (a tier on a fresh node); every other command
// opens an existing one only, so a mistyped path is an error instead of a new empty directory.
Result<std::unique_ptr<ObjectStore>> Open(StoreArgs& a, bool writes) {
  if (a.store.empty()) {
    const char* env = std::getenv("GANTRY_STORE");
    if (env != nullptr) a.store = env;
  }
  if (a.store.empty()) {
    return InvalidArgument(
        "no store: pass --store URL (s3://bucket/prefix, file:///dir, mem://name, "
        "http://agent:port) or set GANTRY_STORE");
  }
  a.options.path_style = !a.virtual_host;
  a.options.create_root = writes;
  return OpenObjectStore(a.store, a.options);
}

// A temp file in $TMPDIR, removed when this goes away.
class SpoolFile {
 public:
  ~SpoolFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  Status Create() {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/gantry-put-XXXXXX";
    fd_ = ::mkstemp(path_.data());
    if (fd_ < 0) {
      const std::string err = std::strerror(errno);
      const std::string where = path_;
      path_.clear();
      return IoError("cannot create a temp file " + where + " for stdin: " + err);
    }
    return Status::Ok();
  }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// Copies stdin into `spool` a window at a time: a pipe has no size to plan a multipart upload
// by, so it is staged on disk and uploaded through PutFile, with memory bounded by the window.
Status SpoolStdin(SpoolFile& spool) {
  GANTRY_RETURN_IF_ERROR(spool.Create());
  std::string buf(1 << 20, '\0');
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, buf.data(), buf.size());
    if (n == 0) return Status::Ok();
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError(std::string("reading stdin: ") + std::strerror(errno));
    }
    for (ssize_t off = 0; off < n;) {
      const ssize_t w = ::write(spool.fd(), buf.data() + off, static_cast<size_t>(n - off));
      if (w < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        const std::string what = "writing " + spool.path() + ": " + std::strerror(err);
        return err == ENOSPC || err == EDQUOT ? ResourceExhausted(what) : IoError(what);
      }
      off += w;
    }
  }
}

int Put(StoreArgs& a) {
  auto store = Open(a, /*writes=*/true);
  if (!store.ok()) return Fail("put", store.status());
  const bool from_stdin = a.file.empty() || a.file == "-";
  // The backend's file path: multipart and parallel for S3, copy_file_range for posix; a
  // create-only put streams the same way into a temp file that is linked into place (posix),
  // or is one conditional PUT (S3).
  std::string path = a.file;
  SpoolFile spool;
  if (from_stdin) {
    if (Status s = SpoolStdin(spool); !s.ok()) return Fail("put", s);
    path = spool.path();
  }
  Status s =
      a.create_if_absent ? (*store)->PutFileIfAbsent(a.key, path) : (*store)->PutFile(a.key, path);
  return s.ok() ? kExitOk : Fail("put", s);
}

Status WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t w = ::write(fd, data.data(), data.size());
    if (w < 0) {
      if (errno == EINTR) continue;
      return IoError(std::string("writing stdout: ") + std::strerror(errno));
    }
    data.remove_prefix(static_cast<size_t>(w));
  }
  return Status::Ok();
}

// Streams the object to stdout a window at a time. An object replaced meanwhile would mix two
// versions, so its size, time and etag are checked again at the end.
Status StreamToStdout(ObjectStore& store, const std::string& key,
                      const std::function<void(uint64_t, uint64_t)>& progress) {
  GANTRY_ASSIGN_OR_RETURN(ObjectInfo before, store.Head(key));
  for (uint64_t offset = 0; offset < before.size; offset += kStreamWindow) {
    const uint64_t want = std::min(kStreamWindow, before.size - offset);
    GANTRY_ASSIGN_OR_RETURN(std::string window, store.GetRange(key, offset, want));
    if (window.size() != want) {
      return Aborted(store.url() + ": get '" + key + "': the object changed while it was read");
    }
    GANTRY_RETURN_IF_ERROR(WriteAll(STDOUT_FILENO, window));
    if (progress) progress(offset + want, before.size);
  }
  GANTRY_ASSIGN_OR_RETURN(ObjectInfo after, store.Head(key));
  if (after.size != before.size || after.etag != before.etag ||
      after.mtime_unix != before.mtime_unix) {
    return Aborted(store.url() + ": get '" + key +
                   "': the object changed while it was read (the output mixes two versions)");
  }
  return Status::Ok();
}

int Get(StoreArgs& a) {
  auto store = Open(a, /*writes=*/false);
  if (!store.ok()) return Fail("get", store.status());
  if (a.file.empty() || a.file == "-") {
    std::fflush(stdout);
    Status s = StreamToStdout(**store, a.key, a.options.progress);
    return s.ok() ? kExitOk : Fail("get", s);
  }
  Status s = (*store)->GetToFile(a.key, a.file);
  return s.ok() ? kExitOk : Fail("get", s);
}

nlohmann::ordered_json InfoJson(const ObjectInfo& o) {
  return {{"key", o.key}, {"size", o.size}, {"mtime_unix", o.mtime_unix}, {"etag", o.etag}};
}

std::string Size(uint64_t bytes, bool raw) {
  return raw ? std::to_string(bytes) : FormatBytes(bytes);
}

int List(StoreArgs& a) {
  auto store = Open(a, /*writes=*/false);
  if (!store.ok()) return Fail("ls", store.status());
  auto all = (*store)->ListAll(a.prefix);
  if (!all.ok()) return Fail("ls", all.status());
  if (a.json) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& o : *all) out.push_back(InfoJson(o));
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  uint64_t total = 0;
  for (const auto& o : *all) {
    std::printf("%14s  %s\n", Size(o.size, a.bytes).c_str(), o.key.c_str());
    total += o.size;
  }
  if (!a.quiet) {
    std::fprintf(stderr, "%zu objects, %s\n", all->size(),
                 a.bytes ? (std::to_string(total) + " bytes").c_str() : FormatBytes(total).c_str());
  }
  return kExitOk;
}

int Stat(StoreArgs& a) {
  auto store = Open(a, /*writes=*/false);
  if (!store.ok()) return Fail("stat", store.status());
  auto info = (*store)->Head(a.key);
  if (!info.ok()) return Fail("stat", info.status());
  if (a.json) {
    std::cout << InfoJson(*info).dump(2) << "\n";
  } else {
    std::printf("key:    %s\nsize:   %s (%llu bytes)\nmtime:  %lld\netag:   %s\nstore:  %s\n",
                info->key.c_str(), FormatBytes(info->size).c_str(),
                static_cast<unsigned long long>(info->size),
                static_cast<long long>(info->mtime_unix), info->etag.c_str(),
                (*store)->url().c_str());
  }
  return kExitOk;
}

int Remove(StoreArgs& a) {
  auto store = Open(a, /*writes=*/false);
  if (!store.ok()) return Fail("rm", store.status());
  for (const std::string& k : a.keys) {
    Status s = (*store)->Delete(k);
    if (!s.ok()) return Fail("rm", s);
  }
  return kExitOk;
}

void AddCommon(CLI::App* cmd, StoreArgs& a) {
  cmd->add_option("--store", a.store,
                  "Store URL: s3://bucket[/prefix], file:///dir (or a path), mem://name, or a peer "
                  "gantry-agent http://host:port (read-only). "
                  "Default: $GANTRY_STORE");
  cmd->add_option("--endpoint", a.options.endpoint,
                  "S3 endpoint, e.g. http://127.0.0.1:7480 (default: $AWS_ENDPOINT_URL or AWS)");
  cmd->add_option("--region", a.options.region, "S3 region (default: $AWS_REGION, ~/.aws/config)");
  cmd->add_option("--access-key", a.options.access_key,
                  "S3 access key (default: $AWS_ACCESS_KEY_ID, ~/.aws/credentials)");
  cmd->add_option("--secret-key", a.options.secret_key,
                  "S3 secret key (default: $AWS_SECRET_ACCESS_KEY)");
  cmd->add_option("--profile", a.options.profile, "AWS profile (default: $AWS_PROFILE)");
  cmd->add_flag("--virtual-host", a.virtual_host, "Virtual-host addressing (default: path-style)");
  cmd->add_option("--parallelism", a.options.parallelism, "Parts or ranges in flight")
      ->capture_default_str();
  AddSizeOption(cmd, "--part-size", &a.options.part_size, "Multipart part size");
}

template <typename F>
void Run(CLI::App* cmd, F f) {
  cmd->callback([f] { ExitWith(f()); });
}

}  // namespace

void RegisterStoreCommands(CLI::App& app) {
  auto a = std::make_shared<StoreArgs>();
  auto progress = std::make_shared<std::unique_ptr<ProgressBar>>();
  CLI::App* store =
      app.add_subcommand("store", "Put, get, list, stat and remove objects in a store.");
  store->require_subcommand(1);
  store->fallthrough();
  store->footer(
      "Examples:\n"
      "  gantry store --store s3://bkt/data --endpoint http://127.0.0.1:7480 put shard-0 "
      "./shard-0\n"
      "  gantry store --store file:///nvme/tier ls ckpt/ --json\n"
      "Only put creates a missing file:// root; the other commands fail on one (exit 3).\n"
      "Exit codes: 0 ok, 1 failure, 2 usage, 3 bad input, missing object or root, or refused\n"
      "(docs/storage.md, Exit codes).");
  AddCommon(store, *a);
  auto with_progress = [a, progress](const char* label) {
    *progress =
        std::make_unique<ProgressBar>(label, ProgressBar::StderrIsTerminal(), ProgressBar::kBytes);
    a->options.progress = (*progress)->Callback();
  };

  CLI::App* put = store->add_subcommand("put", "Upload FILE (or stdin) as KEY; atomic.");
  put->add_option("key", a->key, "Object key")->required();
  put->add_option("file", a->file, "Local file ('-' or absent: stdin)");
  put->add_flag("--if-absent", a->create_if_absent,
                "Fail if KEY exists, atomically (streamed like a plain put on file:// stores; one "
                "conditional PUT, the object in memory, on S3)");
  put->footer(
      "stdin is staged in $TMPDIR a megabyte at a time and uploaded like a file (multipart on\n"
      "S3), so memory stays small whatever the size.\n"
      "Examples:\n"
      "  gantry store --store s3://bkt/data put shard-0 ./shard-0\n"
      "  tar c ./run | gantry store --store file:///shared/archive put run.tar -\n"
      "  gantry store --store /nvme/tier put --if-absent lock/owner ./me.json");
  put->callback([a, with_progress] {
    with_progress("put");
    ExitWith(Put(*a));
  });

  CLI::App* get = store->add_subcommand("get", "Download KEY to FILE (or stdout).");
  get->add_option("key", a->key, "Object key")->required();
  get->add_option("file", a->file, "Local file ('-' or absent: stdout)");
  get->footer(
      "To stdout the object streams in 8 MiB ranges (memory stays small); if it changes while\n"
      "it is read, the command fails (exit 1).\n"
      "Examples:\n"
      "  gantry store --store s3://bkt/data get shard-0 ./shard-0\n"
      "  gantry store --store file:///shared/archive get run.tar - | tar x");
  get->callback([a, with_progress] {
    with_progress("get");
    ExitWith(Get(*a));
  });

  CLI::App* ls = store->add_subcommand("ls", "List objects under PREFIX (size and key).");
  ls->add_option("prefix", a->prefix, "Key prefix");
  ls->add_flag("--json", a->json, "JSON array of {key,size,mtime_unix,etag} (sizes in bytes)");
  ls->add_flag("--bytes", a->bytes, "Sizes in bytes instead of KiB, MiB, ...");
  ls->add_flag("-q,--quiet", a->quiet, "No totals line on stderr");
  ls->footer(
      "Examples:\n"
      "  gantry store --store file:///nvme/tier ls chunks/\n"
      "  gantry store --store s3://bkt/ckpt ls ckpt/llama/ --bytes -q | sort -n");
  Run(ls, [a] { return List(*a); });

  CLI::App* stat = store->add_subcommand("stat", "Show an object's size, time and etag.");
  stat->add_option("key", a->key, "Object key")->required();
  stat->add_flag("--json", a->json, "JSON output");
  stat->footer("Example:\n  gantry store --store s3://bkt/ckpt stat ckpt/llama/latest --json");
  Run(stat, [a] { return Stat(*a); });

  CLI::App* rm = store->add_subcommand("rm", "Delete objects (a missing key is not an error).");
  rm->add_option("keys", a->keys, "Object keys")->required();
  rm->footer("Example:\n  gantry store --store file:///nvme/tier rm scratch/a scratch/b");
  Run(rm, [a] { return Remove(*a); });
}

}  // namespace gantry::cli
