// FaultyStore: an ObjectStore wrapper that injects faults into another store, for tests.
//
// A FaultPlan is a seeded list of rules. Each rule matches an operation (or all), optionally a
// key prefix, and fires either with a probability on every matching call or deterministically
// on the Nth matching call (1-based), at most max_fires times. Draws come from SplitMix64 keyed
// by (seed, rule, that rule's call number), so a single-threaded caller sees the same faults on
// every run; with concurrent callers the per-rule call order decides.
//
// What each kind does (the wrapped store is called unless stated):
//   kLatency       sleep latency_ms, then go on (combines with the other rules).
//   kUnavailable   Unavailable "injected fault" without calling the store (after_inner: call it
//                  first, so a put lands but the caller is told it failed: a lost response).
//   kIoError       IoError, same before/after choice.
//   kSlowDown      Unavailable "SlowDown: reduce your request rate" (S3 throttling), before.
//   kTruncate      Get/GetRange: Unavailable "truncated body: got X of Y bytes" (a client that
//                  checks Content-Length sees this). Put: stores only a prefix of the data and
//                  returns Unavailable.
//   kShortBody     Get/GetRange: returns OK with a prefix of the bytes, silently, to exercise
//                  callers' own length/checksum checks. Put: stores a prefix and returns OK
//                  (a torn write that only a checksum catches).
//   kBitFlip       Get/GetRange: returns OK with one bit flipped (bit rot). Put: stores the
//                  data with one bit flipped and returns OK.
//   kResourceExhausted  ResourceExhausted "disk full (injected)": a full tier; before/after
//                  like kIoError.
//   kPermissionDenied   PermissionDenied "permission denied (injected)": an S3 403 or EACCES;
//                  before/after like kIoError.
// Truncated lengths and flipped bits are drawn from the same seeded stream.
//
// Thread-safe: counters sit behind a mutex; the wrapped store must be thread-safe itself.
// PutFile/GetToFile use ObjectStore's whole-object defaults, so their faults are Put/Get's.
//
//   FaultPlan plan;
//   plan.seed = 7;
//   plan.rules.push_back(FaultRule::Nth(FaultOp::kGet, FaultKind::kSlowDown, 2));
//   FaultyStore store(NewMemoryStore(), plan);
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gantry/common/thread_annotations.h"
#include "gantry/storage/object_store.h"

namespace gantry {

enum class FaultOp { kAny, kPut, kGet, kGetRange, kHead, kList, kDelete };
enum class FaultKind {
  kLatency,
  kUnavailable,
  kIoError,
  kSlowDown,
  kTruncate,
  kShortBody,
  kBitFlip,
  kResourceExhausted,
  kPermissionDenied
};
inline constexpr int kNumFaultKinds = 9;

struct FaultRule {
  FaultOp op = FaultOp::kAny;
  FaultKind kind = FaultKind::kUnavailable;
  double probability = 0;    // chance per matching call (ignored when nth_call > 0)
  int64_t nth_call = 0;      // > 0: fire on exactly this matching call (1-based)
  int64_t max_fires = -1;    // -1: unlimited
  std::string key_prefix;    // only keys starting with this (List: the listed prefix)
  int latency_ms = 0;        // kLatency
  bool after_inner = false;  // kUnavailable/kIoError: run the operation, then fail

  // Fires on exactly the nth matching call (1-based).
  static FaultRule Nth(FaultOp op, FaultKind kind, int64_t n) {
    FaultRule r;
    r.op = op;
    r.kind = kind;
    r.nth_call = n;
    return r;
  }
  // Fires on each matching call with probability p.
  static FaultRule Chance(FaultOp op, FaultKind kind, double p) {
    FaultRule r;
    r.op = op;
    r.kind = kind;
    r.probability = p;
    return r;
  }
};

struct FaultPlan {
  uint64_t seed = 1;
  std::vector<FaultRule> rules;
};

struct FaultStats {
  int64_t calls = 0;                               // operations seen
  std::array<int64_t, kNumFaultKinds> injected{};  // indexed by FaultKind
  int64_t injected_total() const;
};

class FaultyStore final : public ObjectStore {
 public:
  FaultyStore(std::unique_ptr<ObjectStore> inner, FaultPlan plan);

  // Replaces the rules and resets their counters (stats are kept).
  void SetPlan(FaultPlan plan) EXCLUDES(mu_);
  FaultStats stats() const EXCLUDES(mu_);
  ObjectStore& inner() { return *inner_; }

  std::string_view backend() const override { return backend_; }
  std::string url() const override { return inner_->url(); }
  bool SupportsCreateIfAbsent() const override { return inner_->SupportsCreateIfAbsent(); }

  Status Put(std::string_view key, std::string_view data, const PutOptions& options) override;
  using ObjectStore::Put;
  Result<std::string> Get(std::string_view key) override;
  Result<std::string> GetRange(std::string_view key, uint64_t offset, uint64_t length) override;
  Result<ObjectInfo> Head(std::string_view key) override;
  Result<ListPage> List(std::string_view prefix, std::string_view page_token,
                        int max_keys) override;
  Status Delete(std::string_view key) override;

 private:
  // The fault chosen for one call (latency already slept).
  struct Decision {
    bool fire = false;
    FaultKind kind = FaultKind::kUnavailable;
    bool after_inner = false;
    uint64_t draw = 0;  // random bits for truncation length / bit position
  };
  Decision Decide(FaultOp op, std::string_view key) EXCLUDES(mu_);
  Status Injected(FaultOp op, std::string_view key, FaultKind kind) const;
  Result<std::string> Mangle(FaultOp op, std::string_view key, const Decision& d,
                             Result<std::string> got);

  const std::unique_ptr<ObjectStore> inner_;
  const std::string backend_;
  mutable Mutex mu_;
  FaultPlan plan_ GUARDED_BY(mu_);
  std::vector<int64_t> rule_calls_ GUARDED_BY(mu_);  // matching calls per rule
  std::vector<int64_t> rule_fires_ GUARDED_BY(mu_);
  FaultStats stats_ GUARDED_BY(mu_);
};

}  // namespace gantry
