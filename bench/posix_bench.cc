// Gantry's side of bench/posix_vs_fio.sh: one sequential write (Put) or read (ReadInto, Get) of a
// large object through PosixStore, timed from the call to its return, printing MiB/s.
//
// The object's bytes live in one buffer that is allocated and touched before timing starts
// (first-touch page faults are slow on these machines and fio reuses its buffer too). The
// allocating Get() is timed separately with --mode=get: its first touch IS included.
//
//   posix_bench --dir /nvme/bench --size-mib 2048 --mode write [--direct] [--parallelism 2]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gantry/storage/posix_store.h"

namespace {

[[noreturn]] void Usage() {
  std::fprintf(stderr,
               "usage: posix_bench --dir DIR --size-mib N --mode write|read|get|putfile "
               "[--src FILE] [--direct] [--parallelism N] [--io-mib N]\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  std::string mode;
  std::string src;
  uint64_t size_mib = 0;
  gantry::PosixStoreOptions opts;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Usage();
      return argv[++i];
    };
    if (a == "--dir") {
      dir = next();
    } else if (a == "--size-mib") {
      size_mib = std::stoull(next());
    } else if (a == "--mode") {
      mode = next();
    } else if (a == "--src") {
      src = next();
    } else if (a == "--direct") {
      opts.direct_io = true;
    } else if (a == "--parallelism") {
      opts.parallelism = std::stoi(next());
    } else if (a == "--io-mib") {
      opts.io_size = std::stoull(next()) << 20;
    } else {
      Usage();
    }
  }
  if (dir.empty() || size_mib == 0 || mode.empty()) Usage();
  auto store = gantry::OpenPosixStore(dir, opts);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  const uint64_t size = size_mib << 20;
  char* buf = nullptr;
  if (mode == "write" || mode == "read") {
    void* p = nullptr;
    if (::posix_memalign(&p, 4096, size) != 0) return 1;
    buf = static_cast<char*>(p);
    // Touch every page (and give the write a non-zero, non-repeating-page pattern).
    for (uint64_t i = 0; i < size; i += 4096) std::memset(buf + i, static_cast<int>(i >> 12), 4096);
  }
  const auto t0 = std::chrono::steady_clock::now();
  gantry::Status status;
  uint64_t bytes = size;
  if (mode == "write") {
    status = (*store)->Put("bench/object", std::string_view(buf, size));
  } else if (mode == "read") {
    auto n = (*store)->ReadInto("bench/object", 0, buf, size);
    status = n.status();
    if (n.ok()) bytes = *n;
  } else if (mode == "get") {
    auto got = (*store)->Get("bench/object");
    status = got.status();
    if (got.ok()) bytes = got->size();
  } else if (mode == "putfile") {
    if (src.empty()) Usage();
    status = (*store)->PutFile("bench/object", src);
  } else {
    Usage();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  if (bytes != size) {
    std::fprintf(stderr, "read %llu bytes, expected %llu\n", static_cast<unsigned long long>(bytes),
                 static_cast<unsigned long long>(size));
    return 1;
  }
  std::printf("%.1f\n", static_cast<double>(bytes) / (1 << 20) / secs);
  std::free(buf);
  return 0;
}
