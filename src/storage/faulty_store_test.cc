#include "gantry/storage/faulty_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "gantry/storage/memory_store.h"

namespace gantry {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<FaultyStore> Make(FaultPlan plan) {
  return std::make_unique<FaultyStore>(NewMemoryStore(), std::move(plan));
}

FaultPlan OneRule(FaultRule r, uint64_t seed = 1) {
  FaultPlan p;
  p.seed = seed;
  p.rules.push_back(std::move(r));
  return p;
}

TEST(FaultyStoreTest, NthCallFiresExactlyOnce) {
  auto s = Make(OneRule(FaultRule::Nth(FaultOp::kGet, FaultKind::kSlowDown, 2)));
  EXPECT_EQ(s->backend(), "faulty(memory)");
  ASSERT_TRUE(s->Put("k", "v").ok());
  EXPECT_TRUE(s->Get("k").ok());
  auto second = s->Get("k");
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("SlowDown"));
  EXPECT_THAT(second.status().message(), HasSubstr("'k'"));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(s->Get("k").ok());
  EXPECT_EQ(s->stats().injected[static_cast<int>(FaultKind::kSlowDown)], 1);
  EXPECT_EQ(s->stats().calls, 8);
}

// "Full" and "forbidden" are different codes, so callers (a cache tier skips only a full one)
// can be tested against both.
TEST(FaultyStoreTest, FullAndForbiddenTiersHaveTheirOwnCodes) {
  auto full = Make(OneRule(FaultRule::Chance(FaultOp::kPut, FaultKind::kResourceExhausted, 1)));
  const Status f = full->Put("k", "v");
  EXPECT_EQ(f.code(), StatusCode::kResourceExhausted) << f.ToString();
  EXPECT_THAT(f.message(), HasSubstr("disk full"));
  EXPECT_EQ(full->Get("k").status().code(), StatusCode::kNotFound);  // nothing landed
  auto forbidden = Make(OneRule(FaultRule::Chance(FaultOp::kAny, FaultKind::kPermissionDenied, 1)));
  EXPECT_EQ(forbidden->Put("k", "v").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(forbidden->Get("k").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(forbidden->GetRange("k", 0, 1).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(forbidden->Head("k").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(forbidden->List("", "", 10).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(forbidden->Delete("k").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(forbidden->stats().injected[static_cast<int>(FaultKind::kPermissionDenied)], 6);
}

TEST(FaultyStoreTest, ProbabilisticFaultsAreReproducibleFromTheSeed) {
  auto run = [](uint64_t seed) {
    auto s = Make(OneRule(FaultRule::Chance(FaultOp::kAny, FaultKind::kUnavailable, 0.3), seed));
    std::string pattern;
    for (int i = 0; i < 200; ++i) pattern += s->Put("k" + std::to_string(i), "v").ok() ? '.' : 'X';
    return pattern;
  };
  const std::string a = run(42);
  EXPECT_EQ(a, run(42));
  EXPECT_NE(a, run(43));
  const auto failures = std::count(a.begin(), a.end(), 'X');
  EXPECT_GT(failures, 30);
  EXPECT_LT(failures, 90);
}

TEST(FaultyStoreTest, FailedPutsBeforeTheStoreLeaveNothingButAfterTheStoreLand) {
  auto before = Make(OneRule(FaultRule::Nth(FaultOp::kPut, FaultKind::kIoError, 1)));
  EXPECT_EQ(before->Put("k", "v").code(), StatusCode::kIoError);
  EXPECT_EQ(before->inner().Get("k").status().code(), StatusCode::kNotFound);

  FaultRule lost = FaultRule::Nth(FaultOp::kPut, FaultKind::kUnavailable, 1);
  lost.after_inner = true;
  auto after = Make(OneRule(lost));
  EXPECT_EQ(after->Put("k", "v").code(), StatusCode::kUnavailable);
  EXPECT_EQ(*after->inner().Get("k"), "v");  // the lost-response case: it landed anyway
}

TEST(FaultyStoreTest, TruncationFailsLoudlyShortBodyAndBitFlipSilently) {
  const std::string data(1000, 'z');
  auto trunc = Make(OneRule(FaultRule::Nth(FaultOp::kGet, FaultKind::kTruncate, 1)));
  ASSERT_TRUE(trunc->Put("k", data).ok());
  auto t = trunc->Get("k");
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(t.status().message(), HasSubstr("truncated body"));
  EXPECT_THAT(t.status().message(), HasSubstr("of 1000 bytes"));

  auto shortb = Make(OneRule(FaultRule::Nth(FaultOp::kGet, FaultKind::kShortBody, 1)));
  ASSERT_TRUE(shortb->Put("k", data).ok());
  auto sb = shortb->Get("k");
  ASSERT_TRUE(sb.ok());
  EXPECT_LT(sb->size(), data.size());
  EXPECT_EQ(*sb, data.substr(0, sb->size()));

  auto flip = Make(OneRule(FaultRule::Nth(FaultOp::kGetRange, FaultKind::kBitFlip, 1)));
  ASSERT_TRUE(flip->Put("k", data).ok());
  auto f = flip->GetRange("k", 100, 500);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->size(), 500u);
  int bits = 0;
  for (size_t i = 0; i < 500; ++i) bits += __builtin_popcount(static_cast<uint8_t>((*f)[i] ^ 'z'));
  EXPECT_EQ(bits, 1);
  EXPECT_EQ(*flip->Get("k"), data);  // the stored copy is intact
}

TEST(FaultyStoreTest, TornPutsStoreAPrefix) {
  const std::string data(4096, 'p');
  auto torn = Make(OneRule(FaultRule::Nth(FaultOp::kPut, FaultKind::kShortBody, 1)));
  EXPECT_TRUE(torn->Put("k", data).ok());
  auto stored = torn->inner().Get("k");
  ASSERT_TRUE(stored.ok());
  EXPECT_LT(stored->size(), data.size());

  auto reset = Make(OneRule(FaultRule::Nth(FaultOp::kPut, FaultKind::kTruncate, 1)));
  Status s = reset->Put("k", data);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("connection reset"));
}

TEST(FaultyStoreTest, KeyPrefixAndMaxFiresLimitTheRule) {
  FaultRule r = FaultRule::Chance(FaultOp::kAny, FaultKind::kIoError, 1.0);
  r.max_fires = 2;
  r.key_prefix = "bad/";
  auto s = Make(OneRule(r));
  EXPECT_TRUE(s->Put("good/1", "v").ok());
  EXPECT_FALSE(s->Put("bad/1", "v").ok());
  EXPECT_FALSE(s->Head("bad/1").ok());
  EXPECT_TRUE(s->Put("bad/1", "v").ok());  // fired twice already
  EXPECT_TRUE(s->Get("bad/1").ok());
  EXPECT_EQ(s->stats().injected_total(), 2);
}

TEST(FaultyStoreTest, LatencyDelaysAndCombinesWithErrors) {
  FaultPlan p;
  p.rules.push_back(FaultRule::Chance(FaultOp::kList, FaultKind::kLatency, 1.0));
  p.rules.back().latency_ms = 30;
  p.rules.push_back(FaultRule::Nth(FaultOp::kList, FaultKind::kUnavailable, 2));
  auto s = Make(std::move(p));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(s->List("", "", 10).ok());
  EXPECT_EQ(s->List("", "", 10).status().code(), StatusCode::kUnavailable);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_GE(ms, 60);
  EXPECT_EQ(s->stats().injected[static_cast<int>(FaultKind::kLatency)], 2);
}

TEST(FaultyStoreTest, SetPlanResetsRuleCounters) {
  auto s = Make(OneRule(FaultRule::Nth(FaultOp::kDelete, FaultKind::kIoError, 1)));
  EXPECT_FALSE(s->Delete("k").ok());
  EXPECT_TRUE(s->Delete("k").ok());
  s->SetPlan(OneRule(FaultRule::Nth(FaultOp::kDelete, FaultKind::kIoError, 1)));
  EXPECT_FALSE(s->Delete("k").ok());
  s->SetPlan({});
  EXPECT_TRUE(s->Delete("k").ok());
}

}  // namespace
}  // namespace gantry
