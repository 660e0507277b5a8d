#include "gantry/storage/dry_run_store.h"

#include <gtest/gtest.h>

#include "gantry/storage/memory_store.h"

namespace gantry {
namespace {

std::vector<std::string> Keys(ObjectStore& s, std::string_view prefix = "") {
  std::vector<std::string> out;
  Result<std::vector<ObjectInfo>> listed = s.ListAll(prefix);
  EXPECT_TRUE(listed.ok()) << listed.status().ToString();
  if (!listed.ok()) return out;
  for (const ObjectInfo& o : *listed) out.push_back(o.key);
  return out;
}

class DryRunStoreTest : public testing::Test {
 protected:
  void SetUp() override {
    // Two handles on one named memory store: one wrapped, one to look below the overlay.
    const std::string name =
        std::string("dry-run-") + testing::UnitTest::GetInstance()->current_test_info()->name();
    below_ = OpenMemoryStore(name);
    ASSERT_TRUE(below_->Put("a/1", "one").ok());
    ASSERT_TRUE(below_->Put("a/2", "two").ok());
    ASSERT_TRUE(below_->Put("b/3", "three").ok());
    dry_ = std::make_unique<DryRunStore>(OpenMemoryStore(name));
  }

  std::unique_ptr<ObjectStore> below_;
  std::unique_ptr<DryRunStore> dry_;
};

TEST_F(DryRunStoreTest, WritesAndDeletesAreSeenThroughTheOverlayOnly) {
  EXPECT_EQ(dry_->backend(), "dry-run(memory)");
  ASSERT_TRUE(dry_->Delete("a/1").ok());
  ASSERT_TRUE(dry_->Put("a/9", "nine").ok());
  ASSERT_TRUE(dry_->Put("a/2", "TWO").ok());

  EXPECT_EQ(dry_->Get("a/1").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(dry_->Head("a/1").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*dry_->Get("a/9"), "nine");
  EXPECT_EQ(*dry_->Get("a/2"), "TWO");
  EXPECT_EQ(dry_->Head("a/9")->size, 4u);
  EXPECT_EQ(*dry_->GetRange("a/9", 1, 2), "in");
  EXPECT_EQ(*dry_->GetRange("b/3", 1, 3), "hre");  // from below
  EXPECT_EQ(dry_->GetRange("a/9", 5, 1).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(Keys(*dry_, "a/"), (std::vector<std::string>{"a/2", "a/9"}));
  EXPECT_EQ(Keys(*dry_), (std::vector<std::string>{"a/2", "a/9", "b/3"}));

  // Nothing changed below.
  EXPECT_EQ(Keys(*below_), (std::vector<std::string>{"a/1", "a/2", "b/3"}));
  EXPECT_EQ(*below_->Get("a/2"), "two");

  EXPECT_EQ(dry_->Deleted(), (std::vector<std::string>{"a/1"}));
  EXPECT_EQ(dry_->Written(), (std::vector<std::string>{"a/2", "a/9"}));
}

TEST_F(DryRunStoreTest, RewriteAfterDeleteAndDeleteAfterWrite) {
  ASSERT_TRUE(dry_->Delete("a/1").ok());
  ASSERT_TRUE(dry_->Put("a/1", "again").ok());
  EXPECT_EQ(*dry_->Get("a/1"), "again");
  EXPECT_TRUE(dry_->Deleted().empty());
  ASSERT_TRUE(dry_->Put("c/new", "x").ok());
  ASSERT_TRUE(dry_->Delete("c/new").ok());
  EXPECT_EQ(dry_->Get("c/new").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Keys(*dry_, "c/"), std::vector<std::string>{});
}

TEST_F(DryRunStoreTest, CreateIfAbsentSeesBothLayers) {
  PutOptions create;
  create.create_if_absent = true;
  EXPECT_EQ(dry_->Put("a/1", "x", create).code(), StatusCode::kAlreadyExists);  // below
  ASSERT_TRUE(dry_->Put("d/1", "x", create).ok());
  EXPECT_EQ(dry_->Put("d/1", "y", create).code(), StatusCode::kAlreadyExists);  // overlay
  ASSERT_TRUE(dry_->Delete("a/2").ok());
  EXPECT_TRUE(dry_->Put("a/2", "back", create).ok());  // deleted in the dry run: absent
  EXPECT_FALSE(below_->Head("d/1").ok());
}

TEST_F(DryRunStoreTest, InvalidKeysAreRefused) {
  EXPECT_EQ(dry_->Put("../x", "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dry_->Delete("/abs").code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gantry
