// Datasets on a real S3 endpoint (Ceph RGW started by scripts/test or scripts/rgw):
// GANTRY_S3_ENDPOINT, GANTRY_S3_ACCESS_KEY, GANTRY_S3_SECRET_KEY, GANTRY_S3_BUCKET. Skipped when
// they are unset, except under CI (CI set), where a missing endpoint fails the test.
#include <gtest/gtest.h>

#include <filesystem>

#include "data/test_util.h"
#include "gantry/data/dataset.h"
#include "gantry/data/mds.h"
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
}

}  // namespace
}  // namespace gantry::data
