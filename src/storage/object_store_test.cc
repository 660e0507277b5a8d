#include "gantry/storage/object_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "gantry/storage/memory_store.h"
#include "gantry/storage/posix_store.h"

namespace gantry {

namespace {

using ::testing::HasSubstr;

void ExpectBad(std::string_view key, const std::string& why) {
  Status s = ValidateKey(key);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "key: " << key;
  EXPECT_THAT(s.message(), HasSubstr(why)) << "key: " << key;
}

TEST(ValidateKeyTest, AcceptsOrdinaryKeys) {
  EXPECT_TRUE(ValidateKey("a").ok());
  EXPECT_TRUE(ValidateKey("ckpt/step-100/chunk-ab12").ok());
  EXPECT_TRUE(ValidateKey(".hidden/..dots/x.").ok());
  EXPECT_TRUE(ValidateKey(std::string(255, 'x')).ok());
  EXPECT_TRUE(ValidateKey("utf8/\xc3\xa9t\xc3\xa9").ok());
  std::string long_ok;
  while (long_ok.size() + 100 <= 1024) long_ok += std::string(99, 'k') + "/";
  long_ok += "end";
  ASSERT_LE(long_ok.size(), 1024u);
  EXPECT_TRUE(ValidateKey(long_ok).ok());
}

TEST(ValidateKeyTest, RejectsEachRule) {
  ExpectBad("", "empty");
  ExpectBad("/etc/passwd", "absolute");
  ExpectBad("a/../b", "'..' segment");
  ExpectBad("..", "'..' segment");
  ExpectBad("../x", "'..' segment");
  ExpectBad("a/./b", "'.' segment");
  ExpectBad(".", "'.' segment");
  ExpectBad("a\\b", "backslash");
  ExpectBad(std::string_view("a\0b", 3), "NUL");
  ExpectBad("a\nb", "control character");
  ExpectBad("a\x7f", "control character");
  ExpectBad("a//b", "empty segment");
  ExpectBad("a/", "ends with '/'");
  ExpectBad("d/" + std::string(256, 'x'), "segment longer than 255");
  std::string too_long;
  while (too_long.size() <= 1024) too_long += "abcdefgh/";
  too_long += "z";
  ExpectBad(too_long, "longer than 1024");
}

TEST(ValidateKeyTest, ErrorNamesTheKeyPrintably) {
  Status s = ValidateKey("bad\x01key");
  EXPECT_THAT(s.message(), HasSubstr("bad\\x01key"));
}

TEST(OpenObjectStoreTest, MemoryStoresWithTheSameNameShareObjects) {
  auto a = OpenObjectStore("mem://open-test-shared", {});
  auto b = OpenObjectStore("mem://open-test-shared", {});
  auto other = OpenObjectStore("mem://open-test-other", {});
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  ASSERT_TRUE((*a)->Put("k", "v").ok());
  auto got = (*b)->Get("k");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "v");
  EXPECT_EQ((*other)->Get("k").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*a)->backend(), "memory");
  EXPECT_EQ((*a)->url(), "mem://open-test-shared");
}

TEST(OpenObjectStoreTest, FileUrlsAndPlainPathsOpenPosix) {
  const std::string dir =
      std::filesystem::path(testing::TempDir() + "/open_test_" + std::to_string(::getpid()))
          .lexically_normal()
          .string();
  auto s = OpenObjectStore("file://" + dir + "/tier", {});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->backend(), "posix");
  EXPECT_EQ((*s)->url(), "file://" + dir + "/tier");
  ASSERT_TRUE((*s)->Put("x/y", "z").ok());
  auto plain = OpenObjectStore(dir + "/tier/", {});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->url(), "file://" + dir + "/tier");
  auto got = (*plain)->Get("x/y");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "z");
  std::filesystem::remove_all(dir);
}

TEST(OpenObjectStoreTest, RejectsBadUrls) {
  EXPECT_EQ(OpenObjectStore("mem://", {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenObjectStore("file://relative/dir", {}).status().code(),
            StatusCode::kInvalidArgument);
  auto unknown = OpenObjectStore("gopher://x/y", {});
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown scheme"));
  EXPECT_EQ(OpenObjectStore("s3://", {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenObjectStore("", {}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gantry
