// Compatibility of Gantry's S3 backend with Debian's `aws` CLI (v2) against a real Ceph RGW:
// what one writes, the other reads back byte-identical, multipart objects included, and both
// agree on listings, sizes and deletes.
//
// The endpoint comes from GANTRY_S3_ENDPOINT, GANTRY_S3_ACCESS_KEY, GANTRY_S3_SECRET_KEY and
// GANTRY_S3_BUCKET (an existing bucket), as exported by `scripts/rgw start`; scripts/test starts
// one. Without them the tests skip, except under CI (CI set), where they fail so that a broken
// RGW start cannot hide them. GANTRY_AWS overrides the CLI (default /usr/bin/aws, Debian's v2:
// a pip-installed v1 earlier on PATH is not the peer we test against).
//
// Every test works under its own fresh key prefix and removes it afterwards, so runs against a
// shared bucket do not see each other.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_support.h"
#include "gantry/common/status.h"
#include "gantry/storage/object_store.h"
#include "storage/rgw_test_env.h"

namespace gantry {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMiB = 1ull << 20;

using test_support::RandomBytes;

void WriteFile(const fs::path& p, std::string_view data) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << p;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Single-quotes s for /bin/sh.
std::string Quote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

struct CommandResult {
  int code = -1;
  std::string output;  // stdout only; stderr goes to `errors`
  std::string errors;
};

class S3CompatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GANTRY_REQUIRE_RGW(rgw);
    endpoint_ = rgw->endpoint;
    access_key_ = rgw->access_key;
    secret_key_ = rgw->secret_key;
    bucket_ = rgw->bucket;
    aws_ = test_support::EnvOrEmpty("GANTRY_AWS").empty() ? "/usr/bin/aws"
                                                          : test_support::EnvOrEmpty("GANTRY_AWS");
    ASSERT_EQ(access(aws_.c_str(), X_OK), 0) << aws_ << " not found: install awscli";

    std::string t = (fs::path(::testing::TempDir()) / "gantry-s3compat-XXXXXX").string();
    ASSERT_NE(mkdtemp(t.data()), nullptr) << "mkdtemp " << t;
    dir_ = t;

    // A private awscli configuration: multipart from 5 MB up in 5 MB parts, so the multipart
    // path runs on a small object; no user config or credentials file leaks in.
    const fs::path config = dir_ / "aws_config";
    WriteFile(config,
              "[default]\n"
              "region = us-east-1\n"
              "s3 =\n"
              "  multipart_threshold = 5MB\n"
              "  multipart_chunksize = 5MB\n"
              "  addressing_style = path\n");
    aws_env_ = "env AWS_CONFIG_FILE=" + Quote(config.string()) +
               " AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_ACCESS_KEY_ID=" + Quote(access_key_) +
               " AWS_SECRET_ACCESS_KEY=" + Quote(secret_key_) +
               " AWS_DEFAULT_REGION=us-east-1 AWS_PAGER= AWS_PROFILE=default";

    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    prefix_ = std::string("compat-") + std::to_string(getpid()) + "-" + info->name();
    StoreOptions options;
    options.endpoint = endpoint_;
    options.access_key = access_key_;
    options.secret_key = secret_key_;
    options.region = "us-east-1";
    options.path_style = true;
    // Small multipart settings: a 20 MiB object goes up in four 5 MiB parts.
    options.multipart_threshold = 5 * kMiB;
    options.part_size = 5 * kMiB;
    options.parallelism = 4;
    Result<std::unique_ptr<ObjectStore>> store =
        OpenObjectStore("s3://" + bucket_ + "/" + prefix_, options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
  }

  void TearDown() override {
    if (!prefix_.empty()) {
      Aws("s3 rm --recursive --quiet " + Quote(S3Url("")));
    }
    if (!dir_.empty()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
  }

  // s3://bucket/prefix/key as awscli names it.
  std::string S3Url(std::string_view key) const {
    return "s3://" + bucket_ + "/" + prefix_ + "/" + std::string(key);
  }
  std::string FullKey(std::string_view key) const { return prefix_ + "/" + std::string(key); }

  // Runs `aws --endpoint-url ENDPOINT <args>`.
  CommandResult Aws(const std::string& args) {
    const fs::path err = dir_ / "aws_stderr";
    const std::string cmd = aws_env_ + " " + Quote(aws_) + " --endpoint-url " + Quote(endpoint_) +
                            " --no-cli-pager " + args + " 2>" + Quote(err.string());
    CommandResult r;
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) {
      r.errors = "popen failed";
      return r;
    }
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
    const int status = pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.errors = ReadFile(err);
    return r;
  }

  // Runs an `aws s3api` call that prints JSON, and parses it.
  nlohmann::json AwsJson(const std::string& args) {
    CommandResult r = Aws("s3api " + args + " --output json");
    EXPECT_EQ(r.code, 0) << "aws s3api " << args << ":\n" << r.errors;
    if (r.code != 0 || r.output.empty()) return nlohmann::json::object();
    return nlohmann::json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  }

  nlohmann::json AwsHead(std::string_view key) {
    return AwsJson("head-object --bucket " + Quote(bucket_) + " --key " + Quote(FullKey(key)));
  }

  void AwsUpload(const std::string& data, std::string_view key) {
    const fs::path src = dir_ / "upload.bin";
    WriteFile(src, data);
    CommandResult r =
        Aws("s3 cp --only-show-errors " + Quote(src.string()) + " " + Quote(S3Url(key)));
    ASSERT_EQ(r.code, 0) << "aws s3 cp up " << key << ":\n" << r.errors;
  }

  std::string AwsDownload(std::string_view key) {
    const fs::path dst = dir_ / "download.bin";
    fs::remove(dst);
    CommandResult r =
        Aws("s3 cp --only-show-errors " + Quote(S3Url(key)) + " " + Quote(dst.string()));
    EXPECT_EQ(r.code, 0) << "aws s3 cp down " << key << ":\n" << r.errors;
    return ReadFile(dst);
  }

  std::string endpoint_, access_key_, secret_key_, bucket_, aws_, aws_env_, prefix_;
  fs::path dir_;
  std::unique_ptr<ObjectStore> store_;
};

// ETags of multipart uploads end in "-<number of parts>"; single puts have none.
int PartsInETag(const nlohmann::json& head) {
  const std::string etag = head.value("ETag", "");
  const size_t dash = etag.rfind('-');
  if (dash == std::string::npos) return 0;
  return std::atoi(etag.c_str() + dash + 1);
}

TEST_F(S3CompatTest, GantryPutAwsReads) {
  const std::string data = RandomBytes(3 * kMiB + 17, 1);
  ASSERT_TRUE(store_->Put("small/one.bin", data).ok());
  const std::string back = AwsDownload("small/one.bin");
  EXPECT_EQ(back.size(), data.size());
  EXPECT_TRUE(back == data) << "aws read different bytes than Gantry wrote";
  nlohmann::json head = AwsHead("small/one.bin");
  EXPECT_EQ(head.value("ContentLength", -1), static_cast<int64_t>(data.size()));

  // An empty object is a corner case of both Content-Length and signing.
  ASSERT_TRUE(store_->Put("small/empty", "").ok());
  EXPECT_EQ(AwsHead("small/empty").value("ContentLength", -1), 0);
}

TEST_F(S3CompatTest, GantryMultipartPutFileAwsReads) {
  const std::string data = RandomBytes(20 * kMiB + 12345, 2);  // four full parts and a short fifth
  const fs::path src = dir_ / "big.bin";
  WriteFile(src, data);
  Status s = store_->PutFile("big/multi.bin", src.string());
  ASSERT_TRUE(s.ok()) << s.ToString();
  nlohmann::json head = AwsHead("big/multi.bin");
  EXPECT_EQ(head.value("ContentLength", -1), static_cast<int64_t>(data.size()));
  EXPECT_EQ(PartsInETag(head), 5) << "expected a 5-part multipart upload, ETag "
                                  << head.value("ETag", "");
  const std::string back = AwsDownload("big/multi.bin");
  EXPECT_EQ(back.size(), data.size());
  EXPECT_TRUE(back == data) << "aws read different bytes than Gantry's multipart upload";
}

TEST_F(S3CompatTest, AwsPutGantryReads) {
  const std::string data = RandomBytes(2 * kMiB + 3, 3);
  ASSERT_NO_FATAL_FAILURE(AwsUpload(data, "from-aws/one.bin"));
  Result<std::string> back = store_->Get("from-aws/one.bin");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == data) << "Gantry read different bytes than aws wrote";
  Result<ObjectInfo> info = store_->Head("from-aws/one.bin");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, data.size());
  EXPECT_EQ(info->key, "from-aws/one.bin");
}

TEST_F(S3CompatTest, AwsMultipartGantryReadsWholeAndRanges) {
  const uint64_t size = 20 * kMiB + 999;
  const std::string data = RandomBytes(size, 4);
  ASSERT_NO_FATAL_FAILURE(AwsUpload(data, "from-aws/multi.bin"));
  ASSERT_GT(PartsInETag(AwsHead("from-aws/multi.bin")), 1) << "awscli did not upload multipart";

  Result<std::string> whole = store_->Get("from-aws/multi.bin");
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->size(), size);
  EXPECT_TRUE(*whole == data);

  const fs::path dst = dir_ / "gantry_get.bin";
  Status s = store_->GetToFile("from-aws/multi.bin", dst.string());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(ReadFile(dst) == data) << "GetToFile wrote different bytes";

  struct Range {
    uint64_t offset, length;
  };
  // The first byte, a range across awscli's 5 MiB part boundary, and a tail clipped at the end.
  for (const Range r : {Range{0, 1}, Range{5 * kMiB - 100, 200}, Range{7 * kMiB, 3 * kMiB},
                        Range{size - 10, 1000}, Range{size - 1, kToEnd}}) {
    Result<std::string> got = store_->GetRange("from-aws/multi.bin", r.offset, r.length);
    ASSERT_TRUE(got.ok()) << "range " << r.offset << "+" << r.length << ": "
                          << got.status().ToString();
    EXPECT_TRUE(*got == data.substr(r.offset, r.length))
        << "range " << r.offset << "+" << r.length << " differs (got " << got->size() << " bytes)";
  }
  Result<std::string> past = store_->GetRange("from-aws/multi.bin", size + 10, 5);
  ASSERT_FALSE(past.ok()) << "a range past the end must fail";
  EXPECT_EQ(past.status().code(), StatusCode::kOutOfRange) << past.status().ToString();
}

TEST_F(S3CompatTest, ListingPaginatesAndAgreesWithAws) {
  // 23 keys from both writers, listed 5 at a time: five pages, the last one short.
  std::vector<std::string> keys;
  for (int i = 0; i < 23; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "list/k%03d", i);
    keys.emplace_back(name);
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i % 4 == 3) {
      ASSERT_NO_FATAL_FAILURE(AwsUpload(RandomBytes(i, 100 + i), keys[i]));
    } else {
      ASSERT_TRUE(store_->Put(keys[i], RandomBytes(i, 100 + i)).ok()) << keys[i];
    }
  }
  // A neighbour outside the listed prefix must not show up.
  ASSERT_TRUE(store_->Put("listx", "other").ok());

  std::vector<ObjectInfo> listed;
  std::string token;
  int pages = 0;
  do {
    Result<ListPage> page = store_->List("list/", token, 5);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    EXPECT_LE(page->objects.size(), 5u);
    listed.insert(listed.end(), page->objects.begin(), page->objects.end());
    token = page->next_token;
    ASSERT_LT(++pages, 20) << "pagination does not end";
  } while (!token.empty());
  EXPECT_GE(pages, 5);
  ASSERT_EQ(listed.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(listed[i].key, keys[i]);
    EXPECT_EQ(listed[i].size, i) << keys[i];
  }

  // awscli paginates the same keys with its own page size.
  nlohmann::json out = AwsJson("list-objects-v2 --bucket " + Quote(bucket_) + " --prefix " +
                               Quote(FullKey("list/")) + " --page-size 4");
  std::vector<std::string> aws_keys;
  for (const auto& o : out.value("Contents", nlohmann::json::array())) {
    aws_keys.push_back(o.value("Key", ""));
  }
  ASSERT_EQ(aws_keys.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(aws_keys[i], FullKey(keys[i]));

  Result<std::vector<ObjectInfo>> all = store_->ListAll("list/");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->size(), keys.size());
}

TEST_F(S3CompatTest, HeadAndDeleteBothWays) {
  const std::string a = RandomBytes(4096, 5);
  const std::string b = RandomBytes(777, 6);
  ASSERT_TRUE(store_->Put("del/gantry.bin", a).ok());
  ASSERT_NO_FATAL_FAILURE(AwsUpload(b, "del/aws.bin"));

  Result<ObjectInfo> ha = store_->Head("del/aws.bin");
  ASSERT_TRUE(ha.ok()) << ha.status().ToString();
  EXPECT_EQ(ha->size, b.size());
  nlohmann::json aws_head = AwsHead("del/aws.bin");
  // Both report the same object version.
  std::string aws_etag = aws_head.value("ETag", "");
  aws_etag.erase(std::remove(aws_etag.begin(), aws_etag.end(), '"'), aws_etag.end());
  std::string our_etag = ha->etag;
  our_etag.erase(std::remove(our_etag.begin(), our_etag.end(), '"'), our_etag.end());
  EXPECT_EQ(our_etag, aws_etag);

  // Gantry deletes what aws wrote; aws no longer finds it.
  ASSERT_TRUE(store_->Delete("del/aws.bin").ok());
  CommandResult gone = Aws("s3api head-object --bucket " + Quote(bucket_) + " --key " +
                           Quote(FullKey("del/aws.bin")));
  EXPECT_NE(gone.code, 0) << "aws still sees an object Gantry deleted";
  EXPECT_NE(gone.errors.find("404"), std::string::npos) << gone.errors;

  // aws deletes what Gantry wrote; Gantry reports NotFound.
  CommandResult rm = Aws("s3 rm --only-show-errors " + Quote(S3Url("del/gantry.bin")));
  ASSERT_EQ(rm.code, 0) << rm.errors;
  Result<ObjectInfo> hg = store_->Head("del/gantry.bin");
  ASSERT_FALSE(hg.ok());
  EXPECT_EQ(hg.status().code(), StatusCode::kNotFound) << hg.status().ToString();
  Result<std::string> g = store_->Get("del/gantry.bin");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kNotFound) << g.status().ToString();

  // Deleting a missing key is not an error, as in S3.
  EXPECT_TRUE(store_->Delete("del/never-existed").ok());
}

TEST_F(S3CompatTest, KeysNeedingUrlEncodingRoundTrip) {
  // Spaces, '+', '=', '%', '~', '&' and non-ASCII test the canonical URI and query encoding of
  // SigV4 against the server's.
  const std::vector<std::string> keys = {"enc/a b+c=d.bin", "enc/100%~x&y",
                                         "enc/\xc3\xbc\xe2\x82\xac"};
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string data = RandomBytes(1000 + i, 200 + i);
    ASSERT_TRUE(store_->Put(keys[i], data).ok()) << keys[i];
    EXPECT_TRUE(AwsDownload(keys[i]) == data) << keys[i];
  }
  ASSERT_NO_FATAL_FAILURE(AwsUpload("from aws", "enc/aws written #1"));
  Result<std::string> back = store_->Get("enc/aws written #1");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, "from aws");

  Result<std::vector<ObjectInfo>> all = store_->ListAll("enc/");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  std::vector<std::string> names;
  for (const ObjectInfo& o : *all) names.push_back(o.key);
  std::vector<std::string> want = keys;
  want.push_back("enc/aws written #1");
  std::sort(want.begin(), want.end());
  EXPECT_EQ(names, want);
}

}  // namespace
}  // namespace gantry
