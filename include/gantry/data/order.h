// The order a training job reads a dataset in: a seeded shuffle (shards first, then samples
// inside bounded windows) that is one global sequence per (dataset, seed, epoch), whatever the
// number of ranks and DataLoader workers, and that can be entered at any position in O(1).
//
// The sample at global position p is a pure function of (shard sizes, seed, epoch, window, p):
//   1. the shards are permuted (a seeded bijection of [0, shards)) and laid end to end, so a
//      "shard-order" position q names shard k of the permuted list and a sample inside it;
//   2. shard-order positions are cut into windows of `window` samples, [wW, (w+1)W), and each
//      window is permuted by its own seeded bijection: p = wW + j reads q = wW + perm_w(j).
// perm is a Feistel network with cycle walking, so one lookup costs O(1) (expected < 4 network
// evaluations) plus a binary search over the shard prefix sums: O(log shards). Nothing walks the
// prefix of the epoch, so resuming at sample 10^7 costs what resuming at sample 0 does.
//
// Who reads which position (Slot, SlotPositions): positions are handed out in blocks of `batch`
// samples. Block b = step * world + rank, and a rank's step t is served by DataLoader worker
// t mod workers, as torch's DataLoader takes batches from its workers in turn. So when every
// rank has taken t batches, exactly positions [start, start + t * world * batch) have been
// consumed: "samples consumed" is a single number, and a job can resume it with another world
// size, worker count or batch and still continue the same global sequence.
//
//   GANTRY_ASSIGN_OR_RETURN(EpochOrder order, EpochOrder::Create(sizes, {.seed = 7}, epoch));
//   GANTRY_ASSIGN_OR_RETURN(SlotPositions mine, SlotPositions::Create(slot, consumed,
//   order.size())); for (uint64_t j = 0; j < mine.size(); ++j) Read(order.At(mine[j]));
//
// Values are immutable after Create and safe to share between threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gantry/common/status.h"

namespace gantry::data {

struct OrderOptions {
  uint64_t seed = 0;
  // false: the dataset's own order (shards as listed, samples as stored); seed and window unused.
  bool shuffle = true;
  // Samples per shuffle window (0 or 1: shards are shuffled, samples inside them are not).
  // A window spans the shards that cover it in shard order, and those are what a reader holds
  // at once, so this trades randomness for memory. Default: 2^18, MosaicML Streaming's floor
  // for shuffle_block_size.
  uint64_t window = uint64_t{1} << 18;
};

// A seeded bijection of [0, n): a balanced Feistel network (6 rounds, splitmix64 round
// function) on the smallest even bit width holding n - 1, cycle-walked back into [0, n). The
// same (n, key) gives the same permutation on every platform.
class Permutation {
 public:
  Permutation(uint64_t n, uint64_t key);
  uint64_t size() const { return n_; }
  // Requires i < size().
  uint64_t operator()(uint64_t i) const;

 private:
  uint64_t Encrypt(uint64_t x) const;

  static constexpr int kRounds = 6;
  uint64_t n_;
  int half_bits_ = 0;
  uint64_t half_mask_ = 0;
  uint64_t round_keys_[kRounds] = {};
};

// A sample of the dataset: its shard (as the dataset lists them) and index inside that shard.
struct SampleRef {
  uint32_t shard = 0;
  uint64_t index = 0;
  friend bool operator==(const SampleRef&, const SampleRef&) = default;
};

// One epoch's order over a dataset of shards with the given sample counts.
class EpochOrder {
 public:
  // InvalidArgument for more than 2^32 - 1 shards or more than 2^63 samples. An empty dataset
  // (no shards, or only empty ones) is a valid order of size 0.
  static Result<EpochOrder> Create(const std::vector<uint64_t>& shard_samples,
                                   const OrderOptions& options, uint64_t epoch);

  uint64_t size() const { return prefix_.back(); }  // samples in the epoch
  size_t num_shards() const { return order_.size(); }
  uint64_t epoch() const { return epoch_; }
  const OrderOptions& options() const { return options_; }
  // The effective window (>= 1; size() when the window is larger than the dataset).
  uint64_t window() const { return window_; }

  // The sample at global position p. Requires p < size(). O(log shards).
  SampleRef At(uint64_t p) const;
  // The shard-order position global position p reads (step 2 above). Requires p < size().
  uint64_t ShardOrderPosition(uint64_t p) const;
  // The dataset shard read k-th in this epoch, and the shard-order range it occupies.
  uint32_t ShardAt(size_t k) const { return order_[k]; }
  uint64_t ShardBegin(size_t k) const { return prefix_[k]; }
  uint64_t ShardEnd(size_t k) const { return prefix_[k + 1]; }
  // Where dataset shard s lies in this epoch's shard order.
  size_t RankOfShard(uint32_t shard) const { return rank_of_[shard]; }
  // The first rank k whose shard ends past shard-order position q (num_shards() when none):
  // shards lie contiguously in shard order, so those overlapping [q, r) are k and the ones
  // after it that begin before r. O(log shards).
  size_t FirstShardEndingAfter(uint64_t q) const {
    return static_cast<size_t>(std::upper_bound(prefix_.begin() + 1, prefix_.end(), q) -
                               (prefix_.begin() + 1));
  }
  // The first shard-order position of the window holding global position p: the reader of p
  // needs no shard that ends at or before it.
  uint64_t WindowStart(uint64_t p) const { return p - p % window_; }

 private:
  EpochOrder() = default;

  OrderOptions options_;
  uint64_t epoch_ = 0;
  uint64_t window_ = 1;
  uint64_t window_key_ = 0;
  std::vector<uint32_t> order_;    // order_[k]: the dataset shard read k-th
  std::vector<uint32_t> rank_of_;  // inverse of order_
  std::vector<uint64_t> prefix_;   // prefix_[k]: samples in order_[0..k); size shards + 1
};

// One reader of the dataset: a rank of the job and, inside it, one DataLoader worker.
struct Slot {
  uint32_t world = 1;
  uint32_t rank = 0;
  // The rank's DataLoader num_workers; 0 means the rank's own process reads (one reader).
  uint32_t workers = 0;
  uint32_t worker = 0;
  // Samples per batch on each rank (the DataLoader's batch_size); 1 hands out single samples.
  uint64_t batch = 1;
};
// InvalidArgument for world 0, rank >= world, worker >= max(workers, 1) or batch 0.
Status ValidateSlot(const Slot& slot);

// The global positions one slot reads in [start, end), in the order it reads them.
//
// The end of an epoch is uneven, not padded: when end - start is not a multiple of
// world * batch, the last step is short, so some ranks get one batch fewer and one rank's last
// batch is short. Every sample is still read exactly once; size() tells each reader how many
// it gets, so a trainer that needs equal steps on every rank can stop at the smallest (the
// samples it leaves are then not read this epoch) or use uneven-input support (torch's Join).
class SlotPositions {
 public:
  // InvalidArgument for a bad slot (ValidateSlot) or start > end.
  static Result<SlotPositions> Create(const Slot& slot, uint64_t start, uint64_t end);

  uint64_t size() const { return size_; }
  // The j-th position this slot reads. Requires j < size(). O(1).
  uint64_t operator[](uint64_t j) const;

 private:
  SlotPositions() = default;

  uint64_t start_ = 0;
  uint64_t batch_ = 1;
  uint64_t stride_ = 1;  // blocks between two blocks of this slot: world * readers
  uint64_t first_ = 0;   // this slot's first block: worker * world + rank
  uint64_t size_ = 0;
};

// What a job saves to resume its data where it stopped: plain values, JSON via ToJson/FromJson,
// so it can sit in a checkpoint beside the model's state.
struct OrderState {
  uint64_t seed = 0;
  bool shuffle = true;
  uint64_t window = uint64_t{1} << 18;
  uint64_t epoch = 0;
  // Samples consumed in `epoch` by the whole job (all ranks): the next position to read.
  uint64_t consumed = 0;
  // The epoch's size when saved: resuming on a dataset of another size is refused.
  uint64_t samples = 0;

  // {"seed":..,"shuffle":..,"window":..,"epoch":..,"consumed":..,"samples":..}; seed as a
  // number (JSON readers that hold numbers as doubles lose seeds over 2^53: keep them small).
  std::string ToJson() const;
  // InvalidArgument for text that is not such an object, or consumed > samples.
  static Result<OrderState> FromJson(std::string_view json);
  OrderOptions options() const { return OrderOptions{seed, shuffle, window}; }
};

// The state after `consumed` samples of `order`.
OrderState StateOf(const EpochOrder& order, uint64_t consumed);
// The order a saved state continues in. FailedPrecondition when the dataset's size differs from
// the one saved (another dataset, or shards added or removed).
Result<EpochOrder> ResumeOrder(const std::vector<uint64_t>& shard_samples, const OrderState& state);

}  // namespace gantry::data
