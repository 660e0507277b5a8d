// MDS: Gantry's writer reproduces MDSWriter's files byte for byte, zstd shards round trip, and
// damaged or hostile indexes and shards fail cleanly with the agreed codes.
#include "gantry/data/mds.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/test_support.h"
#include "data/test_util.h"

namespace gantry::data {
namespace {

using test_support::TempDir;

// Every sample of a fixture dataset as column name -> stored bytes.
std::vector<std::map<std::string, std::string>> ReadAll(ObjectStore& store, const MdsIndex& index) {
  std::vector<std::map<std::string, std::string>> out;
  for (const MdsShardInfo& info : index.shards) {
    Result<MdsShard> shard = ReadMdsShard(store, "", info, {});
    EXPECT_TRUE(shard.ok()) << shard.status().ToString();
    if (!shard.ok()) return out;
    for (uint32_t i = 0; i < shard->num_samples(); ++i) {
      auto cols = shard->Sample(i);
      EXPECT_TRUE(cols.ok());
      std::map<std::string, std::string> row;
      for (size_t c = 0; c < info.columns.size(); ++c) {
        row[info.columns[c].name] = std::string((*cols)[c]);
      }
      out.push_back(std::move(row));
    }
  }
  return out;
}

class MdsRewrite : public testing::TestWithParam<std::string> {};

// Writing the fixture's samples with the fixture's settings gives MDSWriter's exact files: the
// shard boundaries, headers, index.json text and hashes.
TEST_P(MdsRewrite, ReproducesMdsWriterByteForByte) {
  const std::string src = test::FixturesDir() + "/mds/" + GetParam();
  auto in = test::OpenDir(src);
  Result<MdsIndex> index = ReadMdsIndex(*in, "");
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  const auto rows = ReadAll(*in, *index);
  TempDir out("gantry-mds");
  auto store = test::OpenDir(out.path(), true);
  MdsWriterOptions o;
  for (const MdsColumn& c : index->shards[0].columns) o.columns[c.name] = c.encoding;
  o.hashes = index->shards[0].hashes;
  o.size_limit = index->shards[0].size_limit;
  Result<std::unique_ptr<MdsWriter>> w = MdsWriter::Create(*store, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (const auto& row : rows) ASSERT_TRUE((*w)->Write(row).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(src)) {
    const std::string name = e.path().filename();
    if (name == "expected.jsonl") continue;
    Result<std::string> want = in->Get(name);
    Result<std::string> got = store->Get(name);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status().ToString();
    EXPECT_TRUE(*got == *want) << name << " differs";
    ++files;
  }
  EXPECT_EQ(files, index->shards.size() + 1);
}

INSTANTIATE_TEST_SUITE_P(All, MdsRewrite, testing::Values("plain", "hashed", "jpeg"));

TEST(MdsWriter, ZstdShardsRoundTripWithHashesOnBothFiles) {
  const std::string src = test::FixturesDir() + "/mds/zstd";
  auto in = test::OpenDir(src);
  Result<MdsIndex> index = ReadMdsIndex(*in, "");
  ASSERT_TRUE(index.ok());
  const auto rows = ReadAll(*in, *index);
  TempDir out("gantry-mds");
  auto store = test::OpenDir(out.path(), true);
  MdsWriterOptions o;
  for (const MdsColumn& c : index->shards[0].columns) o.columns[c.name] = c.encoding;
  o.compression = "zstd";
  o.size_limit = 200000;
  auto w = MdsWriter::Create(*store, o);
  ASSERT_TRUE(w.ok());
  for (const auto& row : rows) ASSERT_TRUE((*w)->Write(row).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  Result<MdsIndex> back = ReadMdsIndex(*store, "");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  // Same settings, same shards as MDSWriter's zstd fixture once decompressed (the compressed
  // bytes depend on the zstd version: 1.5.2 wrote the fixture).
  ASSERT_EQ(back->shards.size(), index->shards.size());
  for (size_t i = 0; i < back->shards.size(); ++i) {
    EXPECT_EQ(back->shards[i].raw.bytes, index->shards[i].raw.bytes);
    EXPECT_EQ(back->shards[i].stored().basename, index->shards[i].stored().basename);
    Result<MdsShard> ours = ReadMdsShard(*store, "", back->shards[i], {});
    Result<MdsShard> theirs = ReadMdsShard(*in, "", index->shards[i], {});
    ASSERT_TRUE(ours.ok() && theirs.ok());
    for (uint32_t k = 0; k < ours->num_samples(); ++k) {
      ASSERT_EQ(*ours->Sample(k), *theirs->Sample(k));
    }
  }

  // With a level and hashes: both the compressed and the raw file carry every digest, and a
  // verified read checks them.
  TempDir out2("gantry-mds");
  auto store2 = test::OpenDir(out2.path(), true);
  o.compression = "zstd:5";
  o.hashes = {"sha256", "xxh3_64"};
  w = MdsWriter::Create(*store2, o);
  ASSERT_TRUE(w.ok());
  for (const auto& row : rows) ASSERT_TRUE((*w)->Write(row).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  back = ReadMdsIndex(*store2, "");
  ASSERT_TRUE(back.ok());
  MdsReadOptions ro;
  ro.verify_hashes = true;
  size_t k = 0;
  for (const MdsShardInfo& info : back->shards) {
    EXPECT_EQ(info.zip->hashes.size(), 2u);
    EXPECT_EQ(info.raw.hashes.size(), 2u);
    Result<MdsShard> shard = ReadMdsShard(*store2, "", info, ro);
    ASSERT_TRUE(shard.ok()) << shard.status().ToString();
    for (uint32_t i = 0; i < shard->num_samples(); ++i, ++k) {
      auto cols = shard->Sample(i);
      ASSERT_TRUE(cols.ok());
      for (size_t c = 0; c < info.columns.size(); ++c) {
        ASSERT_EQ(std::string((*cols)[c]), rows[k].at(info.columns[c].name));
      }
    }
  }
  EXPECT_EQ(k, rows.size());
}

TEST(MdsWriter, RefusesWhatItCannotWrite) {
  TempDir dir("gantry-mds");
  auto store = test::OpenDir(dir.path(), true);
  EXPECT_EQ(MdsWriter::Create(*store, {}).status().code(), StatusCode::kInvalidArgument);
  MdsWriterOptions o;
  o.columns = {{"a", "nosuch"}};
  EXPECT_EQ(MdsWriter::Create(*store, o).status().code(), StatusCode::kInvalidArgument);
  o.columns = {{"a", "int"}};
  o.compression = "br";
  EXPECT_EQ(MdsWriter::Create(*store, o).status().code(), StatusCode::kInvalidArgument);
  o.compression = "";
  o.hashes = {"crc99"};
  EXPECT_EQ(MdsWriter::Create(*store, o).status().code(), StatusCode::kInvalidArgument);
  o.hashes = {};
  auto w = MdsWriter::Create(*store, o);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)->Write({{"a", "1234567"}}).code(), StatusCode::kInvalidArgument);  // 7 != 8
  EXPECT_EQ((*w)->Write({}).code(), StatusCode::kInvalidArgument);                  // missing
  EXPECT_EQ((*w)->Write({{"a", "12345678"}, {"b", ""}}).code(), StatusCode::kInvalidArgument);
}

TEST(MdsEncodings, FixedAndVariableSizes) {
  EXPECT_EQ(*MdsEncodingSize("int"), 8u);
  EXPECT_EQ(*MdsEncodingSize("uint16"), 2u);
  EXPECT_EQ(*MdsEncodingSize("ndarray:float32:16"), 64u);
  EXPECT_EQ(*MdsEncodingSize("ndarray:uint8:3,4"), 12u);
  EXPECT_FALSE(MdsEncodingSize("ndarray:float32")->has_value());
  EXPECT_FALSE(MdsEncodingSize("jpeg")->has_value());
  EXPECT_FALSE(MdsEncodingSize("str")->has_value());
  EXPECT_FALSE(MdsEncodingSize("ndarray:int:4").ok());
  EXPECT_FALSE(MdsEncodingSize("ndarray:uint8:0").ok());
  EXPECT_FALSE(MdsEncodingSize("ndarray:uint8:99999,99999,99999").ok());
  EXPECT_FALSE(MdsEncodingSize("float128").ok());
}

// ---- hostile and damaged inputs ------------------------------------------------------------

// A copy of a fixture dataset in a temp dir, to damage.
class MdsDamage : public testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::copy(test::FixturesDir() + "/mds/" + Dataset(), dir_.sub("d"));
    for (const auto& e : std::filesystem::directory_iterator(dir_.sub("d"))) {
      std::filesystem::permissions(e.path(), std::filesystem::perms::owner_write,
                                   std::filesystem::perm_options::add);
    }
    store_ = test::OpenDir(dir_.sub("d"));
  }
  virtual std::string Dataset() const { return "hashed"; }
  nlohmann::json Index() { return nlohmann::json::parse(*store_->Get("index.json")); }
  void PutIndex(const nlohmann::json& j) { ASSERT_TRUE(store_->Put("index.json", j.dump()).ok()); }
  Status ReadShard(size_t i, bool verify) {
    Result<MdsIndex> index = ReadMdsIndex(*store_, "");
    if (!index.ok()) return index.status();
    MdsReadOptions o;
    o.verify_hashes = verify;
    Result<MdsShard> s = ReadMdsShard(*store_, "", index->shards.at(i), o);
    return s.ok() ? s->CheckAllSamples() : s.status();
  }

  TempDir dir_{"gantry-mds"};
  std::unique_ptr<ObjectStore> store_;
};

TEST_F(MdsDamage, FlippedByteIsDataLossNamingTheShardWhenHashesAreChecked) {
  std::string shard = *store_->Get("shard.00003.mds");
  shard[shard.size() - 10] ^= 0x40;  // inside a sample's bytes: the layout still parses
  ASSERT_TRUE(store_->Put("shard.00003.mds", shard).ok());
  EXPECT_TRUE(ReadShard(3, /*verify=*/false).ok());
  Status s = ReadShard(3, /*verify=*/true);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("shard.00003.mds"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("hash mismatch"), std::string::npos) << s.message();
}

TEST_F(MdsDamage, MissingShardIsNotFoundNamingIt) {
  ASSERT_TRUE(store_->Delete("shard.00002.mds").ok());
  Status s = ReadShard(2, false);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("shard.00002.mds"), std::string::npos) << s.message();
}

TEST_F(MdsDamage, TruncatedShardIsDataLoss) {
  std::string shard = *store_->Get("shard.00001.mds");
  ASSERT_TRUE(store_->Put("shard.00001.mds", shard.substr(0, shard.size() / 2)).ok());
  Status s = ReadShard(1, false);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("cut short"), std::string::npos) << s.message();
  // The index agreeing with the short size does not help: the offsets point past the end.
  nlohmann::json j = Index();
  j["shards"][1]["raw_data"]["bytes"] = shard.size() / 2;
  j["shards"][1]["raw_data"]["hashes"] = nlohmann::json::object();
  PutIndex(j);
  s = ReadShard(1, false);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
}

TEST_F(MdsDamage, ShardLargerThanTheIndexSaysIsDataLossWithoutBeingRead) {
  std::string shard = *store_->Get("shard.00005.mds");
  ASSERT_TRUE(store_->Put("shard.00005.mds", shard + std::string(1 << 20, 'x')).ok());
  Status s = ReadShard(5, false);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("shard.00005.mds"), std::string::npos) << s.message();
}

TEST_F(MdsDamage, IndexClaimingTwoToTheFortySamplesIsRefused) {
  nlohmann::json j = Index();
  j["shards"][0]["samples"] = uint64_t{1} << 40;
  j["shards"][0]["raw_data"]["bytes"] = uint64_t{1} << 45;
  PutIndex(j);
  Result<MdsIndex> index = ReadMdsIndex(*store_, "");
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(index.status().message().find("shards[0]"), std::string::npos);
}

TEST_F(MdsDamage, ShardHeaderClaimingBillionsOfSamplesAllocatesNothing) {
  // The index and the header agree on 2^32 - 2 samples in a file of a few KiB: refused before
  // anything is sized from the count.
  std::string shard = *store_->Get("shard.00000.mds");
  const uint32_t n = 0xfffffffe;
  std::memcpy(shard.data(), &n, 4);
  MdsShardInfo info;
  info.columns = {{"a", "int", 8}};
  info.samples = n;
  Result<MdsShard> s = MdsShard::Parse(shard, info, "x.mds");
  EXPECT_EQ(s.status().code(), StatusCode::kDataLoss);
}

TEST_F(MdsDamage, EscapingBasenameIsInvalidArgument) {
  nlohmann::json j = Index();
  j["shards"][0]["raw_data"]["basename"] = "../../etc/passwd";
  PutIndex(j);
  Result<MdsIndex> index = ReadMdsIndex(*store_, "");
  EXPECT_EQ(index.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(MdsDamage, MalformedIndexesAreInvalidArgumentNamingTheFile) {
  nlohmann::json j = Index();
  for (const std::string& text :
       {std::string("{not json"), std::string("[]"), std::string(R"({"version": 1, "shards": []})"),
        std::string(R"({"version": 2, "shards": [{"format": "mds"}]})"),
        std::string(R"({"version": 2, "shards": {}})")}) {
    ASSERT_TRUE(store_->Put("index.json", text).ok());
    Result<MdsIndex> index = ReadMdsIndex(*store_, "");
    ASSERT_FALSE(index.ok()) << text;
    EXPECT_EQ(index.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(index.status().message().find("index.json"), std::string::npos);
  }
  j["shards"][0]["column_sizes"][1] = -8;
  PutIndex(j);
  EXPECT_EQ(ReadMdsIndex(*store_, "").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(MdsDamage, OffsetsGoingBackwardsAndSizesNotAddingUpAreInvalidArgument) {
  std::string shard = *store_->Get("shard.00000.mds");
  std::string backwards = shard;
  const uint32_t zero = 0;
  std::memcpy(backwards.data() + 4 + 4 * 5, &zero, 4);
  ASSERT_TRUE(store_->Put("shard.00000.mds", backwards).ok());
  EXPECT_EQ(ReadShard(0, false).code(), StatusCode::kInvalidArgument);
  // The first sample's first variable size made huge: its columns no longer fit.
  std::string sizes = shard;
  uint32_t first = 0;
  std::memcpy(&first, sizes.data() + 4, 4);
  const uint32_t big = 0x7fffffff;
  std::memcpy(sizes.data() + first, &big, 4);
  ASSERT_TRUE(store_->Put("shard.00000.mds", sizes).ok());
  Status s = ReadShard(0, false);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("offset " + std::to_string(first)), std::string::npos) << s.message();
}

class MdsZstdDamage : public MdsDamage {
  std::string Dataset() const override { return "zstd"; }
};

TEST_F(MdsZstdDamage, BadOrOversizedZstdIsDataLossAndUnknownCompressionUnimplemented) {
  std::string z = *store_->Get("shard.00000.mds.zstd");
  std::string cut = z.substr(0, z.size() - 100);
  ASSERT_TRUE(store_->Put("shard.00000.mds.zstd", cut).ok());
  nlohmann::json j = Index();
  j["shards"][0]["zip_data"]["bytes"] = cut.size();
  PutIndex(j);
  EXPECT_EQ(ReadShard(0, false).code(), StatusCode::kDataLoss);
  // A frame that decompresses to more than the index says: a bomb is stopped at the bound.
  ASSERT_TRUE(store_->Put("shard.00000.mds.zstd", z).ok());
  j["shards"][0]["zip_data"]["bytes"] = z.size();
  j["shards"][0]["raw_data"]["bytes"] = 5000;
  PutIndex(j);
  EXPECT_EQ(ReadShard(0, false).code(), StatusCode::kDataLoss);
  j["shards"][0]["raw_data"]["bytes"] = 199706;
  j["shards"][0]["compression"] = "br";
  PutIndex(j);
  EXPECT_EQ(ReadShard(0, false).code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace gantry::data
