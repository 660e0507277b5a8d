// The global order: permutations are bijections, every sample is read exactly once across any
// ranks x workers x batch, the DataLoader's consumption follows the global order so a resume (on
// any world size) continues the uninterrupted sequence, and a 10M-sample epoch resumes at sample
// 10 million without touching the prefix.
#include "gantry/data/order.h"

#include <gtest/gtest.h>

#include <deque>
#include <random>

namespace gantry::data {
namespace {

std::vector<uint64_t> RandomSizes(size_t shards, uint64_t lo, uint64_t hi, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> sizes(shards);
  for (uint64_t& s : sizes) s = lo + rng() % (hi - lo + 1);
  return sizes;
}

// Dataset-order flat index of a sample (shards as listed, samples as stored).
class Flat {
 public:
  explicit Flat(const std::vector<uint64_t>& sizes) : begin_(sizes.size() + 1) {
    for (size_t i = 0; i < sizes.size(); ++i) begin_[i + 1] = begin_[i] + sizes[i];
    sizes_ = sizes;
  }
  uint64_t operator()(const SampleRef& r) const {
    EXPECT_LT(r.shard, sizes_.size());
    EXPECT_LT(r.index, sizes_[r.shard]) << "shard " << r.shard;
    return begin_[r.shard] + r.index;
  }
  uint64_t total() const { return begin_.back(); }

 private:
  std::vector<uint64_t> begin_;
  std::vector<uint64_t> sizes_;
};

std::vector<uint64_t> WholeEpoch(const EpochOrder& order, const Flat& flat) {
  std::vector<uint64_t> out;
  out.reserve(order.size());
  for (uint64_t p = 0; p < order.size(); ++p) out.push_back(flat(order.At(p)));
  return out;
}

TEST(Permutation, IsABijectionForEverySize) {
  for (uint64_t n : {0, 1, 2, 3, 4, 5, 7, 16, 17, 255, 256, 1000, 4097, 65537}) {
    for (uint64_t key : {0ULL, 1ULL, 0xdeadbeefULL}) {
      const Permutation perm(n, key);
      std::vector<bool> seen(n, false);
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t v = perm(i);
        ASSERT_LT(v, n) << "n=" << n;
        ASSERT_FALSE(seen[v]) << "n=" << n << " value " << v << " twice";
        seen[v] = true;
      }
    }
  }
}

TEST(Permutation, ShufflesAndDependsOnTheKey) {
  const uint64_t n = 10000;
  const Permutation a(n, 1), b(n, 2);
  uint64_t fixed = 0, same = 0, displacement = 0;
  for (uint64_t i = 0; i < n; ++i) {
    fixed += a(i) == i;
    same += a(i) == b(i);
    displacement += a(i) > i ? a(i) - i : i - a(i);
  }
  // A uniform permutation has ~1 fixed point and ~1 agreement with another; mean |p(i) - i|
  // is n/3.
  EXPECT_LT(fixed, 10u);
  EXPECT_LT(same, 10u);
  EXPECT_GT(displacement / n, n / 4);
  EXPECT_LT(displacement / n, n / 2.5);
}

TEST(EpochOrder, EverySampleOnceAndWindowsStayLocal) {
  // Empty shards mixed in; a window that does not divide the total.
  std::vector<uint64_t> sizes = RandomSizes(40, 0, 90, 3);
  sizes[5] = 0;
  sizes[39] = 0;
  const Flat flat(sizes);
  for (uint64_t window : {0, 1, 7, 100, 1000, 1 << 20}) {
    auto order = EpochOrder::Create(sizes, {.seed = 11, .shuffle = true, .window = window}, 2);
    ASSERT_TRUE(order.ok()) << order.status().ToString();
    ASSERT_EQ(order->size(), flat.total());
    std::vector<bool> seen(flat.total(), false);
    for (uint64_t p = 0; p < order->size(); ++p) {
      const uint64_t f = flat(order->At(p));
      ASSERT_FALSE(seen[f]) << "window " << window << ": sample " << f << " twice";
      seen[f] = true;
      // p's sample comes from a shard overlapping p's window in shard order.
      const uint64_t q = order->ShardOrderPosition(p);
      EXPECT_EQ(q - q % order->window(), order->WindowStart(p));
      const size_t k = order->RankOfShard(order->At(p).shard);
      EXPECT_LE(order->ShardBegin(k), q);
      EXPECT_LT(q, order->ShardEnd(k));
    }
  }
}

TEST(EpochOrder, UnshuffledIsTheDatasetOrder) {
  const std::vector<uint64_t> sizes = {3, 0, 2};
  auto order = EpochOrder::Create(sizes, {.seed = 5, .shuffle = false, .window = 100}, 9);
  ASSERT_TRUE(order.ok());
  const std::vector<SampleRef> want = {{0, 0}, {0, 1}, {0, 2}, {2, 0}, {2, 1}};
  ASSERT_EQ(order->size(), want.size());
  for (uint64_t p = 0; p < want.size(); ++p) EXPECT_EQ(order->At(p), want[p]) << p;
}

TEST(EpochOrder, SeedsAndEpochsGiveDifferentOrdersAndTheSameOnesAgain) {
  const std::vector<uint64_t> sizes = RandomSizes(30, 50, 150, 4);
  const Flat flat(sizes);
  auto make = [&](uint64_t seed, uint64_t epoch, uint64_t window) {
    auto o = EpochOrder::Create(sizes, {.seed = seed, .shuffle = true, .window = window}, epoch);
    EXPECT_TRUE(o.ok());
    return WholeEpoch(*o, flat);
  };
  const auto base = make(1, 0, 500);
  EXPECT_EQ(base, make(1, 0, 500));
  // Another window size is another order too, but windows of similar sizes share their
  // Feistel width, so it is only required to differ.
  EXPECT_NE(make(1, 0, 400), base);
  for (const auto& other : {make(2, 0, 500), make(1, 1, 500)}) {
    ASSERT_EQ(other.size(), base.size());
    uint64_t same = 0;
    for (size_t i = 0; i < base.size(); ++i) same += other[i] == base[i];
    EXPECT_LT(same, base.size() / 50) << "orders barely differ";
  }
  // The shard order changes with the epoch too, not just the windows.
  auto e0 = EpochOrder::Create(sizes, {.seed = 1}, 0);
  auto e1 = EpochOrder::Create(sizes, {.seed = 1}, 1);
  int moved = 0;
  for (size_t k = 0; k < sizes.size(); ++k) moved += e0->ShardAt(k) != e1->ShardAt(k);
  EXPECT_GT(moved, 20);
}

// The order is part of what a checkpoint means: a change to it would resume old checkpoints on
// other samples. These values were computed when the algorithm was written; update them only
// with a deliberate format change (and say so in docs/data.md).
TEST(EpochOrder, IsStableAcrossBuilds) {
  auto order = EpochOrder::Create({4, 3, 5}, {.seed = 42, .shuffle = true, .window = 6}, 3);
  ASSERT_TRUE(order.ok());
  std::vector<std::pair<uint32_t, uint64_t>> got;
  for (uint64_t p = 0; p < order->size(); ++p)
    got.emplace_back(order->At(p).shard, order->At(p).index);
  const std::vector<std::pair<uint32_t, uint64_t>> pinned = {
      {1, 1}, {2, 2}, {2, 0}, {2, 1}, {1, 2}, {1, 0},   // shard 1, then shard 2's first 3
      {0, 1}, {0, 2}, {2, 3}, {0, 3}, {2, 4}, {0, 0}};  // shard 2's last 2, then shard 0
  EXPECT_EQ(got, pinned);
}

TEST(SlotPositions, RejectsBadSlots) {
  EXPECT_FALSE(SlotPositions::Create({.world = 0}, 0, 10).ok());
  EXPECT_FALSE(SlotPositions::Create({.world = 2, .rank = 2}, 0, 10).ok());
  EXPECT_FALSE(
      SlotPositions::Create({.world = 1, .rank = 0, .workers = 2, .worker = 2}, 0, 10).ok());
  EXPECT_FALSE(
      SlotPositions::Create({.world = 1, .rank = 0, .workers = 0, .worker = 1}, 0, 10).ok());
  EXPECT_FALSE(SlotPositions::Create({.batch = 0}, 0, 10).ok());
  EXPECT_EQ(SlotPositions::Create({}, 11, 10).status().code(), StatusCode::kInvalidArgument);
}

// Every position in [start, end) goes to exactly one slot, for 1, 2, 3, 4, 8 ranks x 0, 1, 4
// workers, single samples and batches, totals that divide and that do not.
TEST(SlotPositions, ExactlyOnceAcrossRanksAndWorkers) {
  for (uint32_t world : {1, 2, 3, 4, 8}) {
    for (uint32_t workers : {0, 1, 4}) {
      for (uint64_t batch : {1, 3, 8}) {
        for (auto [start, end] :
             {std::pair<uint64_t, uint64_t>{0, 1009}, {0, 960}, {37, 1000}, {995, 1000}, {0, 0}}) {
          std::vector<int> hits(end, 0);
          const uint32_t readers = std::max<uint32_t>(workers, 1);
          for (uint32_t rank = 0; rank < world; ++rank) {
            for (uint32_t worker = 0; worker < readers; ++worker) {
              const Slot slot{world, rank, workers, worker, batch};
              auto pos = SlotPositions::Create(slot, start, end);
              ASSERT_TRUE(pos.ok());
              uint64_t prev = 0;
              for (uint64_t j = 0; j < pos->size(); ++j) {
                const uint64_t p = (*pos)[j];
                ASSERT_GE(p, start);
                ASSERT_LT(p, end) << world << "x" << workers << " b" << batch;
                if (j > 0) {
                  ASSERT_GT(p, prev);  // each reader moves forward only
                }
                prev = p;
                ++hits[p];
              }
            }
          }
          for (uint64_t p = start; p < end; ++p) {
            ASSERT_EQ(hits[p], 1) << world << " ranks x " << workers << " workers, batch " << batch
                                  << ", [" << start << "," << end << "): position " << p;
          }
        }
      }
    }
  }
}

// torch's DataLoader (IterableDataset, batch_size B, W workers): each worker batches its own
// samples; the loader takes batches from workers 0, 1, ..., W-1, 0, ... and skips an exhausted
// one. Returns each rank's batches, as its training loop sees them.
std::vector<std::deque<std::vector<uint64_t>>> DataLoaderBatches(uint32_t world, uint32_t workers,
                                                                 uint64_t batch, uint64_t start,
                                                                 uint64_t end) {
  std::vector<std::deque<std::vector<uint64_t>>> out(world);
  const uint32_t readers = std::max<uint32_t>(workers, 1);
  for (uint32_t rank = 0; rank < world; ++rank) {
    std::vector<std::deque<std::vector<uint64_t>>> per_worker(readers);
    for (uint32_t w = 0; w < readers; ++w) {
      auto pos = SlotPositions::Create({world, rank, workers, w, batch}, start, end);
      EXPECT_TRUE(pos.ok());
      for (uint64_t j = 0; j < pos->size(); ++j) {
        if (j % batch == 0) per_worker[w].emplace_back();
        per_worker[w].back().push_back((*pos)[j]);
      }
    }
    for (bool any = true; any;) {
      any = false;
      for (uint32_t w = 0; w < readers; ++w) {
        if (per_worker[w].empty()) continue;
        out[rank].push_back(std::move(per_worker[w].front()));
        per_worker[w].pop_front();
        any = true;
      }
    }
  }
  return out;
}

// Synchronous training: every rank takes one batch per step. Returns the positions in the order
// the job consumed them (step by step, rank by rank), stopping after `steps` steps.
std::vector<uint64_t> Train(std::vector<std::deque<std::vector<uint64_t>>>& batches,
                            uint64_t steps) {
  std::vector<uint64_t> consumed;
  for (uint64_t t = 0; t < steps; ++t) {
    for (auto& rank : batches) {
      if (rank.empty()) continue;
      consumed.insert(consumed.end(), rank.front().begin(), rank.front().end());
      rank.pop_front();
    }
  }
  return consumed;
}

TEST(SlotPositions, ConsumptionFollowsTheGlobalOrder) {
  for (uint32_t world : {1, 2, 3, 4, 8}) {
    for (uint32_t workers : {0, 1, 4}) {
      for (uint64_t batch : {1, 5}) {
        auto batches = DataLoaderBatches(world, workers, batch, 13, 1000);
        const std::vector<uint64_t> consumed = Train(batches, 1000);
        ASSERT_EQ(consumed.size(), 987u);
        for (uint64_t i = 0; i < consumed.size(); ++i) {
          ASSERT_EQ(consumed[i], 13 + i) << world << "x" << workers << " b" << batch;
        }
      }
    }
  }
}

// Train some steps on one world size, save `consumed`, resume on another (other workers, other
// batch): the samples seen, end to end, are the uninterrupted epoch's.
TEST(OrderResume, AnyWorldSizeContinuesTheUninterruptedSequence) {
  const std::vector<uint64_t> sizes = RandomSizes(25, 10, 200, 8);
  const Flat flat(sizes);
  const OrderOptions options{.seed = 1234, .shuffle = true, .window = 300};
  auto order = EpochOrder::Create(sizes, options, 5);
  ASSERT_TRUE(order.ok());
  const std::vector<uint64_t> uninterrupted = WholeEpoch(*order, flat);
  std::mt19937_64 rng(99);
  const uint32_t worlds[] = {1, 2, 3, 4, 8};
  const uint32_t workers[] = {0, 1, 4};
  for (int trial = 0; trial < 60; ++trial) {
    const uint32_t w1 = worlds[rng() % 5], w2 = worlds[rng() % 5];
    const uint32_t k1 = workers[rng() % 3], k2 = workers[rng() % 3];
    const uint64_t b1 = 1 + rng() % 6, b2 = 1 + rng() % 6;
    const uint64_t steps = rng() % (order->size() / (w1 * b1) + 1);
    // First run: `steps` steps, then the job stops and saves its state.
    auto first = DataLoaderBatches(w1, k1, b1, 0, order->size());
    const std::vector<uint64_t> before = Train(first, steps);
    const OrderState saved = StateOf(*order, before.size());
    auto state = OrderState::FromJson(saved.ToJson());
    ASSERT_TRUE(state.ok());
    // Second run: a fresh order from the saved state and the dataset, on another world size.
    auto resumed = ResumeOrder(sizes, *state);
    ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
    auto second = DataLoaderBatches(w2, k2, b2, state->consumed, resumed->size());
    const std::vector<uint64_t> after = Train(second, order->size());
    std::vector<uint64_t> seen;
    for (uint64_t p : before) seen.push_back(flat(order->At(p)));
    for (uint64_t p : after) seen.push_back(flat(resumed->At(p)));
    ASSERT_EQ(seen, uninterrupted) << w1 << "x" << k1 << " b" << b1 << " for " << steps
                                   << " steps, then " << w2 << "x" << k2 << " b" << b2;
  }
}

TEST(OrderState, RoundTripsAndRefusesNonsense) {
  const OrderState s{
      .seed = 7, .shuffle = false, .window = 64, .epoch = 3, .consumed = 10, .samples = 99};
  auto back = OrderState::FromJson(s.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->seed, 7u);
  EXPECT_FALSE(back->shuffle);
  EXPECT_EQ(back->window, 64u);
  EXPECT_EQ(back->epoch, 3u);
  EXPECT_EQ(back->consumed, 10u);
  EXPECT_EQ(back->samples, 99u);
  for (const char* bad :
       {"", "[]", "{}",
        R"({"seed":1,"shuffle":true,"window":1,"epoch":0,"consumed":-1,"samples":3})",
        R"({"seed":1,"shuffle":1,"window":1,"epoch":0,"consumed":0,"samples":3})",
        R"({"seed":1,"shuffle":true,"window":1,"epoch":0,"consumed":4,"samples":3})"}) {
    EXPECT_EQ(OrderState::FromJson(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  // Another dataset (a shard more) is refused, not silently resumed on other samples.
  OrderState saved = s;
  saved.samples = 6;
  EXPECT_TRUE(ResumeOrder({3, 3}, saved).ok());
  EXPECT_EQ(ResumeOrder({3, 3, 1}, saved).status().code(), StatusCode::kFailedPrecondition);
}

// 10M+ samples (synthetic shard sizes: no bytes): resuming at sample 10,000,000 on 8 ranks x 4
// workers hands out exactly the positions [10M, end) once, and reads only shards that overlap
// the resume point's window. The time it takes is BM_ResumeAt10M (order_benchmark.cc).
TEST(OrderResume, TenMillionSamplesResumeAtTheEnd) {
  const std::vector<uint64_t> sizes = RandomSizes(20000, 400, 700, 10);
  const Flat flat(sizes);
  ASSERT_GT(flat.total(), 10'500'000u);
  auto order = EpochOrder::Create(sizes, {.seed = 3, .shuffle = true, .window = 1 << 18}, 1);
  ASSERT_TRUE(order.ok());
  const uint64_t start = 10'000'000;
  const uint64_t tail = order->size() - start;
  std::vector<bool> position_seen(tail, false);
  std::vector<bool> samples_seen(flat.total(), false);
  for (uint32_t rank = 0; rank < 8; ++rank) {
    for (uint32_t worker = 0; worker < 4; ++worker) {
      auto pos = SlotPositions::Create({8, rank, 4, worker, 16}, start, order->size());
      ASSERT_TRUE(pos.ok());
      // The first sample this reader gets lies in the window of the resume point or later.
      if (pos->size() > 0) {
        EXPECT_GE(order->ShardOrderPosition((*pos)[0]), order->WindowStart(start));
      }
      for (uint64_t j = 0; j < pos->size(); ++j) {
        const uint64_t p = (*pos)[j];
        ASSERT_FALSE(position_seen[p - start]);
        position_seen[p - start] = true;
        const uint64_t f = flat(order->At(p));
        ASSERT_FALSE(samples_seen[f]);
        samples_seen[f] = true;
      }
    }
  }
  for (uint64_t i = 0; i < tail; ++i) ASSERT_TRUE(position_seen[i]) << start + i;
  // And the whole epoch at this scale is a bijection onto the dataset's samples.
  std::vector<bool> seen(flat.total(), false);
  for (uint64_t p = 0; p < order->size(); ++p) {
    const uint64_t f = flat(order->At(p));
    ASSERT_FALSE(seen[f]);
    seen[f] = true;
  }
}

}  // namespace
}  // namespace gantry::data
