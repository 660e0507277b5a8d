// StoreOptions::create_root = false: read-only front ends open an existing directory or fail,
// and never create one out of a mistyped path.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/test_support.h"
#include "gantry/storage/object_store.h"
#include "gantry/storage/posix_store.h"

namespace gantry {
namespace {

namespace fs = std::filesystem;

TEST(PosixOpenExisting, AMissingRootIsNotFoundAndNotCreated) {
  test_support::TempDir dir;
  StoreOptions o;
  o.create_root = false;
  for (const std::string& url : {"file://" + dir.sub("typo"), dir.sub("typo/deeper")}) {
    auto s = OpenObjectStore(url, o);
    ASSERT_FALSE(s.ok()) << url;
    EXPECT_EQ(s.status().code(), StatusCode::kNotFound) << url;
    EXPECT_NE(s.status().message().find(dir.sub("typo")), std::string::npos)
        << s.status().message();
  }
  EXPECT_FALSE(fs::exists(dir.sub("typo")));
}

TEST(PosixOpenExisting, AnExistingRootOpensWithoutWritingAndStillAcceptsPuts) {
  test_support::TempDir dir;
  fs::create_directory(dir.sub("root"));
  PosixStoreOptions o;
  o.create_root = false;
  auto s = OpenPosixStore(dir.sub("root"), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(fs::is_empty(dir.sub("root")));  // not even the temp directory
  Result<std::vector<ObjectInfo>> listed = (*s)->ListAll("");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_TRUE(listed->empty());
  ASSERT_TRUE((*s)->Put("a/b", "x").ok());  // a put makes the temp directory it needs
  EXPECT_EQ(*(*s)->Get("a/b"), "x");
}

TEST(PosixOpenExisting, AFileIsNotADirectory) {
  test_support::TempDir dir;
  { std::ofstream(dir.sub("file")) << "x"; }
  PosixStoreOptions o;
  o.create_root = false;
  EXPECT_EQ(OpenPosixStore(dir.sub("file"), o).status().code(), StatusCode::kFailedPrecondition);
}

TEST(PosixOpenExisting, TheDefaultStillCreatesTheRoot) {
  test_support::TempDir dir;
  auto s = OpenObjectStore(dir.sub("new/tier"), {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(fs::is_directory(dir.sub("new/tier")));
}

}  // namespace
}  // namespace gantry
