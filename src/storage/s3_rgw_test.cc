// The S3 backend against a real S3 endpoint (Ceph RGW started by scripts/test or scripts/rgw):
// GANTRY_S3_ENDPOINT, GANTRY_S3_ACCESS_KEY, GANTRY_S3_SECRET_KEY, GANTRY_S3_BUCKET. Skipped when
// they are unset, except under CI (CI set), where a missing endpoint fails the test.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "common/test_support.h"
#include "gantry/storage/s3.h"
#include "storage/rgw_test_env.h"
#include "storage/s3_internal.h"

namespace gantry::s3 {
namespace {

using test_support::RandomBytes;

class S3RgwTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GANTRY_REQUIRE_RGW(rgw);
    options_ = rgw->Options();
    options_.base_backoff_ms = 5;
    options_.max_backoff_ms = 20;
    bucket_ = rgw->bucket;
    prefix_ = test_support::RgwEnv::UniquePrefix("s3test") + "/" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name();
    auto s = S3Store::Open(bucket_, prefix_, options_, ProcessEnv());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  std::string TempPath(const std::string& name) {
    return ::testing::TempDir() + "/s3rgw-" + std::to_string(::getpid()) + "-" + name;
  }

  StoreOptions options_;
  std::string bucket_;
  std::string prefix_;
  std::unique_ptr<S3Store> store_;
};

TEST_F(S3RgwTest, PutGetHeadRangeDelete) {
  ASSERT_TRUE(store_->Put("a/b.txt", "hello, rgw").ok());
  auto got = store_->Get("a/b.txt");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "hello, rgw");

  auto head = store_->Head("a/b.txt");
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->size, 10u);
  EXPECT_FALSE(head->etag.empty());
  EXPECT_GT(head->mtime_unix, 1600000000);

  auto range = store_->GetRange("a/b.txt", 7, 100);
  ASSERT_TRUE(range.ok()) << range.status().ToString();
  EXPECT_EQ(*range, "rgw");
  auto mid = store_->GetRange("a/b.txt", 2, 3);
  ASSERT_TRUE(mid.ok());
  EXPECT_EQ(*mid, "llo");
  auto at_end = store_->GetRange("a/b.txt", 10, 5);
  ASSERT_TRUE(at_end.ok()) << at_end.status().ToString();
  EXPECT_EQ(*at_end, "");
  auto past = store_->GetRange("a/b.txt", 11, 5);
  EXPECT_EQ(past.status().code(), StatusCode::kOutOfRange) << past.status().ToString();

  // Keys that need encoding round-trip.
  ASSERT_TRUE(store_->Put("odd key/with+plus&amp=1 ~.bin", "x").ok());
  EXPECT_EQ(*store_->Get("odd key/with+plus&amp=1 ~.bin"), "x");

  ASSERT_TRUE(store_->Put("empty", "").ok());
  auto empty = store_->Get("empty");
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(*empty, "");

  ASSERT_TRUE(store_->Delete("a/b.txt").ok());
  auto gone = store_->Get("a/b.txt");
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_NE(gone.status().message().find("NoSuchKey"), std::string::npos);
  EXPECT_NE(gone.status().message().find("get 'a/b.txt'"), std::string::npos);
  EXPECT_EQ(store_->Head("a/b.txt").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_->Delete("a/b.txt").ok()) << "deleting a missing key is not an error";
  EXPECT_EQ(store_->Put("../x", "y").code(), StatusCode::kInvalidArgument);
}

TEST_F(S3RgwTest, ListPaginates) {
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(store_->Put("dir/k" + std::to_string(i), std::string(i, 'z')).ok());
  }
  ASSERT_TRUE(store_->Put("other", "o").ok());
  std::vector<std::string> keys;
  std::string token;
  int pages = 0;
  do {
    auto page = store_->List("dir/", token, 3);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    EXPECT_LE(page->objects.size(), 3u);
    for (const auto& o : page->objects) {
      keys.push_back(o.key);
      EXPECT_EQ(o.size, static_cast<uint64_t>(o.key.back() - '0'));
      EXPECT_GT(o.mtime_unix, 1600000000);
    }
    token = page->next_token;
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(keys.size(), 7u);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(keys[i], "dir/k" + std::to_string(i));
  auto all = store_->ListAll("");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->size(), 8u);
}

TEST_F(S3RgwTest, CreateIfAbsent) {
  PutOptions once;
  once.create_if_absent = true;
  ASSERT_TRUE(store_->Put("lock", "first", once).ok());
  Status again = store_->Put("lock", "second", once);
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists) << again.ToString();
  EXPECT_EQ(*store_->Get("lock"), "first");
}

TEST_F(S3RgwTest, MultipartPutFileAndParallelRangedGetToFile) {
  options_.multipart_threshold = 8 << 20;
  options_.part_size = 5 << 20;
  options_.parallelism = 4;
  auto s = S3Store::Open(bucket_, prefix_, options_, ProcessEnv());
  ASSERT_TRUE(s.ok());
  std::unique_ptr<S3Store> store = std::move(s).value();

  const std::string data = RandomBytes((20 << 20) + 12345, 7);  // 5 parts, the last one short
  const std::string src = TempPath("src");
  { std::ofstream(src, std::ios::binary) << data; }
  const uint64_t before = store->requests_sent();
  Status put = store->PutFile("big/object", src);
  ASSERT_TRUE(put.ok()) << put.ToString();
  // create + 5 parts + complete
  EXPECT_EQ(store->requests_sent() - before, 7u);
  auto head = store->Head("big/object");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->size, data.size());
  EXPECT_NE(head->etag.find("-5"), std::string::npos) << "a multipart ETag: " << head->etag;

  const std::string dst = TempPath("dst");
  const uint64_t before_get = store->requests_sent();
  Status get = store->GetToFile("big/object", dst);
  ASSERT_TRUE(get.ok()) << get.ToString();
  EXPECT_EQ(store->requests_sent() - before_get, 5u);  // 5 ranges of 5 MiB
  std::ifstream in(dst, std::ios::binary);
  std::string back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(back == data) << "downloaded " << back.size() << " bytes";

  auto mem = store->Get("big/object");
  ASSERT_TRUE(mem.ok());
  EXPECT_TRUE(*mem == data);

  // A large in-memory Put also goes multipart.
  ASSERT_TRUE(store->Put("big/mem", data).ok());
  EXPECT_TRUE(*store->Get("big/mem") == data);
  ::unlink(src.c_str());
  ::unlink(dst.c_str());
}

TEST_F(S3RgwTest, FailedPartAbortsUploadAndLeavesNoObject) {
  options_.multipart_threshold = 5 << 20;
  options_.part_size = 5 << 20;
  options_.parallelism = 2;
  options_.max_attempts = 3;
  auto s = S3Store::Open(bucket_, prefix_, options_, ProcessEnv());
  ASSERT_TRUE(s.ok());
  std::unique_ptr<S3Store> store = std::move(s).value();
  std::atomic<int> part3_attempts{0};
  store->SetFaultHookForTesting([&](const FaultPoint& p) {
    if (p.op == "upload part" && p.part_number == 3) {
      ++part3_attempts;
      return Status(StatusCode::kUnavailable, "part 3 is broken");
    }
    return Status::Ok();
  });
  const std::string data = RandomBytes(16 << 20, 3);
  Status put = store->Put("interrupted", data);
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.code(), StatusCode::kUnavailable);
  EXPECT_NE(put.message().find("upload part 'interrupted'"), std::string::npos) << put.ToString();
  EXPECT_NE(put.message().find("after 3 attempts"), std::string::npos) << put.ToString();
  EXPECT_EQ(part3_attempts.load(), 3);
  store->SetFaultHookForTesting(nullptr);
  EXPECT_EQ(store->Head("interrupted").status().code(), StatusCode::kNotFound);
  auto uploads = store->ListMultipartUploadsForTesting("interrupted");
  ASSERT_TRUE(uploads.ok()) << uploads.status().ToString();
  EXPECT_TRUE(uploads->empty()) << "the upload was aborted";
}

TEST_F(S3RgwTest, WrongSecretIsAClearErrorAndNotRetried) {
  options_.secret_key = "definitely-not-the-secret";
  auto s = S3Store::Open(bucket_, prefix_, options_, ProcessEnv());
  ASSERT_TRUE(s.ok());
  Status put = (*s)->Put("k", "v");
  // Not allowed, and never "full": a cache tier must not skip it as a full tier.
  EXPECT_EQ(put.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(put.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(put.message().find("HTTP 403 SignatureDoesNotMatch"), std::string::npos)
      << put.ToString();
  EXPECT_NE(put.message().find("s3://" + bucket_ + "/"), std::string::npos);
  EXPECT_NE(put.message().find("put 'k'"), std::string::npos);
  EXPECT_EQ((*s)->requests_sent(), 1u);

  options_.access_key = "NOSUCHACCESSKEY00000";
  auto u = S3Store::Open(bucket_, prefix_, options_, ProcessEnv());
  ASSERT_TRUE(u.ok());
  Status get = (*u)->Get("k").status();
  EXPECT_NE(get.message().find("HTTP 403 InvalidAccessKeyId"), std::string::npos) << get.ToString();
}

TEST_F(S3RgwTest, MissingBucketIsNotFoundNamingTheBucket) {
  auto s = S3Store::Open("gantry-no-such-bucket", "p", options_, ProcessEnv());
  ASSERT_TRUE(s.ok());
  Status put = (*s)->Put("k", "v");
  EXPECT_EQ(put.code(), StatusCode::kNotFound) << put.ToString();
  EXPECT_NE(put.message().find("NoSuchBucket"), std::string::npos) << put.ToString();
  EXPECT_NE(put.message().find("bucket 'gantry-no-such-bucket' does not exist"), std::string::npos);
  auto list = (*s)->List("", "", 10);
  EXPECT_EQ(list.status().code(), StatusCode::kNotFound) << list.status().ToString();
}

TEST_F(S3RgwTest, ObjectStoreUrlOpensS3) {
  ::setenv("AWS_ENDPOINT_URL", options_.endpoint.c_str(), 1);
  StoreOptions o;
  o.access_key = options_.access_key;
  o.secret_key = options_.secret_key;
  auto s = OpenObjectStore("s3://" + bucket_ + "/" + prefix_, o);
  ::unsetenv("AWS_ENDPOINT_URL");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->backend(), "s3");
  EXPECT_EQ((*s)->url(), "s3://" + bucket_ + "/" + prefix_);
  ASSERT_TRUE((*s)->Put("via-url", "1").ok());
  EXPECT_EQ(*store_->Get("via-url"), "1");
}

}  // namespace
}  // namespace gantry::s3
