// The global sample order: Feistel permutations, the epoch's shard order and windows, slots and
// the resumable state (order.h).
#include "gantry/data/order.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <nlohmann/json.hpp>

namespace gantry::data {
namespace {

// splitmix64's finaliser: a strong 64-bit mix, the same everywhere (no std:: distributions,
// whose output differs between standard libraries).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Derive(uint64_t key, uint64_t value) { return Mix(key ^ Mix(value)); }

// Keys of the two kinds of permutation in an epoch; distinct tags keep them independent.
constexpr uint64_t kShardTag = 1;
constexpr uint64_t kWindowTag = 2;

uint64_t EpochKey(uint64_t seed, uint64_t epoch) { return Derive(Mix(seed), epoch); }

}  // namespace

Permutation::Permutation(uint64_t n, uint64_t key) : n_(n) {
  if (n_ <= 1) return;
  const int bits = std::bit_width(n_ - 1);  // >= 1
  half_bits_ = (bits + 1) / 2;              // <= 32
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  for (int r = 0; r < kRounds; ++r) round_keys_[r] = Derive(key, static_cast<uint64_t>(r));
}

uint64_t Permutation::Encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (int r = 0; r < kRounds; ++r) {
    const uint64_t next = left ^ (Mix(round_keys_[r] ^ right) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t Permutation::operator()(uint64_t i) const {
  if (n_ <= 1) return i;
  // Cycle walking: the network permutes [0, 4^half_bits), at most 4n values; following the
  // cycle from i until it re-enters [0, n) is a bijection of [0, n). Expected steps < 4.
  uint64_t x = Encrypt(i);
  while (x >= n_) x = Encrypt(x);
  return x;
}

Result<EpochOrder> EpochOrder::Create(const std::vector<uint64_t>& shard_samples,
                                      const OrderOptions& options, uint64_t epoch) {
  if (shard_samples.size() >= std::numeric_limits<uint32_t>::max()) {
    return InvalidArgument("a dataset order holds at most 2^32 - 2 shards, not " +
                           std::to_string(shard_samples.size()));
  }
  EpochOrder o;
  o.options_ = options;
  o.epoch_ = epoch;
  const size_t n = shard_samples.size();
  o.order_.resize(n);
  o.rank_of_.resize(n);
  const uint64_t key = EpochKey(options.seed, epoch);
  const Permutation shards(n, Derive(key, kShardTag));
  for (size_t k = 0; k < n; ++k) {
    const uint32_t s =
        options.shuffle ? static_cast<uint32_t>(shards(k)) : static_cast<uint32_t>(k);
    o.order_[k] = s;
    o.rank_of_[s] = static_cast<uint32_t>(k);
  }
  o.prefix_.resize(n + 1);
  o.prefix_[0] = 0;
  constexpr uint64_t kMaxSamples = uint64_t{1} << 63;
  for (size_t k = 0; k < n; ++k) {
    const uint64_t add = shard_samples[o.order_[k]];
    if (add > kMaxSamples - o.prefix_[k]) {
      return InvalidArgument("a dataset order holds at most 2^63 samples");
    }
    o.prefix_[k + 1] = o.prefix_[k] + add;
  }
  const uint64_t total = o.prefix_.back();
  o.window_ = options.shuffle && options.window > 1 ? options.window : 1;
  if (total > 0) o.window_ = std::min(o.window_, total);
  o.window_key_ = Derive(key, kWindowTag);
  return o;
}

uint64_t EpochOrder::ShardOrderPosition(uint64_t p) const {
  if (window_ <= 1) return p;
  const uint64_t w = p / window_;
  const uint64_t begin = w * window_;
  const uint64_t len = std::min(window_, size() - begin);
  // A permutation per window, keyed by its number: built on the spot, nothing stored.
  const Permutation perm(len, Derive(window_key_, w));
  return begin + perm(p - begin);
}

SampleRef EpochOrder::At(uint64_t p) const {
  const uint64_t q = ShardOrderPosition(p);
  // The last k with prefix_[k] <= q; empty shards share a prefix value and are skipped over.
  const auto it = std::upper_bound(prefix_.begin(), prefix_.end(), q);
  const size_t k = static_cast<size_t>(it - prefix_.begin()) - 1;
  return SampleRef{order_[k], q - prefix_[k]};
}

Status ValidateSlot(const Slot& slot) {
  if (slot.world == 0) return InvalidArgument("world size must be at least 1");
  if (slot.rank >= slot.world) {
    return InvalidArgument("rank " + std::to_string(slot.rank) + " is not below world size " +
                           std::to_string(slot.world));
  }
  const uint32_t readers = std::max<uint32_t>(slot.workers, 1);
  if (slot.worker >= readers) {
    return InvalidArgument("worker " + std::to_string(slot.worker) + " is not below " +
                           std::to_string(readers) + " reader(s)");
  }
  if (slot.batch == 0) return InvalidArgument("batch size must be at least 1");
  return Status::Ok();
}

Result<SlotPositions> SlotPositions::Create(const Slot& slot, uint64_t start, uint64_t end) {
  GANTRY_RETURN_IF_ERROR(ValidateSlot(slot));
  if (start > end) {
    return InvalidArgument("start " + std::to_string(start) + " is past the end " +
                           std::to_string(end));
  }
  SlotPositions s;
  s.start_ = start;
  s.batch_ = slot.batch;
  const uint64_t readers = std::max<uint32_t>(slot.workers, 1);
  s.stride_ = uint64_t{slot.world} * readers;
  s.first_ = uint64_t{slot.worker} * slot.world + slot.rank;
  const uint64_t length = end - start;
  const uint64_t blocks = length / s.batch_ + (length % s.batch_ != 0 ? 1 : 0);
  if (s.first_ >= blocks) return s;  // nothing left for this slot
  const uint64_t mine = (blocks - 1 - s.first_) / s.stride_ + 1;
  s.size_ = mine * s.batch_;
  // The last block of the range may be short; it is this slot's when the stride lands on it.
  if ((blocks - 1 - s.first_) % s.stride_ == 0) s.size_ -= blocks * s.batch_ - length;
  return s;
}

uint64_t SlotPositions::operator[](uint64_t j) const {
  const uint64_t block = (j / batch_) * stride_ + first_;
  return start_ + block * batch_ + j % batch_;
}

std::string OrderState::ToJson() const {
  nlohmann::json j = {{"seed", seed},   {"shuffle", shuffle},   {"window", window},
                      {"epoch", epoch}, {"consumed", consumed}, {"samples", samples}};
  return j.dump();
}

Result<OrderState> OrderState::FromJson(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgument("data order state is not a JSON object");
  OrderState s;
  auto number = [&](const char* name, uint64_t& out) -> Status {
    auto it = j.find(name);
    if (it == j.end() || !it->is_number_unsigned()) {
      return InvalidArgument(std::string("data order state: '") + name +
                             "' must be a non-negative integer");
    }
    out = it->get<uint64_t>();
    return Status::Ok();
  };
  GANTRY_RETURN_IF_ERROR(number("seed", s.seed));
  GANTRY_RETURN_IF_ERROR(number("window", s.window));
  GANTRY_RETURN_IF_ERROR(number("epoch", s.epoch));
  GANTRY_RETURN_IF_ERROR(number("consumed", s.consumed));
  GANTRY_RETURN_IF_ERROR(number("samples", s.samples));
  auto shuffle = j.find("shuffle");
  if (shuffle == j.end() || !shuffle->is_boolean()) {
    return InvalidArgument("data order state: 'shuffle' must be true or false");
  }
  s.shuffle = shuffle->get<bool>();
  if (s.consumed > s.samples) {
    return InvalidArgument("data order state: consumed " + std::to_string(s.consumed) +
                           " is more than the epoch's " + std::to_string(s.samples) + " samples");
  }
  return s;
}

OrderState StateOf(const EpochOrder& order, uint64_t consumed) {
  OrderState s;
  s.seed = order.options().seed;
  s.shuffle = order.options().shuffle;
  s.window = order.options().window;
  s.epoch = order.epoch();
  s.consumed = std::min(consumed, order.size());
  s.samples = order.size();
  return s;
}

Result<EpochOrder> ResumeOrder(const std::vector<uint64_t>& shard_samples,
                               const OrderState& state) {
  GANTRY_ASSIGN_OR_RETURN(EpochOrder order,
                          EpochOrder::Create(shard_samples, state.options(), state.epoch));
  if (order.size() != state.samples) {
    return FailedPrecondition("the data order was saved for " + std::to_string(state.samples) +
                              " samples; this dataset has " + std::to_string(order.size()));
  }
  return order;
}

}  // namespace gantry::data
