// Gathering shuffled 4 KiB samples out of mapped shards, what the reader's thread does for a
// packed batch, against the plain sequential read() of the same files that bench/data_loader.py
// calls "raw". 128 MiB of files in the page cache (8 files of 16 MiB in a temporary folder),
// shuffled within windows of 32 MiB as bench/data_loader.py's small set is (8,000 samples of
// 4 KiB). Each benchmark runs on two sets of the same bytes that differ only in how they came
// into the page cache, which decides the size of its pages there (folios): /0 written with one
// write() per file (large folios), /1 written, evicted (fsync, POSIX_FADV_DONTNEED) and read back
// with read() (the folios the kernel's read-ahead makes: a dataset read from disk).
//
//   BM_ReadSequential        read() of each file, 4 MiB at a time into one buffer ("raw")
//   BM_GatherFreshMappings   every iteration maps the files as the loader does
//                            (ShardBytes::MapFile, MAP_POPULATE), copies every 4 KiB piece in the
//                            shuffled order into a 256 KiB block (64 at a time) and drops the
//                            mappings: each page's first touch since it was mapped, as in an epoch
//   BM_GatherTouchedMappings the same copies from mappings made and touched once, before timing
//   BM_PreadThenGather       pread() of each file into a buffer of its own, then the same copies
//                            from those buffers: reading shards into reused memory instead of
//                            mapping them, both steps on the timed thread (the buffers are
//                            allocated and filled once before timing: memory's first touch costs
//                            as a mapping's does)
//
//   BM_WhollyInPageCache     whether one file is wholly in the page cache: /x/0 by mincore over a
//                            fresh mapping, /x/1 by cachestat (Linux 6.5)
//
// items_per_second counts 4 KiB pieces. The gap between the fresh and the touched gathers is the
// cost of a page's first touch after mapping, which MAP_POPULATE does not remove on every
// machine (docs/performance.md, "the first touch of a mapped page").
//
//   build/default/bench/gantry_benchmarks --benchmark_filter='BM_ReadSequential|BM_Gather'
//   build/default/bench/gantry_benchmarks --benchmark_filter=BM_WhollyInPageCache
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gantry/data/shard_bytes.h"

namespace gantry::data {
namespace {

constexpr size_t kFiles = 8;
constexpr size_t kFileBytes = size_t{16} << 20;
constexpr size_t kPiece = 4096;
constexpr size_t kBatch = 64;
constexpr size_t kWindow = 8192;  // pieces: 32 MiB

// A set of the files, written once per process, and removed at exit.
struct Files {
  std::string dir;
  std::vector<std::string> paths;
  // (file, offset) of every piece, shuffled within each window with a fixed seed.
  std::vector<std::pair<uint32_t, uint64_t>> order;

  explicit Files(bool read_back) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/gantry-gather-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    dir = pattern;
    std::vector<char> bytes(kFileBytes);
    std::mt19937_64 rng(7);
    for (auto& b : bytes) b = static_cast<char>(rng());
    for (size_t f = 0; f < kFiles; ++f) {
      paths.push_back(dir + "/shard." + std::to_string(f));
      const int fd = open(paths.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd < 0 || write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
        std::abort();
      }
      if (read_back) {
        if (fsync(fd) != 0 || posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) std::abort();
        const int in = open(paths.back().c_str(), O_RDONLY);
        std::vector<char> buf(size_t{4} << 20);
        while (read(in, buf.data(), buf.size()) > 0) {
        }
        close(in);
      }
      close(fd);
      for (uint64_t o = 0; o < kFileBytes; o += kPiece) order.emplace_back(f, o);
    }
    for (size_t w = 0; w < order.size(); w += kWindow) {
      std::shuffle(order.begin() + w, order.begin() + std::min(order.size(), w + kWindow), rng);
    }
  }
  ~Files() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
};

const Files& TheFiles(const benchmark::State& state) {
  static const Files written(false), read_back(true);
  return state.range(0) == 0 ? written : read_back;
}

std::vector<std::shared_ptr<ShardBytes>> MapAll(const Files& files) {
  std::vector<std::shared_ptr<ShardBytes>> maps;
  for (const std::string& p : files.paths) {
    auto m = ShardBytes::MapFile(p, MapOptions{});
    if (!m.ok()) std::abort();
    maps.push_back(std::move(*m));
  }
  return maps;
}

void Gather(const Files& files, const std::vector<std::shared_ptr<ShardBytes>>& maps,
            std::vector<char>& block) {
  for (size_t i = 0; i < files.order.size(); i += kBatch) {
    const size_t n = std::min(kBatch, files.order.size() - i);
    for (size_t j = 0; j < n; ++j) {
      const auto& [f, offset] = files.order[i + j];
      std::memcpy(block.data() + j * kPiece, maps[f]->data() + offset, kPiece);
    }
    benchmark::DoNotOptimize(block.data());
    benchmark::ClobberMemory();
  }
}

void BM_ReadSequential(benchmark::State& state) {
  const Files& files = TheFiles(state);
  std::vector<char> buf(size_t{4} << 20);
  for (auto _ : state) {
    for (const std::string& p : files.paths) {
      const int fd = open(p.c_str(), O_RDONLY);
      while (read(fd, buf.data(), buf.size()) > 0) benchmark::DoNotOptimize(buf.data());
      close(fd);
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(files.order.size()));
}
BENCHMARK(BM_ReadSequential)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_GatherFreshMappings(benchmark::State& state) {
  const Files& files = TheFiles(state);
  std::vector<char> block(kBatch * kPiece);
  for (auto _ : state) {
    const auto maps = MapAll(files);
    Gather(files, maps, block);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(files.order.size()));
}
BENCHMARK(BM_GatherFreshMappings)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_GatherTouchedMappings(benchmark::State& state) {
  const Files& files = TheFiles(state);
  std::vector<char> block(kBatch * kPiece);
  const auto maps = MapAll(files);
  Gather(files, maps, block);  // every page touched once
  for (auto _ : state) Gather(files, maps, block);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(files.order.size()));
}
BENCHMARK(BM_GatherTouchedMappings)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_PreadThenGather(benchmark::State& state) {
  const Files& files = TheFiles(state);
  std::vector<char> block(kBatch * kPiece);
  std::vector<std::string> buffers(files.paths.size(), std::string(kFileBytes, '\0'));
  const auto read_all = [&] {
    for (size_t f = 0; f < files.paths.size(); ++f) {
      const int fd = open(files.paths[f].c_str(), O_RDONLY);
      uint64_t got = 0;
      for (ssize_t n; got < kFileBytes &&
                      (n = pread(fd, buffers[f].data() + got, kFileBytes - got, got)) > 0;) {
        got += static_cast<uint64_t>(n);
      }
      close(fd);
      if (got != kFileBytes) std::abort();
    }
  };
  read_all();
  for (auto _ : state) {
    read_all();
    for (size_t j = 0; j < files.order.size(); j += kBatch) {
      const size_t n = std::min(kBatch, files.order.size() - j);
      for (size_t k = 0; k < n; ++k) {
        const auto& [f, offset] = files.order[j + k];
        std::memcpy(block.data() + k * kPiece, buffers[f].data() + offset, kPiece);
      }
      benchmark::DoNotOptimize(block.data());
      benchmark::ClobberMemory();
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(files.order.size()));
}
BENCHMARK(BM_PreadThenGather)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// What ShardBytes::OpenFile asks of each local shard before it leaves large members in their
// file: whether the 16 MiB file is wholly in the page cache (written once: large folios), by
// cachestat (/1) against mincore over a fresh mapping (/0), the set written with one write().
void BM_WhollyInPageCache(benchmark::State& state) {
  const Files& files = TheFiles(state);  // range(0) 0: the set as written
  const int fd = open(files.paths[0].c_str(), O_RDONLY);
  if (fd < 0) std::abort();
  const bool cachestat = state.range(1) != 0;
  for (auto _ : state) {
    if (!WhollyInPageCache(fd, kFileBytes, cachestat)) std::abort();
  }
  close(fd);
}
BENCHMARK(BM_WhollyInPageCache)->Args({0, 0})->Args({0, 1})->Args({1, 0})->Args({1, 1});

}  // namespace
}  // namespace gantry::data
