// s3_bench: the Gantry side of bench/s3_vs_awscli.sh. Copies a directory of files to an object
// store and back through the ObjectStore API with many operations in flight, or one large file
// with PutFile/GetToFile (parallel multipart upload and ranged GETs), and prints what it moved
// and how long it took.
//
//   s3_bench put-dir  s3://bucket/prefix DIR  [--jobs N]   every file under DIR -> prefix/RELPATH
//   s3_bench get-dir  s3://bucket/prefix DIR  [--jobs N]   every object under prefix -> DIR/KEY
//   s3_bench put-file s3://bucket/prefix KEY FILE
//   s3_bench get-file s3://bucket/prefix KEY FILE
//
// Endpoint and credentials: --endpoint, else GANTRY_S3_ENDPOINT; the keys from
// GANTRY_S3_ACCESS_KEY / GANTRY_S3_SECRET_KEY, else the standard AWS variables and files.
// Exit status 0 on success, 1 if any transfer failed (each failure is printed).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gantry/common/status.h"
#include "gantry/common/thread_pool.h"
#include "gantry/storage/object_store.h"

namespace gantry {
namespace {

namespace fs = std::filesystem;

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

Result<std::string> ReadWhole(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return IoError("cannot open " + p.string());
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return IoError("cannot read " + p.string());
  return data;
}

Status WriteWhole(const fs::path& p, const std::string& data) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  f.close();
  if (!f) return IoError("cannot write " + p.string());
  return Status::Ok();
}

// Waits for every future, printing failures; returns how many failed.
int Collect(std::vector<std::future<Status>>& futures) {
  int failed = 0;
  for (auto& f : futures) {
    Status s = f.get();
    if (!s.ok()) {
      if (++failed <= 10) std::fprintf(stderr, "s3_bench: %s\n", s.ToString().c_str());
    }
  }
  return failed;
}

int PutDir(ObjectStore& store, const fs::path& dir, int jobs, uint64_t* bytes, size_t* count) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  ThreadPool pool(jobs);
  std::vector<std::future<Status>> futures;
  futures.reserve(files.size());
  for (const fs::path& p : files) {
    *bytes += fs::file_size(p);
    futures.push_back(pool.Submit([&store, &dir, p]() -> Status {
      GANTRY_ASSIGN_OR_RETURN(std::string data, ReadWhole(p));
      return store.Put(fs::relative(p, dir).generic_string(), data);
    }));
  }
  *count = files.size();
  return Collect(futures);
}

int GetDir(ObjectStore& store, const fs::path& dir, int jobs, uint64_t* bytes, size_t* count) {
  Result<std::vector<ObjectInfo>> objects = store.ListAll("");
  if (!objects.ok()) {
    std::fprintf(stderr, "s3_bench: %s\n", objects.status().ToString().c_str());
    return 1;
  }
  ThreadPool pool(jobs);
  std::vector<std::future<Status>> futures;
  futures.reserve(objects->size());
  for (const ObjectInfo& o : *objects) {
    *bytes += o.size;
    const fs::path dest = dir / o.key;
    fs::create_directories(dest.parent_path());
    futures.push_back(pool.Submit([&store, key = o.key, dest]() -> Status {
      GANTRY_ASSIGN_OR_RETURN(std::string data, store.Get(key));
      return WriteWhole(dest, data);
    }));
  }
  *count = objects->size();
  return Collect(futures);
}

int Main(int argc, char** argv) {
  CLI::App app("Gantry's side of the S3 benchmark against `aws s3 cp`.");
  app.require_subcommand(1);
  std::string url, dir, key, file;
  int jobs = 32;
  StoreOptions options;
  options.endpoint = EnvOr("GANTRY_S3_ENDPOINT", "");
  options.access_key = EnvOr("GANTRY_S3_ACCESS_KEY", "");
  options.secret_key = EnvOr("GANTRY_S3_SECRET_KEY", "");
  options.region = "us-east-1";
  app.add_option("--endpoint", options.endpoint, "S3 endpoint URL (default: $GANTRY_S3_ENDPOINT)");
  app.add_option("--parallelism", options.parallelism, "Parts or ranges in flight per large object")
      ->capture_default_str();
  app.add_option("--part-size", options.part_size, "Multipart part size in bytes")
      ->capture_default_str();
  app.add_option("--multipart-threshold", options.multipart_threshold,
                 "Objects at least this big use multipart")
      ->capture_default_str();

  CLI::App* put_dir = app.add_subcommand("put-dir", "Upload every file under DIR");
  CLI::App* get_dir = app.add_subcommand("get-dir", "Download every object under the prefix");
  for (CLI::App* c : {put_dir, get_dir}) {
    c->add_option("url", url, "s3://bucket/prefix")->required();
    c->add_option("dir", dir, "Local directory")->required();
    c->add_option("--jobs", jobs, "Objects in flight")->capture_default_str();
  }
  CLI::App* put_file = app.add_subcommand("put-file", "Upload FILE as KEY");
  CLI::App* get_file = app.add_subcommand("get-file", "Download KEY to FILE");
  for (CLI::App* c : {put_file, get_file}) {
    c->add_option("url", url, "s3://bucket/prefix")->required();
    c->add_option("key", key, "Object key")->required();
    c->add_option("file", file, "Local file")->required();
  }
  CLI11_PARSE(app, argc, argv);

  Result<std::unique_ptr<ObjectStore>> opened = OpenObjectStore(url, options);
  if (!opened.ok()) {
    std::fprintf(stderr, "s3_bench: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  ObjectStore& store = **opened;

  const auto start = std::chrono::steady_clock::now();
  uint64_t bytes = 0;
  size_t count = 1;
  int failed = 0;
  std::string what;
  if (put_dir->parsed()) {
    what = "put-dir";
    failed = PutDir(store, dir, jobs, &bytes, &count);
  } else if (get_dir->parsed()) {
    what = "get-dir";
    fs::create_directories(dir);
    failed = GetDir(store, dir, jobs, &bytes, &count);
  } else {
    what = put_file->parsed() ? "put-file" : "get-file";
    Status s = put_file->parsed() ? store.PutFile(key, file) : store.GetToFile(key, file);
    if (!s.ok()) {
      std::fprintf(stderr, "s3_bench: %s\n", s.ToString().c_str());
      failed = 1;
    } else {
      std::error_code ec;
      bytes = fs::file_size(file, ec);
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %zu objects, %llu bytes, %.3f s, %.1f MiB/s%s\n", what.c_str(), count,
              static_cast<unsigned long long>(bytes), secs, bytes / 1048576.0 / secs,
              failed ? ", FAILED" : "");
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace gantry

int main(int argc, char** argv) { return gantry::Main(argc, argv); }
