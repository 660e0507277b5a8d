// Compatibility with the reference tools: every dataset under testdata/datasets (written by
// MosaicML Streaming's MDSWriter and WebDataset's TarWriter) reads back exactly as its
// expected.jsonl says: every sample, every field's stored bytes.
#include <gtest/gtest.h>

#include <cstring>

#include "data/codec.h"
#include "data/test_util.h"
#include "gantry/data/mds.h"
#include "gantry/data/webdataset.h"

namespace gantry::data {
namespace {

using nlohmann::json;
using test::Base64Decode;

int64_t LoadI64(std::string_view b) {
  int64_t v = 0;
  std::memcpy(&v, b.data(), 8);  // the fixtures and this host are little-endian
  return v;
}

// Compares one stored column with its expected.jsonl value, by the column's encoding.
void ExpectColumn(const MdsColumn& col, std::string_view got, const json& want,
                  const std::string& at) {
  SCOPED_TRACE(at + " column " + col.name);
  if (col.encoding == "int" || col.encoding == "int64") {
    ASSERT_EQ(got.size(), 8u);
    EXPECT_EQ(LoadI64(got), want.get<int64_t>());
  } else if (col.encoding == "str") {
    EXPECT_EQ(std::string(got), want.get<std::string>());
  } else if (col.encoding == "bytes") {
    EXPECT_EQ(std::string(got), Base64Decode(want.get<std::string>()));
  } else if (col.encoding == "ndarray:float32:16") {
    ASSERT_EQ(got.size(), 64u);
    ASSERT_EQ(want.size(), 16u);
    for (size_t k = 0; k < 16; ++k) {
      float f = 0, w = static_cast<float>(want[k].get<double>());
      std::memcpy(&f, got.data() + 4 * k, 4);
      EXPECT_EQ(std::memcmp(&f, &w, 4), 0) << "element " << k;
    }
  } else if (col.encoding == "jpeg" || col.encoding == "png") {
    EXPECT_EQ(got.size(), want["nbytes"].get<uint64_t>());
    EXPECT_EQ(*internal::HexDigest("sha256", got), want["sha256"].get<std::string>());
  } else {
    ADD_FAILURE() << "no comparison for encoding " << col.encoding;
  }
}

class MdsFixture : public testing::TestWithParam<std::string> {};

TEST_P(MdsFixture, ReadsEverySampleExactly) {
  const std::string dir = test::FixturesDir() + "/mds/" + GetParam();
  auto store = test::OpenDir(dir);
  const std::vector<json> expected = test::ReadJsonl(dir + "/expected.jsonl");
  Result<MdsIndex> index = ReadMdsIndex(*store, "");
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  ASSERT_EQ(index->total_samples, expected.size());
  MdsReadOptions options;
  options.verify_hashes = true;
  size_t global = 0;
  for (const MdsShardInfo& info : index->shards) {
    Result<MdsShard> shard = ReadMdsShard(*store, "", info, options);
    ASSERT_TRUE(shard.ok()) << shard.status().ToString();
    ASSERT_EQ(shard->num_samples(), info.samples);
    for (uint32_t i = 0; i < shard->num_samples(); ++i, ++global) {
      Result<std::vector<std::string_view>> cols = shard->Sample(i);
      ASSERT_TRUE(cols.ok()) << cols.status().ToString();
      const json& want = expected[global];
      ASSERT_EQ(cols->size(), info.columns.size());
      ASSERT_EQ(want.size(), info.columns.size());
      for (size_t c = 0; c < cols->size(); ++c) {
        ExpectColumn(info.columns[c], (*cols)[c], want.at(info.columns[c].name),
                     "sample " + std::to_string(global));
      }
    }
  }
  EXPECT_EQ(global, expected.size());
}

INSTANTIATE_TEST_SUITE_P(All, MdsFixture, testing::Values("plain", "zstd", "hashed", "jpeg"));

TEST(MdsFixtureHashes, HashedDatasetListsSha1AndXxh64) {
  auto store = test::OpenDir(test::FixturesDir() + "/mds/hashed");
  Result<MdsIndex> index = ReadMdsIndex(*store, "");
  ASSERT_TRUE(index.ok());
  for (const MdsShardInfo& s : index->shards) {
    EXPECT_EQ(s.raw.hashes.count("sha1"), 1u);
    EXPECT_EQ(s.raw.hashes.count("xxh64"), 1u);
  }
}

class WdsFixture : public testing::TestWithParam<std::string> {};

TEST_P(WdsFixture, ReadsEverySampleExactly) {
  const std::string dir = test::FixturesDir() + "/wds/" + GetParam();
  auto store = test::OpenDir(dir);
  const std::vector<json> expected = test::ReadJsonl(dir + "/expected.jsonl");
  Result<std::vector<ObjectInfo>> shards = ListWdsShards(*store, "");
  ASSERT_TRUE(shards.ok()) << shards.status().ToString();
  ASSERT_FALSE(shards->empty());
  size_t global = 0;
  for (const ObjectInfo& o : *shards) {
    Result<WdsShard> shard = ReadWdsShard(*store, o.key, {});
    ASSERT_TRUE(shard.ok()) << shard.status().ToString();
    for (size_t i = 0; i < shard->samples().size(); ++i, ++global) {
      ASSERT_LT(global, expected.size());
      const WdsSample& s = shard->samples()[i];
      const json& want = expected[global];
      SCOPED_TRACE(o.key + " sample " + std::to_string(i) + " key " + s.key);
      EXPECT_EQ(want["shard"].get<std::string>(), o.key);
      EXPECT_EQ(want["index"].get<size_t>(), global);
      EXPECT_EQ(s.key, want["key"].get<std::string>());
      std::vector<std::string> members;
      for (const WdsField& f : s.fields) members.push_back(f.member);
      EXPECT_EQ(members, want["members"].get<std::vector<std::string>>());
      ASSERT_EQ(s.fields.size(), want["fields"].size());
      for (const WdsField& f : s.fields) {
        ASSERT_TRUE(want["fields"].contains(f.name)) << f.name;
        const json& wf = want["fields"][f.name];
        EXPECT_EQ(f.bytes.size(), wf["size"].get<uint64_t>()) << f.name;
        EXPECT_EQ(std::string(f.bytes), Base64Decode(wf["b64"].get<std::string>())) << f.name;
      }
    }
  }
  EXPECT_EQ(global, expected.size());
}

INSTANTIATE_TEST_SUITE_P(All, WdsFixture,
                         testing::Values("basic", "images", "tricky", "gz", "ambiguous"));

}  // namespace
}  // namespace gantry::data
