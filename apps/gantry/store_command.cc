// `gantry store`: put, get, list, stat and remove objects in any backend by URL — the same
// ObjectStore interface every Gantry tier uses, so operators can inspect a tier by hand.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "gantry/storage/object_store.h"

namespace gantry::cli {
namespace {

struct StoreArgs {
  std::string store;  // URL of the store root
  StoreOptions options;
  bool virtual_host = false;
  bool json = false;
  bool quiet = false;
  std::string key;
  std::string file;
  std::vector<std::string> keys;
  std::string prefix;
  bool create_if_absent = false;
};

int Fail(const std::string& what, const Status& s) { return ReportFailure("store " + what, s); }

// A transfer progress line on stderr, only on a terminal; safe to call from many threads.
class TransferProgress {
 public:
  explicit TransferProgress(bool enabled) : enabled_(enabled) {}
  ~TransferProgress() {
    if (drawn_) std::fputs("\r\033[K", stderr);
  }
  std::function<void(uint64_t, uint64_t)> Callback() {
    if (!enabled_) return {};
    return [this](uint64_t done, uint64_t total) {
      std::lock_guard<std::mutex> lock(mu_);
      const int pct = total ? static_cast<int>(done * 100 / total) : 100;
      if (pct == last_) return;
      last_ = pct;
      drawn_ = true;
      std::fprintf(stderr, "\r%6.1f / %.1f MiB  %3d%%", done / 1048576.0, total / 1048576.0, pct);
      std::fflush(stderr);
    };
  }

 private:
  bool enabled_;
  std::mutex mu_;
  bool drawn_ = false;
  int last_ = -1;
};

Result<std::unique_ptr<ObjectStore>> Open(StoreArgs& a) {
  if (a.store.empty()) {
    const char* env = std::getenv("GANTRY_STORE");
    if (env != nullptr) a.store = env;
  }
  if (a.store.empty()) {
    return InvalidArgument(
        "no store: pass --store URL (s3://bucket/prefix, file:///dir, mem://name, "
        "http://agent:port) "
        "or set GANTRY_STORE");
  }
  a.options.path_style = !a.virtual_host;
  return OpenObjectStore(a.store, a.options);
}

int Put(StoreArgs& a) {
  auto store = Open(a);
  if (!store.ok()) return Fail("put", store.status());
  const bool from_stdin = a.file.empty() || a.file == "-";
  if (!from_stdin && !a.create_if_absent) {
    // The backend's file path: multipart and parallel for S3, copy_file_range for posix.
    Status s = (*store)->PutFile(a.key, a.file);
    return s.ok() ? kExitOk : Fail("put", s);
  }
  std::string data;
  if (from_stdin) {
    data.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream in(a.file, std::ios::binary);
    if (!in) return Fail("put", NotFound("cannot read '" + a.file + "'"));
    data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  PutOptions po;
  po.create_if_absent = a.create_if_absent;
  Status s = (*store)->Put(a.key, data, po);
  return s.ok() ? kExitOk : Fail("put", s);
}

int Get(StoreArgs& a) {
  auto store = Open(a);
  if (!store.ok()) return Fail("get", store.status());
  if (a.file.empty() || a.file == "-") {
    auto data = (*store)->Get(a.key);
    if (!data.ok()) return Fail("get", data.status());
    std::cout.write(data->data(), static_cast<std::streamsize>(data->size()));
    return std::cout.good() ? kExitOk : kExitFailure;
  }
  Status s = (*store)->GetToFile(a.key, a.file);
  return s.ok() ? kExitOk : Fail("get", s);
}

nlohmann::ordered_json InfoJson(const ObjectInfo& o) {
  return {{"key", o.key}, {"size", o.size}, {"mtime_unix", o.mtime_unix}, {"etag", o.etag}};
}

int List(StoreArgs& a) {
  auto store = Open(a);
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
    std::printf("%14llu  %s\n", static_cast<unsigned long long>(o.size), o.key.c_str());
    total += o.size;
  }
  if (!a.quiet) {
    std::fprintf(stderr, "%zu objects, %llu bytes\n", all->size(),
                 static_cast<unsigned long long>(total));
  }
  return kExitOk;
}

int Stat(StoreArgs& a) {
  auto store = Open(a);
  if (!store.ok()) return Fail("stat", store.status());
  auto info = (*store)->Head(a.key);
  if (!info.ok()) return Fail("stat", info.status());
  if (a.json) {
    std::cout << InfoJson(*info).dump(2) << "\n";
  } else {
    std::printf("key:    %s\nsize:   %llu\nmtime:  %lld\netag:   %s\nstore:  %s\n",
                info->key.c_str(), static_cast<unsigned long long>(info->size),
                static_cast<long long>(info->mtime_unix), info->etag.c_str(),
                (*store)->url().c_str());
  }
  return kExitOk;
}

int Remove(StoreArgs& a) {
  auto store = Open(a);
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
  cmd->add_option("--part-size", a.options.part_size, "Multipart part size in bytes")
      ->capture_default_str();
}

}  // namespace

void RegisterStoreCommands(CLI::App& app) {
  auto a = std::make_shared<StoreArgs>();
  auto progress = std::make_shared<std::unique_ptr<TransferProgress>>();
  CLI::App* store =
      app.add_subcommand("store", "Put, get, list, stat and remove objects in a store.");
  store->require_subcommand(1);
  store->footer(
      "Examples:\n"
      "  gantry store --store s3://bkt/data --endpoint http://127.0.0.1:7480 put shard-0 "
      "./shard-0\n"
      "  gantry store --store file:///nvme/tier ls ckpt/ --json\n"
      "Exit codes: 0 ok, 2 usage, 3 bad input or missing object, 1 other failure.");
  AddCommon(store, *a);
  auto with_progress = [a, progress]() {
    *progress = std::make_unique<TransferProgress>(isatty(STDERR_FILENO) != 0);
    a->options.progress = (*progress)->Callback();
  };

  CLI::App* put = store->add_subcommand("put", "Upload FILE (or stdin) as KEY; atomic.");
  put->add_option("key", a->key, "Object key")->required();
  put->add_option("file", a->file, "Local file ('-' or absent: stdin)");
  put->add_flag("--if-absent", a->create_if_absent, "Fail if KEY exists (atomic where supported)");
  put->callback([a, with_progress] {
    with_progress();
    if (int rc = Put(*a); rc != 0) throw CLI::RuntimeError(rc);
  });

  CLI::App* get = store->add_subcommand("get", "Download KEY to FILE (or stdout).");
  get->add_option("key", a->key, "Object key")->required();
  get->add_option("file", a->file, "Local file ('-' or absent: stdout)");
  get->callback([a, with_progress] {
    with_progress();
    if (int rc = Get(*a); rc != 0) throw CLI::RuntimeError(rc);
  });

  CLI::App* ls = store->add_subcommand("ls", "List objects under PREFIX (size and key).");
  ls->add_option("prefix", a->prefix, "Key prefix");
  ls->add_flag("--json", a->json, "JSON array of {key,size,mtime_unix,etag}");
  ls->add_flag("-q,--quiet", a->quiet, "No totals line on stderr");
  ls->callback([a] {
    if (int rc = List(*a); rc != 0) throw CLI::RuntimeError(rc);
  });

  CLI::App* stat = store->add_subcommand("stat", "Show an object's size, time and etag.");
  stat->add_option("key", a->key, "Object key")->required();
  stat->add_flag("--json", a->json, "JSON output");
  stat->callback([a] {
    if (int rc = Stat(*a); rc != 0) throw CLI::RuntimeError(rc);
  });

  CLI::App* rm = store->add_subcommand("rm", "Delete objects (a missing key is not an error).");
  rm->add_option("keys", a->keys, "Object keys")->required();
  rm->callback([a] {
    if (int rc = Remove(*a); rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace gantry::cli
