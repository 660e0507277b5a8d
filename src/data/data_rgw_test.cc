// Datasets on a real S3 endpoint (Ceph RGW started by scripts/test or scripts/rgw):
// GANTRY_S3_ENDPOINT, GANTRY_S3_ACCESS_KEY, GANTRY_S3_SECRET_KEY, GANTRY_S3_BUCKET. Skipped when
// they are unset, except under CI (CI set), where a missing endpoint fails the test.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/test_support.h"
#include "data/test_util.h"
#include "gantry/data/dataset.h"
#include "gantry/data/loader.h"
#include "gantry/data/mds.h"
#include "gantry/data/stage.h"
#include "storage/rgw_test_env.h"

namespace gantry::data {
namespace {

class DataRgwTest : public testing::Test {
 protected:
  void SetUp() override {
    GANTRY_REQUIRE_RGW(rgw);
    options_ = rgw->Options();
    url_ = rgw->UniqueUrl("datatest");
  }

  // Uploads a fixture folder under url_/name, returning its URL.
  std::string Upload(const std::string& fixture, const std::string& name) {
    auto store = OpenObjectStore(url_ + "/" + name, options_);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    for (const auto& e : std::filesystem::directory_iterator(test::FixturesDir() + "/" + fixture)) {
      EXPECT_TRUE((*store)->PutFile(e.path().filename().string(), e.path().string()).ok());
    }
    return url_ + "/" + name;
  }

  StoreOptions options_;
  std::string url_;
};

TEST_F(DataRgwTest, FixturesVerifyAndReadFromS3) {
  const std::string mds = Upload("mds/zstd", "mds");
  Result<DatasetLocation> loc = LocateDataset(mds, options_);
  ASSERT_TRUE(loc.ok()) << loc.status().ToString();
  ASSERT_EQ(loc->format, DatasetFormat::kMds);
  Result<VerifyReport> r = VerifyDataset(*loc, {}, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ok());
  EXPECT_EQ(r->samples, 2000u);

  const std::string wds = Upload("wds/gz", "wds");
  loc = LocateDataset(wds, options_);
  ASSERT_TRUE(loc.ok()) << loc.status().ToString();
  ASSERT_EQ(loc->format, DatasetFormat::kWebDataset);
  r = VerifyDataset(*loc, {}, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ok());
  EXPECT_EQ(r->samples, 300u);
  // A missing shard is NotFound naming it.
  ASSERT_TRUE(loc->store->Delete("shard-000001.tar.gz").ok());
  Result<WdsShard> gone = ReadWdsShard(*loc->store, "shard-000001.tar.gz", {});
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_NE(gone.status().message().find("shard-000001.tar.gz"), std::string::npos);
}

TEST_F(DataRgwTest, PackFromS3FilesToS3MdsAndVerify) {
  auto in = OpenObjectStore(url_ + "/in", options_);
  ASSERT_TRUE(in.ok());
  for (int i = 0; i < 30; ++i) {
    const std::string key = "cats/img" + std::to_string(1000 + i);
    ASSERT_TRUE((*in)->Put(key + ".jpg", std::string(100 + i, static_cast<char>(i))).ok());
    ASSERT_TRUE((*in)->Put(key + ".cls", std::to_string(i % 4)).ok());
  }
  PackOptions o;
  o.input = url_ + "/in";
  o.format = DatasetFormat::kMds;
  o.compression = "zstd";
  o.hashes = {"xxh64", "sha256"};
  o.shard_bytes = 2048;
  Result<PackReport> p = PackDataset(o, url_ + "/packed", options_, nullptr);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->samples, 30u);
  EXPECT_GT(p->shards.size(), 2u);
  Result<DatasetLocation> loc = LocateDataset(url_ + "/packed", options_);
  ASSERT_TRUE(loc.ok());
  Result<VerifyReport> r = VerifyDataset(*loc, {}, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ok());
  EXPECT_EQ(r->samples, 30u);
  EXPECT_EQ(r->hashes_checked, 4 * (p->shards.size() - 1));  // 2 digests x 2 files per shard
  Result<MdsIndex> index = ReadMdsIndex(*loc->store, "");
  ASSERT_TRUE(index.ok());
  Result<MdsShard> first = ReadMdsShard(*loc->store, "", index->shards[0], {});
  ASSERT_TRUE(first.ok());
  auto row = first->Sample(0);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ((*row)[0], "cats/img1000");  // __key__, cls, jpg
  EXPECT_EQ((*row)[1], "0");
  EXPECT_EQ((*row)[2], std::string(100, '\0'));
  // Packed again over it: refused (the files are created only where absent, If-None-Match),
  // then replaced on request, the old shards past the new count removed.
  EXPECT_EQ(PackDataset(o, url_ + "/packed", options_, nullptr).status().code(),
            StatusCode::kAlreadyExists);
  o.overwrite = true;
  o.shard_bytes = 1 << 20;
  Result<PackReport> again = PackDataset(o, url_ + "/packed", options_, nullptr);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->removed.size(), p->shards.size() - 2);  // all but shard 0 and index.json
  Result<std::vector<ObjectInfo>> left = loc->store->ListAll("");
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(left->size(), 2u);
}

// Staging from S3 (credentials as the loader takes them) fills the node's cache so that the
// loader reads nothing from S3 afterwards: for MDS, even with the shard objects deleted.
TEST_F(DataRgwTest, StagedFromS3IsReadFromTheCacheAlone) {
  test_support::TempDir tmp;
  for (const std::string fixture : {"mds/zstd", "wds/gz"}) {
    SCOPED_TRACE(fixture);
    const std::string url = Upload(fixture, fixture == "mds/zstd" ? "stage-mds" : "stage-wds");
    StageOptions o;
    o.cache.dir = tmp.path() + "/cache";
    o.store_options = options_;
    Result<StageProgress> staged = StageDataset(url, o);
    ASSERT_TRUE(staged.ok()) << staged.status().ToString();
    EXPECT_GT(staged->shards_total, 0u);
    EXPECT_EQ(staged->shards_done, staged->shards_total);
    EXPECT_EQ(staged->bytes_fetched, staged->bytes_total);
    Result<StageProgress> again = StageDataset(url, o);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->bytes_fetched, 0u);

    // The job names the dataset with a trailing slash: the copy staged under the other
    // spelling is still the one it reads (the MDS shards are gone from the bucket below).
    Result<DatasetLocation> loc = LocateDataset(url + "/", options_);
    ASSERT_TRUE(loc.ok());
    if (loc->format == DatasetFormat::kMds) {
      auto listed = loc->store->List("shard", "", 1000);
      ASSERT_TRUE(listed.ok());
      for (const ObjectInfo& info : listed->objects) ASSERT_TRUE(loc->store->Delete(info.key).ok());
    }
    MetricsRegistry registry;
    ShardSourceOptions so;
    so.metrics = &registry;
    so.cache.dir = o.cache.dir;
    so.store_options = options_;
    auto source = OpenShardSource(std::move(*loc), so);
    ASSERT_TRUE(source.ok()) << source.status().ToString();
    auto order = EpochOrder::Create((*source)->shard_samples(), {.shuffle = false}, 0);
    auto it = SampleIterator::Create(**source, *order, {}, 0);
    ASSERT_TRUE(it.ok());
    Sample sample;
    uint64_t n = 0;
    while (true) {
      auto more = it->Next(sample);
      ASSERT_TRUE(more.ok()) << more.status().ToString();
      if (!*more) break;
      ++n;
    }
    EXPECT_EQ(n, fixture == "mds/zstd" ? 2000u : 300u);
    const DataStats st = (*source)->metrics()->Snapshot();
    EXPECT_EQ(st.bytes_durable, 0u);
    EXPECT_GE(st.bytes_cache, staged->bytes_total);
  }
}

}  // namespace
}  // namespace gantry::data
