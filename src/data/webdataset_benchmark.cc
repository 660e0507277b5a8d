// Parsing a WebDataset shard: listing its tar members and grouping them into samples, what the
// read-ahead's threads do for every shard beside the training loop. A 16 MiB shard of 4,096
// samples of 4 KiB, built in memory, so no I/O is timed. Two layouts: one field per sample with
// a short member name ("s0001234.bin", within a std::string's inline storage), and two fields
// per sample with names of a deeper path ("train/part-07/s0001234.jpg" and ".cls").
//
//   build/release/bench/gantry_benchmarks --benchmark_filter=BM_WdsParse
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>

#include "gantry/data/tar.h"
#include "gantry/data/webdataset.h"

namespace gantry::data {
namespace {

constexpr int kSamples = 4096;

std::string Shard(bool two_fields) {
  TarWriter w;
  const std::string payload(4096, 'x');
  for (int i = 0; i < kSamples; ++i) {
    char key[64];
    std::snprintf(key, sizeof key, two_fields ? "train/part-07/s%07d" : "s%07d", i);
    const std::string k(key);
    if (two_fields) {
      (void)w.Add(k + ".jpg", payload);
      (void)w.Add(k + ".cls", "7");
    } else {
      (void)w.Add(k + ".bin", payload);
    }
  }
  return w.Finish();
}

void BM_WdsParse(benchmark::State& state) {
  const bool two_fields = state.range(0) == 2;
  const auto tar = ShardBytes::FromString(Shard(two_fields));
  for (auto _ : state) {
    Result<WdsShard> shard = WdsShard::Parse(tar, "shard-000000.tar", {});
    if (!shard.ok() || shard->samples().size() != kSamples) {
      state.SkipWithError("parse failed");
      return;
    }
    benchmark::DoNotOptimize(shard->samples().data());
  }
  state.SetItemsProcessed(state.iterations() * kSamples);
  state.SetLabel(two_fields ? "2 fields, long names" : "1 field, short names");
}
BENCHMARK(BM_WdsParse)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gantry::data
