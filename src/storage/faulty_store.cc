// The fault-injecting wrapper: decides per call from the seeded plan, then forwards or fails.
#include "gantry/storage/faulty_store.h"

#include <chrono>
#include <thread>
#include <utility>

#include "gantry/common/rng.h"

namespace gantry {
namespace {

const char* OpName(FaultOp op) {
  switch (op) {
    case FaultOp::kAny:
      return "any";
    case FaultOp::kPut:
      return "put";
    case FaultOp::kGet:
      return "get";
    case FaultOp::kGetRange:
      return "get";
    case FaultOp::kHead:
      return "head";
    case FaultOp::kList:
      return "list";
    case FaultOp::kDelete:
      return "delete";
  }
  return "?";
}

bool IsOutcome(FaultKind k) { return k != FaultKind::kLatency; }

}  // namespace

int64_t FaultStats::injected_total() const {
  int64_t n = 0;
  for (int64_t v : injected) n += v;
  return n;
}

FaultyStore::FaultyStore(std::unique_ptr<ObjectStore> inner, FaultPlan plan)
    : inner_(std::move(inner)), backend_("faulty(" + std::string(inner_->backend()) + ")") {
  SetPlan(std::move(plan));
}

void FaultyStore::SetPlan(FaultPlan plan) {
  MutexLock lock(mu_);
  plan_ = std::move(plan);
  rule_calls_.assign(plan_.rules.size(), 0);
  rule_fires_.assign(plan_.rules.size(), 0);
}

FaultStats FaultyStore::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

FaultyStore::Decision FaultyStore::Decide(FaultOp op, std::string_view key) {
  Decision d;
  int latency_ms = 0;
  {
    MutexLock lock(mu_);
    ++stats_.calls;
    for (size_t i = 0; i < plan_.rules.size(); ++i) {
      const FaultRule& r = plan_.rules[i];
      if (r.op != FaultOp::kAny && r.op != op) continue;
      if (!key.starts_with(r.key_prefix)) continue;
      const int64_t call = ++rule_calls_[i];
      // Later outcome rules still count the call (their Nth stays well defined) but cannot
      // override the first outcome that fired.
      if (d.fire && IsOutcome(r.kind)) continue;
      if (r.max_fires >= 0 && rule_fires_[i] >= r.max_fires) continue;
      const uint64_t bits = Mix(Mix(plan_.seed, i), static_cast<uint64_t>(call));
      const bool fire = r.nth_call > 0
                            ? call == r.nth_call
                            : static_cast<double>(bits >> 11) * 0x1.0p-53 < r.probability;
      if (!fire) continue;
      ++rule_fires_[i];
      ++stats_.injected[static_cast<int>(r.kind)];
      if (r.kind == FaultKind::kLatency) {
        latency_ms += r.latency_ms;
        continue;
      }
      d.fire = true;
      d.kind = r.kind;
      d.after_inner = r.after_inner;
      d.draw = Mix(bits, 0x5eed);
    }
  }
  if (latency_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(latency_ms));
  return d;
}

namespace {

// Kinds that fail the call with an error status (before or after the inner call).
bool IsErrorKind(FaultKind kind) {
  return kind == FaultKind::kUnavailable || kind == FaultKind::kIoError ||
         kind == FaultKind::kResourceExhausted || kind == FaultKind::kPermissionDenied;
}

}  // namespace

Status FaultyStore::Injected(FaultOp op, std::string_view key, FaultKind kind) const {
  const std::string where = url() + ": " + OpName(op) + " '" + std::string(key) + "'";
  switch (kind) {
    case FaultKind::kIoError:
      return IoError(where + ": injected I/O error");
    case FaultKind::kResourceExhausted:
      return ResourceExhausted(where + ": disk full (injected)");
    case FaultKind::kPermissionDenied:
      return PermissionDenied(where + ": permission denied (injected)");
    case FaultKind::kSlowDown:
      return Status(StatusCode::kUnavailable,
                    where + ": SlowDown: please reduce your request rate (injected)");
    default:
      return Status(StatusCode::kUnavailable, where + ": injected fault: service unavailable");
  }
}

// Applies a truncation or bit flip to a successful read.
Result<std::string> FaultyStore::Mangle(FaultOp op, std::string_view key, const Decision& d,
                                        Result<std::string> got) {
  if (!got.ok() || !d.fire) return got;
  std::string& data = got.value();
  switch (d.kind) {
    case FaultKind::kTruncate: {
      const uint64_t size = data.size();
      const uint64_t keep = size == 0 ? 0 : d.draw % size;
      return Status(StatusCode::kUnavailable, url() + ": " + OpName(op) + " '" + std::string(key) +
                                                  "': truncated body: got " + std::to_string(keep) +
                                                  " of " + std::to_string(size) +
                                                  " bytes (injected)");
    }
    case FaultKind::kShortBody:
      if (!data.empty()) data.resize(d.draw % data.size());
      return got;
    case FaultKind::kBitFlip:
      if (!data.empty()) {
        const uint64_t bit = d.draw % (data.size() * 8);
        data[bit / 8] = static_cast<char>(data[bit / 8] ^ (1u << (bit % 8)));
      }
      return got;
    default:
      return got;
  }
}

Status FaultyStore::Put(std::string_view key, std::string_view data, const PutOptions& options) {
  const Decision d = Decide(FaultOp::kPut, key);
  if (!d.fire) return inner_->Put(key, data, options);
  switch (d.kind) {
    case FaultKind::kUnavailable:
    case FaultKind::kIoError:
    case FaultKind::kResourceExhausted:
    case FaultKind::kPermissionDenied:
      if (d.after_inner) GANTRY_RETURN_IF_ERROR(inner_->Put(key, data, options));
      return Injected(FaultOp::kPut, key, d.kind);
    case FaultKind::kTruncate:
    case FaultKind::kShortBody: {
      const std::string_view prefix = data.substr(0, data.empty() ? 0 : d.draw % data.size());
      GANTRY_RETURN_IF_ERROR(inner_->Put(key, prefix, options));
      if (d.kind == FaultKind::kShortBody) return Status::Ok();
      return Status(StatusCode::kUnavailable,
                    url() + ": put '" + std::string(key) + "': connection reset after " +
                        std::to_string(prefix.size()) + " of " + std::to_string(data.size()) +
                        " bytes (injected truncation)");
    }
    case FaultKind::kBitFlip: {
      std::string copy(data);
      if (!copy.empty()) {
        const uint64_t bit = d.draw % (copy.size() * 8);
        copy[bit / 8] = static_cast<char>(copy[bit / 8] ^ (1u << (bit % 8)));
      }
      return inner_->Put(key, copy, options);
    }
    default:
      return Injected(FaultOp::kPut, key, d.kind);
  }
}

Result<std::string> FaultyStore::Get(std::string_view key) {
  const Decision d = Decide(FaultOp::kGet, key);
  if (d.fire && (d.kind == FaultKind::kSlowDown || (IsErrorKind(d.kind) && !d.after_inner))) {
    return Injected(FaultOp::kGet, key, d.kind);
  }
  Result<std::string> got = inner_->Get(key);
  if (d.fire && got.ok() && IsErrorKind(d.kind)) {
    return Injected(FaultOp::kGet, key, d.kind);
  }
  return Mangle(FaultOp::kGet, key, d, std::move(got));
}

Result<std::string> FaultyStore::GetRange(std::string_view key, uint64_t offset, uint64_t length) {
  const Decision d = Decide(FaultOp::kGetRange, key);
  if (d.fire && (d.kind == FaultKind::kSlowDown || (IsErrorKind(d.kind) && !d.after_inner))) {
    return Injected(FaultOp::kGetRange, key, d.kind);
  }
  Result<std::string> got = inner_->GetRange(key, offset, length);
  if (d.fire && got.ok() && IsErrorKind(d.kind)) {
    return Injected(FaultOp::kGetRange, key, d.kind);
  }
  return Mangle(FaultOp::kGetRange, key, d, std::move(got));
}

Result<ObjectInfo> FaultyStore::Head(std::string_view key) {
  const Decision d = Decide(FaultOp::kHead, key);
  if (d.fire && !d.after_inner) return Injected(FaultOp::kHead, key, d.kind);
  Result<ObjectInfo> info = inner_->Head(key);
  if (d.fire && info.ok()) return Injected(FaultOp::kHead, key, d.kind);
  return info;
}

Result<ListPage> FaultyStore::List(std::string_view prefix, std::string_view page_token,
                                   int max_keys) {
  const Decision d = Decide(FaultOp::kList, prefix);
  if (d.fire) return Injected(FaultOp::kList, prefix, d.kind);
  return inner_->List(prefix, page_token, max_keys);
}

Status FaultyStore::Delete(std::string_view key) {
  const Decision d = Decide(FaultOp::kDelete, key);
  if (!d.fire) return inner_->Delete(key);
  if (d.after_inner) GANTRY_RETURN_IF_ERROR(inner_->Delete(key));
  return Injected(FaultOp::kDelete, key, d.kind);
}

}  // namespace gantry
