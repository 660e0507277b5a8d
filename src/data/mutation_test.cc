// Damaged shards and indexes by the thousand: seeded random byte flips, overwrites and cuts of
// real shards (written by the reference tools) must each parse or fail with one of the
// documented codes, never crash, hang or allocate from a claimed size (run under ASan in the
// asan preset). Deterministic: the seeds are fixed.
#include <gtest/gtest.h>

#include <set>

#include "data/test_util.h"
#include "gantry/common/rng.h"
#include "gantry/data/mds.h"
#include "gantry/data/tar.h"
#include "gantry/data/webdataset.h"

namespace gantry::data {
namespace {

std::string Mutate(std::string bytes, Rng& rng) {
  if (bytes.empty()) return bytes;
  switch (rng.Below(4)) {
    case 0:  // flip a few bits
      for (int i = 0, n = 1 + static_cast<int>(rng.Below(4)); i < n; ++i) {
        bytes[rng.Below(bytes.size())] ^= static_cast<char>(1 << rng.Below(8));
      }
      break;
    case 1:  // cut
      bytes.resize(rng.Below(bytes.size()));
      break;
    case 2: {  // overwrite a run with 0xff or random bytes (huge sizes, negative base-256)
      const size_t at = rng.Below(bytes.size());
      const size_t n = std::min<size_t>(1 + rng.Below(16), bytes.size() - at);
      const bool ff = rng.Below(2) == 0;
      for (size_t i = 0; i < n; ++i) {
        bytes[at + i] = ff ? '\xff' : static_cast<char>(rng.Below(256));
      }
      break;
    }
    default:  // a header-sized block of garbage somewhere on a block boundary
      if (bytes.size() >= 1024) {
        const size_t at = rng.Below(bytes.size() / 512) * 512;
        for (size_t i = 0; i < 512 && at + i < bytes.size(); ++i) {
          bytes[at + i] = static_cast<char>(rng.Below(256));
        }
      }
  }
  return bytes;
}

TEST(Mutation, DamagedTarShardsFailCleanly) {
  auto store = test::OpenDir(test::FixturesDir() + "/wds/tricky");
  const std::string tar = *store->Get("shard-000000.tar");
  const std::set<StatusCode> allowed = {StatusCode::kDataLoss, StatusCode::kInvalidArgument};
  Rng rng(11);
  int failed = 0;
  for (int i = 0; i < 3000; ++i) {
    Result<WdsShard> s = WdsShard::Parse(Mutate(tar, rng), "m.tar", {});
    if (!s.ok()) {
      ++failed;
      EXPECT_TRUE(allowed.count(s.status().code())) << s.status().ToString();
      continue;
    }
    for (const WdsSample& sample : s->samples()) {
      for (const WdsField& f : sample.fields) {
        // Every view lies inside the shard's bytes (ASan checks the reads).
        volatile char sink = f.bytes.empty() ? 0 : f.bytes.back();
        (void)sink;
      }
    }
  }
  EXPECT_GT(failed, 300);  // the mutations do break most headers they hit
}

TEST(Mutation, DamagedGzipShardsFailCleanly) {
  auto store = test::OpenDir(test::FixturesDir() + "/wds/gz");
  const std::string gz = *store->Get("shard-000000.tar.gz");
  Rng rng(12);
  ReadLimits limits;
  limits.max_shard_bytes = 8 << 20;
  for (int i = 0; i < 500; ++i) {
    Result<WdsShard> s = WdsShard::Parse(Mutate(gz, rng), "m.tar.gz", limits);
    if (!s.ok()) {
      const StatusCode c = s.status().code();
      EXPECT_TRUE(c == StatusCode::kDataLoss || c == StatusCode::kInvalidArgument ||
                  c == StatusCode::kResourceExhausted)
          << s.status().ToString();
    }
  }
}

TEST(Mutation, DamagedMdsShardsAndIndexesFailCleanly) {
  auto store = test::OpenDir(test::FixturesDir() + "/mds/plain");
  Result<MdsIndex> index = ReadMdsIndex(*store, "");
  ASSERT_TRUE(index.ok());
  const MdsShardInfo& info = index->shards[0];
  const std::string shard = *store->Get(info.raw.basename);
  Rng rng(13);
  for (int i = 0; i < 3000; ++i) {
    Result<MdsShard> s = MdsShard::Parse(Mutate(shard, rng), info, "m.mds");
    if (!s.ok()) {
      const StatusCode c = s.status().code();
      EXPECT_TRUE(c == StatusCode::kDataLoss || c == StatusCode::kInvalidArgument)
          << s.status().ToString();
      continue;
    }
    for (uint32_t k = 0; k < s->num_samples(); ++k) {
      Result<std::vector<std::string_view>> row = s->Sample(k);
      if (!row.ok()) {
        EXPECT_EQ(row.status().code(), StatusCode::kInvalidArgument);
      }
    }
  }
  const std::string text = *store->Get("index.json");
  for (int i = 0; i < 2000; ++i) {
    Result<MdsIndex> m = ParseMdsIndex(Mutate(text, rng), "index.json");
    if (!m.ok()) {
      const StatusCode c = m.status().code();
      EXPECT_TRUE(c == StatusCode::kInvalidArgument || c == StatusCode::kUnimplemented)
          << m.status().ToString();
    }
  }
}

}  // namespace
}  // namespace gantry::data
