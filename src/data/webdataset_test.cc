// WebDataset: the writer's shards read back through Gantry and through Python's tarfile,
// grouping as WebDataset's reader groups, the writer refusing samples that would not read back,
// and hostile or damaged shards failing cleanly.
#include "gantry/data/webdataset.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/test_support.h"
#include "data/codec.h"
#include "data/test_util.h"
#include "gantry/common/subprocess.h"
#include "gantry/data/tar.h"

namespace gantry::data {
namespace {

using test_support::TempDir;
using Fields = std::vector<std::pair<std::string, std::string>>;

struct Written {
  std::string key;
  Fields fields;
};

std::vector<Written> Samples(int n) {
  std::vector<Written> out;
  for (int i = 0; i < n; ++i) {
    char key[64];
    std::snprintf(key, sizeof(key), "part.%d/sample%05d", i % 3, i);
    Fields f = {{"cls", std::to_string(i % 10)},
                {"seg.png", std::string(static_cast<size_t>(i % 700), static_cast<char>(i))},
                {"txt", i % 7 == 0 ? "" : "text ünïcødé " + std::to_string(i)}};
    out.push_back({key, f});
  }
  out.push_back({"unicode/日本語/" + std::string(130, 'k'), {{"bin", std::string(3, '\0')}}});
  return out;
}

std::vector<Written> ReadBack(ObjectStore& store, const std::vector<std::string>& shards) {
  std::vector<Written> out;
  for (const std::string& key : shards) {
    Result<WdsShard> shard = ReadWdsShard(store, key, {});
    EXPECT_TRUE(shard.ok()) << shard.status().ToString();
    if (!shard.ok()) break;
    for (const WdsSample& s : shard->samples()) {
      Written w{s.key, {}};
      for (const WdsField& f : s.fields) {
        EXPECT_EQ(f.member, s.key + "." + f.name);
        w.fields.emplace_back(f.name, std::string(f.bytes));
      }
      out.push_back(std::move(w));
    }
  }
  return out;
}

bool operator==(const Written& a, const Written& b) {
  return a.key == b.key && a.fields == b.fields;
}

class WdsRoundTrip : public testing::TestWithParam<std::string> {};

TEST_P(WdsRoundTrip, WriterShardsReadBackThroughGantryAndPythonTarfile) {
  TempDir dir("gantry-wds");
  auto store = test::OpenDir(dir.path(), true);
  WdsWriterOptions o;
  o.prefix = "train/";
  o.pattern = GetParam();
  o.max_samples = 40;
  auto w = WdsWriter::Create(*store, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const auto samples = Samples(101);
  for (const Written& s : samples) ASSERT_TRUE((*w)->Write(s.key, s.fields).ok()) << s.key;
  ASSERT_TRUE((*w)->Finish().ok());
  const std::vector<std::string>& shards = (*w)->shards_written();
  ASSERT_EQ(shards.size(), 3u);  // 40 + 40 + 22
  Result<std::vector<ObjectInfo>> listed = ListWdsShards(*store, "train/");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 3u);
  EXPECT_EQ(ReadBack(*store, shards), samples);

  // Python's tarfile sees the same members and bytes, in the same order.
  const std::string code =
      "import json,sys,tarfile\n"
      "out=[]\n"
      "for p in sys.argv[1:]:\n"
      "  with tarfile.open(p) as t:\n"
      "    out += [[m.name, t.extractfile(m).read().hex()] for m in t if m.isfile()]\n"
      "print(json.dumps(out))\n";
  std::vector<std::string> argv = {"/usr/bin/python3", "-c", code};
  for (const std::string& s : shards) argv.push_back(dir.sub(s));
  Result<std::string> out = RunAndCapture(argv);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const nlohmann::json got = nlohmann::json::parse(*out);
  size_t m = 0;
  for (const Written& s : samples) {
    for (const auto& [field, bytes] : s.fields) {
      ASSERT_LT(m, got.size());
      EXPECT_EQ(got[m][0].get<std::string>(), s.key + "." + field);
      std::string hex;
      for (unsigned char c : bytes) {
        char b[3];
        std::snprintf(b, sizeof(b), "%02x", c);
        hex += b;
      }
      EXPECT_EQ(got[m][1].get<std::string>(), hex);
      ++m;
    }
  }
  EXPECT_EQ(m, got.size());
}

INSTANTIATE_TEST_SUITE_P(Patterns, WdsRoundTrip,
                         testing::Values("shard-%06d.tar", "shard-%06d.tar.gz"));

TEST(WdsWriter, SplitsShardsBySize) {
  TempDir dir("gantry-wds");
  auto store = test::OpenDir(dir.path(), true);
  WdsWriterOptions o;
  o.max_samples = 0;
  o.max_bytes = 64 * 1024;
  auto w = WdsWriter::Create(*store, o);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE((*w)->Write("s" + std::to_string(i), {{"bin", std::string(10000, 'x')}}).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
  EXPECT_GT((*w)->shards_written().size(), 3u);
  for (const std::string& s : (*w)->shards_written()) {
    EXPECT_LE(store->Head(s)->size, 64u * 1024 + 10240) << s;  // plus the end blocks' record
  }
}

TEST(WdsWriter, RefusesSamplesThatWouldNotReadBackAsWritten) {
  TempDir dir("gantry-wds");
  auto store = test::OpenDir(dir.path(), true);
  auto w = WdsWriter::Create(*store, {});
  ASSERT_TRUE(w.ok());
  const Fields one = {{"txt", "x"}};
  EXPECT_EQ((*w)->Write("", one).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*w)->Write("a/b.c", one).code(), StatusCode::kInvalidArgument);  // splits at '.'
  EXPECT_EQ((*w)->Write("dir/", one).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*w)->Write("__meta__", one).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*w)->Write("k", {{"TXT", "x"}}).code(), StatusCode::kInvalidArgument);  // read as txt
  EXPECT_EQ((*w)->Write("k", {{"txt", "x"}, {"txt", "y"}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*w)->Write("k", {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*w)->Write("../k", one).code(), StatusCode::kInvalidArgument);  // unsafe member name
  ASSERT_TRUE((*w)->Write("k", one).ok());
  EXPECT_EQ((*w)->Write("k", one).code(), StatusCode::kInvalidArgument);  // would merge
  for (const char* pattern : {"shard-%s.tar", "shard-%06d.zip", "shard-%d-%d.tar", "shard.tar"}) {
    WdsWriterOptions o;
    o.pattern = pattern;
    EXPECT_EQ(WdsWriter::Create(*store, o).status().code(), StatusCode::kInvalidArgument)
        << pattern;
  }
}

TEST(WdsGrouping, SplitsNamesAsWebDatasetDoes) {
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(SplitWdsName("a/b.c/d.seg.png"), P("a/b.c/d", "seg.png"));
  EXPECT_EQ(SplitWdsName("UP.TXT"), P("UP", "txt"));
  EXPECT_EQ(SplitWdsName("a/b.c.txt"), P("a/b", "c.txt"));
  EXPECT_EQ(SplitWdsName("noext"), P("", ""));
  EXPECT_EQ(SplitWdsName("dir/.hidden"), P("", ""));
  EXPECT_EQ(SplitWdsName("dir.x/noext"), P("", ""));
}

TEST(WdsGrouping, SkipsMetadataDirectoriesAndNamesWithoutExtension) {
  TarWriter t;
  ASSERT_TRUE(t.Add("__meta__", "m").ok());
  ASSERT_TRUE(t.Add("README", "r").ok());
  ASSERT_TRUE(t.Add("a.txt", "1").ok());
  ASSERT_TRUE(t.Add("a.cls", "2").ok());
  ASSERT_TRUE(t.Add("b.txt", "3").ok());
  Result<WdsShard> s = WdsShard::Parse(t.Finish(), "x.tar", {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->samples().size(), 2u);
  EXPECT_EQ(s->samples()[0].key, "a");
  EXPECT_EQ(s->samples()[0].fields.size(), 2u);
  EXPECT_EQ(s->samples()[1].Find("txt")->bytes, "3");
  EXPECT_EQ(s->samples()[1].Find("cls"), nullptr);
}

TEST(WdsHostile, RepeatedFieldInOneSampleIsInvalidArgumentNamingShardAndOffset) {
  TarWriter t;
  ASSERT_TRUE(t.Add("a.txt", "1").ok());
  ASSERT_TRUE(t.Add("a.TXT", "2").ok());  // lower-cases to the same field
  Result<WdsShard> s = WdsShard::Parse(t.Finish(), "dup.tar", {});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("dup.tar: offset 1024"), std::string::npos)
      << s.status().message();
}

TEST(WdsHostile, GzipBombStopsAtTheLimit) {
  TarWriter t;
  ASSERT_TRUE(t.Add("a.bin", std::string(8 << 20, '\0')).ok());
  Result<std::string> gz = internal::Gzip(t.Finish(), 9);
  ASSERT_TRUE(gz.ok());
  ASSERT_LT(gz->size(), 100u * 1024);
  ReadLimits limits;
  limits.max_shard_bytes = 1 << 20;
  Result<WdsShard> s = WdsShard::Parse(*gz, "bomb.tar.gz", limits);
  EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted);
  // A damaged gzip stream is DataLoss.
  std::string bad = *gz;
  bad[bad.size() / 2] ^= 0x55;
  EXPECT_EQ(WdsShard::Parse(bad, "bad.tar.gz", {}).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(WdsShard::Parse(gz->substr(0, gz->size() - 9), "cut.tar.gz", {}).status().code(),
            StatusCode::kDataLoss);
}

TEST(WdsHostile, ShardLargerThanTheLimitIsRefusedBeforeItIsFetched) {
  TempDir dir("gantry-wds");
  auto store = test::OpenDir(dir.path(), true);
  TarWriter t;
  ASSERT_TRUE(t.Add("a.bin", std::string(100000, 'x')).ok());
  ASSERT_TRUE(store->Put("big.tar", t.Finish()).ok());
  ReadLimits limits;
  limits.max_shard_bytes = 50000;
  EXPECT_EQ(ReadWdsShard(*store, "big.tar", limits).status().code(),
            StatusCode::kResourceExhausted);
  Result<WdsShard> missing = ReadWdsShard(*store, "nope.tar", {});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.tar"), std::string::npos);
}

TEST(WdsHostile, TruncatedShardIsDataLoss) {
  TarWriter t;
  ASSERT_TRUE(t.Add("a.bin", std::string(5000, 'x')).ok());
  const std::string tar = t.Finish();
  EXPECT_EQ(WdsShard::Parse(tar.substr(0, 3000), "cut.tar", {}).status().code(),
            StatusCode::kDataLoss);
}

TEST(WdsHostile, MovedShardKeepsItsViewsValid) {
  TarWriter t;
  ASSERT_TRUE(t.Add("a.txt", "hello").ok());
  Result<WdsShard> s = WdsShard::Parse(t.Finish(), "m.tar", {});
  ASSERT_TRUE(s.ok());
  WdsShard moved = std::move(*s);
  std::vector<WdsShard> many;
  many.push_back(std::move(moved));
  many.reserve(64);  // reallocates
  EXPECT_EQ(many[0].samples()[0].fields[0].bytes, "hello");
}

}  // namespace
}  // namespace gantry::data
