#include "gantry/ckpt/catalog.h"

#include <gtest/gtest.h>

#include <map>
#include <span>
#include <vector>

#include "gantry/ckpt/checkpoint.h"
#include "gantry/ckpt/env_options.h"
#include "gantry/ckpt/manifest.h"
#include "gantry/storage/memory_store.h"

namespace gantry::ckpt {
namespace {

TEST(CheckpointKeyTest, ParsesTheLayoutAndNothingElse) {
  auto part = ParseCheckpointKey(PartKey("llama", 1200, 3));
  ASSERT_TRUE(part.has_value());
  EXPECT_EQ(part->kind, CheckpointKey::Kind::kPart);
  EXPECT_EQ(part->job, "llama");
  EXPECT_EQ(part->step, 1200);
  EXPECT_EQ(part->rank, 3);

  auto manifest = ParseCheckpointKey(ManifestKey("llama", 7));
  ASSERT_TRUE(manifest.has_value());
  EXPECT_EQ(manifest->kind, CheckpointKey::Kind::kManifest);
  EXPECT_EQ(manifest->step, 7);

  auto latest = ParseCheckpointKey(LatestKey("llama"));
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->kind, CheckpointKey::Kind::kLatest);
  EXPECT_EQ(latest->job, "llama");

  auto other = ParseCheckpointKey(StepPrefix("j", 5) + "notes.txt");
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->kind, CheckpointKey::Kind::kOtherInStep);

  for (const char* bad : {"chunks/ab/cd", "ckpt/", "ckpt//latest", "ckpt/j/12/manifest.json",
                          "ckpt/j/00000000001x/manifest.json", "ckpt/j", "manifests/x"}) {
    EXPECT_FALSE(ParseCheckpointKey(bad).has_value()) << bad;
  }
}

TEST(CheckpointKeyTest, StepNumbers) {
  EXPECT_EQ(*ParseStepNumber("0"), 0);
  EXPECT_EQ(*ParseStepNumber("1200"), 1200);
  for (const char* bad : {"", "-1", "latest", "1e3", "1234567890123456789"}) {
    EXPECT_EQ(ParseStepNumber(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

class CatalogTest : public testing::Test {
 protected:
  void SetUp() override {
    // A name of its own per run: named memory stores live as long as the process, so under
    // --gtest_repeat a fixed name would find the previous run's checkpoints.
    static int runs = 0;
    name_ = std::string("catalog-") +
            testing::UnitTest::GetInstance()->current_test_info()->name() + "-" +
            std::to_string(++runs);
    store_ = OpenMemoryStore(name_);
  }

  void SaveSteps(const std::string& job, std::vector<int64_t> steps) {
    EngineOptions o;
    o.durable_url = "mem://" + name_;
    o.job = job;
    o.chunk_size = 4096;
    auto engine = CheckpointEngine::Open(o);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    std::vector<float> data(3000, 1.5f);
    for (int64_t step : steps) {
      SaveTensor t;
      t.name = "w";
      t.dtype = DType::kFloat32;
      t.global_shape = {3000};
      t.data = data.data();
      SaveOptions so;
      so.step = step;
      if (step == steps.front()) so.tags = {"first"};
      auto handle = (*engine)->Save(std::span<const SaveTensor>(&t, 1), so);
      ASSERT_TRUE(handle.ok()) << handle.status().ToString();
      ASSERT_TRUE((*handle)->Wait().ok());
      data[0] += 1;
    }
  }

  std::string name_;
  std::unique_ptr<ObjectStore> store_;
};

TEST_F(CatalogTest, ListsJobsAndStepsWithTheirState) {
  SaveSteps("a", {10, 20, 30});
  SaveSteps("b", {5});
  // An unfinished save of step 40: one rank's part (copied from step 30's), no manifest.
  ASSERT_TRUE(store_->Put(PartKey("a", 40, 0), *store_->Get(PartKey("a", 30, 0))).ok());

  CheckpointCatalog catalog(*store_);
  EXPECT_EQ(*catalog.Jobs(), (std::vector<std::string>{"a", "b"}));
  auto steps = catalog.Steps("a");
  ASSERT_TRUE(steps.ok()) << steps.status().ToString();
  ASSERT_EQ(steps->size(), 4u);
  EXPECT_EQ((*steps)[0].step, 10);
  EXPECT_EQ((*steps)[0].state, StepState::kCommitted);
  EXPECT_EQ((*steps)[0].tags, std::vector<std::string>{"first"});
  EXPECT_EQ((*steps)[0].bytes, 12000u);
  EXPECT_EQ((*steps)[0].world_size, 1);
  EXPECT_FALSE((*steps)[1].latest);
  EXPECT_TRUE((*steps)[2].latest);
  EXPECT_EQ((*steps)[3].step, 40);
  EXPECT_EQ((*steps)[3].state, StepState::kIncomplete);
  EXPECT_EQ((*steps)[3].parts, 1);
  EXPECT_EQ((*steps)[3].world_size, 1);
  EXPECT_FALSE((*steps)[3].latest);
  EXPECT_EQ(*catalog.Latest("a"), 30);
  EXPECT_EQ(*catalog.Latest("b"), 5);
  EXPECT_EQ(catalog.Latest("nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(catalog.Steps("../x").status().code(), StatusCode::kInvalidArgument);
}

// Regression: one truncated manifest made every listing of the job fail.
TEST_F(CatalogTest, ADamagedManifestIsADamagedStepNotAFailedListing) {
  SaveSteps("a", {1, 2, 3});
  const std::string key = ManifestKey("a", 1);
  ASSERT_TRUE(store_->Put(key, store_->Get(key)->substr(0, 100)).ok());
  CheckpointCatalog catalog(*store_);
  auto steps = catalog.Steps("a");
  ASSERT_TRUE(steps.ok()) << steps.status().ToString();
  ASSERT_EQ(steps->size(), 3u);
  EXPECT_EQ((*steps)[0].state, StepState::kDamaged);
  EXPECT_NE((*steps)[0].problem.find(key), std::string::npos) << (*steps)[0].problem;
  EXPECT_EQ((*steps)[1].state, StepState::kCommitted);
  EXPECT_EQ(*catalog.Latest("a"), 3);
}

TEST_F(CatalogTest, LatestFollowsThePointerAndFallsBackWithoutIt) {
  SaveSteps("a", {1, 2});
  CheckpointCatalog catalog(*store_);
  ASSERT_TRUE(store_->Put(LatestKey("a"), "1\n").ok());
  EXPECT_EQ(*catalog.Latest("a"), 1);
  ASSERT_TRUE(store_->Delete(LatestKey("a")).ok());
  EXPECT_EQ(*catalog.Latest("a"), 2);
  ASSERT_TRUE(store_->Put(LatestKey("a"), "garbage").ok());
  EXPECT_EQ(*catalog.Latest("a"), 2);
  ASSERT_TRUE(store_->Put(LatestKey("a"), "99\n").ok());  // names no committed step
  EXPECT_EQ(*catalog.Latest("a"), 2);
}

TEST(CheckpointLocationTest, AJobsDirectoryOrARoot) {
  const auto where = [](std::string_view url) {
    Result<CheckpointLocation> l = ParseCheckpointLocation(url);
    return l.ok() ? l->root + " | " + l->job : l.status().ToString();
  };
  EXPECT_EQ(where("s3://b/runs/ckpt/llama-7b"), "s3://b/runs | llama-7b");
  EXPECT_EQ(where("s3://b/runs/ckpt/llama-7b/"), "s3://b/runs | llama-7b");
  EXPECT_EQ(where("file:///shared/ckpt/train"), "file:///shared | train");
  EXPECT_EQ(where("/shared/ckpt/train"), "/shared | train");
  EXPECT_EQ(where("s3://b/runs"), "s3://b/runs | default");
  EXPECT_EQ(where("s3://checkpoints/run-7"), "s3://checkpoints/run-7 | default");
  // The root before "/ckpt/" would be no bucket or path: the whole URL is the root.
  EXPECT_EQ(where("s3://ckpt/run-7"), "s3://ckpt/run-7 | default");
  EXPECT_EQ(where("file:///ckpt/x"), "file:///ckpt/x | default");
  EXPECT_EQ(where("s3://b/myckpt/x"), "s3://b/myckpt/x | default");
  EXPECT_EQ(ParseCheckpointLocation("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCheckpointLocation("s3://b/ckpt/a b").status().code(),
            StatusCode::kInvalidArgument);
}

// What a node's local tier holds of a job's newest checkpoint: chunk by chunk, exactly.
TEST_F(CatalogTest, LatestCopyInCountsTheNewestCheckpointsChunksATierHolds) {
  SaveSteps("a", {10, 20});  // 12,000 bytes: chunks of 4096, 4096 and 3808
  CheckpointCatalog catalog(*store_);
  std::unique_ptr<ObjectStore> tier = OpenMemoryStore(name_ + "-tier");
  const auto copy_of = [&]() -> TierCopy {
    Result<TierCopy> copy = catalog.LatestCopyIn("a", *tier);
    EXPECT_TRUE(copy.ok()) << copy.status().ToString();
    return copy.ok() ? *copy : TierCopy{};
  };
  // Puts every chunk of `step` into the tier.
  const auto copy_step = [&](int64_t step) {
    Result<CheckpointManifest> m = catalog.Manifest("a", step);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    for (const PackRecord& c : m->StoredChunks()) {
      ASSERT_TRUE(tier->Put(ChunkKey(c.id), *store_->Get(ChunkKey(c.id))).ok());
    }
  };
  EXPECT_EQ(copy_of(), (TierCopy{20, 3, 0, 12000, 0}));
  EXPECT_EQ(copy_of().fraction(), 0.0);
  // Step 20's first chunk differs from step 10's (data[0] changed); the tier gets step 10's
  // chunks: two of step 20's are among them.
  copy_step(10);
  EXPECT_EQ(copy_of(), (TierCopy{20, 3, 2, 12000, 4096 + 3808}));
  EXPECT_DOUBLE_EQ(copy_of().fraction(), (4096.0 + 3808.0) / 12000.0);
  copy_step(20);
  EXPECT_EQ(copy_of(), (TierCopy{20, 3, 3, 12000, 12000}));
  EXPECT_EQ(copy_of().fraction(), 1.0);

  EXPECT_EQ(catalog.LatestCopyIn("nope", *tier).status().code(), StatusCode::kNotFound);
}

TEST(CkptEnvDefaultsTest, ReadsEveryVariableAndKeepsDefaults) {
  auto unset = [](const char*) { return std::optional<std::string>(); };
  CkptEnvDefaults none = ReadCkptEnvDefaults(unset);
  EXPECT_EQ(none.root, "");
  EXPECT_EQ(none.job, "default");
  EXPECT_TRUE(none.peers.empty());
  EXPECT_EQ(*RankFromEnv(unset), 0);
  EXPECT_EQ(*WorldSizeFromEnv(unset), 1);

  std::map<std::string, std::string> env = {{"GANTRY_CKPT_ROOT", "s3://b/c"},
                                            {"GANTRY_CKPT_LOCAL", "/nvme"},
                                            {"GANTRY_CKPT_JOB", ""},  // empty: the default
                                            {"GANTRY_CKPT_PEERS", "http://a:1,,http://b:2,"},
                                            {"RANK", "3"},
                                            {"WORLD_SIZE", "8"}};
  auto lookup = [&env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  CkptEnvDefaults d = ReadCkptEnvDefaults(lookup);
  EXPECT_EQ(d.root, "s3://b/c");
  EXPECT_EQ(d.local, "/nvme");
  EXPECT_EQ(d.job, "default");
  EXPECT_EQ(d.peers, (std::vector<std::string>{"http://a:1", "http://b:2"}));
  EXPECT_EQ(*RankFromEnv(lookup), 3);
  EXPECT_EQ(*WorldSizeFromEnv(lookup), 8);

  env["WORLD_SIZE"] = "0";
  EXPECT_EQ(WorldSizeFromEnv(lookup).status().code(), StatusCode::kInvalidArgument);
  env["RANK"] = "one";
  Result<int> bad = RankFromEnv(lookup);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("RANK='one'"), std::string::npos);
  env["RANK"] = "-1";
  EXPECT_FALSE(RankFromEnv(lookup).ok());
  env["RANK"] = "99999999999";
  EXPECT_FALSE(RankFromEnv(lookup).ok());
}

}  // namespace
}  // namespace gantry::ckpt
