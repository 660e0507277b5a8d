// Resuming the global order mid-epoch: the cost of getting the first sample after a resume at
// sample 0 and at sample 10,000,000 of an 11M-sample epoch (20,000 shards of 400..700 samples,
// synthetic: no bytes), on 8 ranks x 4 workers. The work is the epoch's shard order (O(shards)),
// the reader's positions (O(1)) and one lookup (O(log shards)); the shard fetch itself is the
// same at any position and not included. BM_OrderAt is one position -> sample lookup.
//
//   build/release/gantry_benchmarks --benchmark_filter='BM_(Resume|OrderAt)'
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "gantry/data/loader.h"
#include "gantry/data/order.h"

namespace gantry::data {
namespace {

const std::vector<uint64_t>& Sizes() {
  static const std::vector<uint64_t> sizes = [] {
    std::mt19937_64 rng(10);
    std::vector<uint64_t> s(20000);
    for (uint64_t& v : s) v = 400 + rng() % 301;
    return s;
  }();
  return sizes;
}

// Shards of the right sizes whose samples are empty: what the iterator does, without I/O.
class SyntheticSource final : public ShardSource {
 public:
  // Public: BM_IteratorNextManyShards's source holds these too.
  class Shard final : public LoadedShard {
   public:
    explicit Shard(uint64_t n) : n_(n) {}
    uint64_t size() const override { return n_; }
    Status Get(uint64_t, std::string& key, std::vector<SampleField>& fields) const override {
      key.clear();
      fields.clear();
      return Status::Ok();
    }

   private:
    uint64_t n_;
  };

  DatasetFormat format() const override { return DatasetFormat::kMds; }
  const std::vector<uint64_t>& shard_samples() const override { return Sizes(); }
  std::string ShardName(uint32_t shard) const override { return std::to_string(shard); }
  Result<std::shared_ptr<const LoadedShard>> Read(uint32_t shard) override {
    return std::shared_ptr<const LoadedShard>(std::make_shared<Shard>(Sizes()[shard]));
  }
};

OrderState StateAt(uint64_t consumed) {
  OrderState state;
  state.seed = 3;
  state.epoch = 1;
  state.consumed = consumed;
  uint64_t total = 0;
  for (uint64_t s : Sizes()) total += s;
  state.samples = total;
  return state;
}

// From the saved state to the first sample of rank 5, worker 2: ResumeOrder, SlotPositions,
// At. range(0) is the resume point.
void BM_ResumeFirstSample(benchmark::State& bench) {
  const OrderState state = StateAt(bench.range(0));
  for (auto _ : bench) {
    auto order = ResumeOrder(Sizes(), state);
    auto pos = SlotPositions::Create({8, 5, 4, 2, 16}, state.consumed, order->size());
    benchmark::DoNotOptimize(order->At((*pos)[0]));
  }
}
BENCHMARK(BM_ResumeFirstSample)->Arg(0)->Arg(10'000'000)->Unit(benchmark::kMicrosecond);

// The same through SampleIterator: Create, then Next (which reads one synthetic shard).
void BM_ResumeIteratorFirstSample(benchmark::State& bench) {
  const OrderState state = StateAt(bench.range(0));
  SyntheticSource source;
  Sample sample;
  for (auto _ : bench) {
    auto order = ResumeOrder(source.shard_samples(), state);
    auto it = SampleIterator::Create(source, *order, {8, 5, 4, 2, 16}, state.consumed);
    benchmark::DoNotOptimize(it->Next(sample));
  }
}
BENCHMARK(BM_ResumeIteratorFirstSample)->Arg(0)->Arg(10'000'000)->Unit(benchmark::kMicrosecond);

// Per-sample cost of SampleIterator::Next through one shuffled epoch of 160,000 empty samples
// in shards of range(0) samples, the window covering them all, so every shard is held at once
// (10,000 of them at 16 per shard). The ratio of the 16-per-shard rate to the 2,000-per-shard
// one is what holding many shards costs per sample: 0.004 when Next walked every held shard
// for every sample, 0.47 since it walks them when the window moves (docs/performance.md).
void BM_IteratorNextManyShards(benchmark::State& bench) {
  class Uniform final : public ShardSource {
   public:
    explicit Uniform(uint64_t per) : sizes_(160'000 / per, per) {}
    DatasetFormat format() const override { return DatasetFormat::kMds; }
    const std::vector<uint64_t>& shard_samples() const override { return sizes_; }
    std::string ShardName(uint32_t shard) const override { return std::to_string(shard); }
    Result<std::shared_ptr<const LoadedShard>> Read(uint32_t shard) override {
      return std::shared_ptr<const LoadedShard>(
          std::make_shared<SyntheticSource::Shard>(sizes_[shard]));
    }

   private:
    std::vector<uint64_t> sizes_;
  };
  Uniform source(static_cast<uint64_t>(bench.range(0)));
  auto order = EpochOrder::Create(source.shard_samples(), {.seed = 3, .window = 160'000}, 0);
  Sample sample;
  uint64_t samples = 0;
  for (auto _ : bench) {
    auto it = SampleIterator::Create(source, *order, {}, 0, {0, 0});
    while (*it->Next(sample)) ++samples;
  }
  bench.SetItemsProcessed(static_cast<int64_t>(samples));
}
BENCHMARK(BM_IteratorNextManyShards)->Arg(16)->Arg(2000)->Unit(benchmark::kMillisecond);

void BM_OrderAt(benchmark::State& bench) {
  auto order = EpochOrder::Create(Sizes(), {.seed = 3}, 1);
  uint64_t p = 0;
  for (auto _ : bench) {
    benchmark::DoNotOptimize(order->At(p));
    p = (p + 7919) % order->size();
  }
}
BENCHMARK(BM_OrderAt);

}  // namespace
}  // namespace gantry::data
