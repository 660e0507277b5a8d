// S3 backend without a real endpoint: configuration and credential resolution, addressing,
// the retry policy, XML reading, and the HTTP client against a local fault-injecting server.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "gantry/common/text.h"
#include "storage/s3_internal.h"
#include "storage/test_http_server.h"

namespace gantry::s3 {
namespace {

EnvLookup MapEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string TempDirFor(const std::string& name) {
  std::string tmpl = ::testing::TempDir() + "/s3test-" + name + "-XXXXXX";
  char* d = ::mkdtemp(tmpl.data());
  EXPECT_NE(d, nullptr);
  return tmpl;
}

// ---- configuration ----

TEST(S3Config, OptionsWinOverEnvironment) {
  StoreOptions o;
  o.access_key = "OPTKEY";
  o.secret_key = "optsecret";
  o.region = "eu-west-1";
  o.endpoint = "http://127.0.0.1:7480/";
  auto c = ResolveConfig("bkt", "/pre/fix/", o,
                         MapEnv({{"AWS_ACCESS_KEY_ID", "ENVKEY"},
                                 {"AWS_SECRET_ACCESS_KEY", "envsecret"},
                                 {"AWS_REGION", "us-west-2"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->credentials.access_key, "OPTKEY");
  EXPECT_EQ(c->region, "eu-west-1");
  EXPECT_EQ(c->prefix, "pre/fix");
  EXPECT_EQ(c->endpoint.scheme, "http");
  EXPECT_EQ(c->endpoint.host, "127.0.0.1");
  EXPECT_EQ(c->endpoint.port, "7480");
}

TEST(S3Config, EnvironmentThenDefaults) {
  auto c = ResolveConfig("bkt", "", {},
                         MapEnv({{"AWS_ACCESS_KEY_ID", "ENVKEY"},
                                 {"AWS_SECRET_ACCESS_KEY", "envsecret"},
                                 {"AWS_SESSION_TOKEN", "tok"},
                                 {"AWS_DEFAULT_REGION", "ap-south-1"},
                                 {"HOME", "/nonexistent"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->credentials.access_key, "ENVKEY");
  EXPECT_EQ(c->credentials.session_token, "tok");
  EXPECT_EQ(c->region, "ap-south-1");
  EXPECT_EQ(c->endpoint.host, "s3.ap-south-1.amazonaws.com");
  EXPECT_EQ(c->endpoint.scheme, "https");

  auto e = ResolveConfig("bkt", "", {},
                         MapEnv({{"AWS_ACCESS_KEY_ID", "K"},
                                 {"AWS_SECRET_ACCESS_KEY", "S"},
                                 {"AWS_REGION", "us-west-2"},
                                 {"AWS_DEFAULT_REGION", "ap-south-1"},
                                 {"AWS_ENDPOINT_URL", "http://rgw.local:8080"}}));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->region, "us-west-2");  // AWS_REGION before AWS_DEFAULT_REGION
  EXPECT_EQ(e->endpoint.host, "rgw.local");
}

TEST(S3Config, SharedFilesWithProfile) {
  const std::string dir = TempDirFor("aws");
  std::ofstream(dir + "/credentials") << "[default]\naws_access_key_id = DEFKEY\n"
                                         "aws_secret_access_key = defsecret\n\n"
                                         "[team]\n aws_access_key_id=TEAMKEY \n"
                                         "aws_secret_access_key=teamsecret\n";
  std::ofstream(dir + "/config") << "[default]\nregion = us-east-2\n"
                                    "[profile team]\nregion = eu-north-1\n"
                                    "endpoint_url = http://10.0.0.1:7480\n";
  const std::map<std::string, std::string> files = {
      {"AWS_SHARED_CREDENTIALS_FILE", dir + "/credentials"}, {"AWS_CONFIG_FILE", dir + "/config"}};

  auto d = ResolveConfig("b", "", {}, MapEnv(files));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->credentials.access_key, "DEFKEY");
  EXPECT_EQ(d->region, "us-east-2");

  auto env = files;
  env["AWS_PROFILE"] = "team";
  auto t = ResolveConfig("b", "", {}, MapEnv(env));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->credentials.access_key, "TEAMKEY");
  EXPECT_EQ(t->credentials.secret_key, "teamsecret");
  EXPECT_EQ(t->region, "eu-north-1");
  EXPECT_EQ(t->endpoint.host, "10.0.0.1");

  StoreOptions o;
  o.profile = "nobody";
  auto n = ResolveConfig("b", "", o, MapEnv(files));
  EXPECT_EQ(n.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(n.status().message().find("no S3 credentials for profile 'nobody'"), std::string::npos);
}

TEST(S3Config, BadEndpoints) {
  EXPECT_FALSE(ParseEndpoint("127.0.0.1:7480").ok());
  EXPECT_FALSE(ParseEndpoint("ftp://h").ok());
  EXPECT_FALSE(ParseEndpoint("http://h/path").ok());
  EXPECT_FALSE(ParseEndpoint("http://h:port").ok());
  auto v6 = ParseEndpoint("http://[::1]:9000");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "[::1]");
  EXPECT_EQ(v6->port, "9000");
}

// ---- addressing ----

Config AddressingConfig(bool path_style) {
  Config c;
  c.bucket = "bkt";
  c.endpoint = {"https", "s3.us-east-1.amazonaws.com", ""};
  c.path_style = path_style;
  return c;
}

TEST(S3Addressing, PathStyle) {
  Config c = AddressingConfig(true);
  Target t = BuildTarget(c, "pre/a b+c.txt", {});
  EXPECT_EQ(t.host, "s3.us-east-1.amazonaws.com");
  EXPECT_EQ(t.canonical_uri, "/bkt/pre/a%20b%2Bc.txt");
  EXPECT_EQ(t.url, "https://s3.us-east-1.amazonaws.com/bkt/pre/a%20b%2Bc.txt");
  Target list = BuildTarget(c, "", {{"prefix", "a/"}, {"list-type", "2"}});
  EXPECT_EQ(list.canonical_uri, "/bkt");
  EXPECT_EQ(list.url, "https://s3.us-east-1.amazonaws.com/bkt?list-type=2&prefix=a%2F");
  c.endpoint = {"http", "127.0.0.1", "7480"};
  EXPECT_EQ(BuildTarget(c, "k", {{"uploads", ""}}).url, "http://127.0.0.1:7480/bkt/k?uploads=");
  EXPECT_EQ(BuildTarget(c, "k", {}).host, "127.0.0.1:7480");
}

TEST(S3Addressing, VirtualHost) {
  Config c = AddressingConfig(false);
  Target t = BuildTarget(c, "pre/x~y", {{"partNumber", "3"}, {"uploadId", "a/b=c"}});
  EXPECT_EQ(t.host, "bkt.s3.us-east-1.amazonaws.com");
  EXPECT_EQ(t.canonical_uri, "/pre/x~y");
  EXPECT_EQ(t.url,
            "https://bkt.s3.us-east-1.amazonaws.com/pre/x~y?partNumber=3&uploadId=a%2Fb%3Dc");
  EXPECT_EQ(BuildTarget(c, "", {}).canonical_uri, "/");
}

// ---- retry policy ----

TEST(S3Retry, WhatIsRetried) {
  EXPECT_TRUE(IsRetryableHttp(503, "SlowDown"));
  EXPECT_TRUE(IsRetryableHttp(500, ""));
  EXPECT_TRUE(IsRetryableHttp(502, ""));
  EXPECT_TRUE(IsRetryableHttp(400, "RequestTimeout"));
  EXPECT_FALSE(IsRetryableHttp(403, "SignatureDoesNotMatch"));
  EXPECT_FALSE(IsRetryableHttp(403, "InvalidAccessKeyId"));
  EXPECT_FALSE(IsRetryableHttp(404, "NoSuchKey"));
  EXPECT_FALSE(IsRetryableHttp(412, "PreconditionFailed"));
}

TEST(S3Retry, FullJitterBackoffIsCapped) {
  // The cap doubles per retry up to max_ms; the delay is uniform in [0, cap].
  EXPECT_EQ(BackoffMs(1, 50, 5000, 50), 50);
  EXPECT_EQ(BackoffMs(1, 50, 5000, 51), 0);
  EXPECT_EQ(BackoffMs(3, 50, 5000, 200), 200);
  EXPECT_EQ(BackoffMs(3, 50, 5000, 201), 0);
  for (uint64_t r = 0; r < 1000; r += 37) EXPECT_LE(BackoffMs(30, 50, 5000, r * 7919), 5000);
  EXPECT_EQ(BackoffMs(30, 50, 5000, 5000), 5000);
  EXPECT_EQ(BackoffMs(2, 0, 5000, 12345), 0);
}

// ---- XML ----

TEST(S3Xml, ErrorBodyAndEntities) {
  ErrorBody e = ParseErrorBody(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchKey</Code>"
      "<Message>The key &lt;a&amp;b&gt; &#x41;&#66; does not exist</Message>"
      "<BucketName>b</BucketName></Error>");
  EXPECT_EQ(e.code, "NoSuchKey");
  EXPECT_EQ(e.message, "The key <a&b> AB does not exist");
  EXPECT_EQ(EscapeMarkup("<\"&'>"), "&lt;&quot;&amp;&#39;&gt;");
}

TEST(S3Xml, ListObjectsV2) {
  const std::string xml =
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>"
      "<Prefix>pre/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>"
      "<IsTruncated>true</IsTruncated><NextContinuationToken>tok</NextContinuationToken>"
      "<Contents><Key>pre/a&amp;b</Key><LastModified>2024-05-01T10:00:00.000Z</LastModified>"
      "<ETag>&quot;abc&quot;</ETag><Size>12</Size><StorageClass>STANDARD</StorageClass>"
      "</Contents><Contents><Key>pre/c</Key><LastModified>2024-05-01T10:00:01.000Z"
      "</LastModified><ETag>\"def-2\"</ETag><Size>0</Size><Owner><ID>x</ID></Owner></Contents>"
      "</ListBucketResult>";
  bool truncated = false;
  auto page = ParseListObjectsV2(xml, "pre/", &truncated);
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(truncated);
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "a&b");
  EXPECT_EQ(page->objects[0].size, 12u);
  EXPECT_EQ(page->objects[0].etag, "abc");
  EXPECT_EQ(page->objects[0].mtime_unix, 1714557600);
  EXPECT_EQ(page->objects[1].key, "c");
  EXPECT_EQ(page->objects[1].etag, "def-2");
  EXPECT_FALSE(ParseListObjectsV2("<Error/>", "", &truncated).ok());
  EXPECT_EQ(ParseHttpTime("Wed, 01 May 2024 10:00:00 GMT"), 1714557600);
}

// ---- the client against a local fault-injecting HTTP server ----

using storage_test::FaultServer;
using storage_test::Reply;
using storage_test::SeenRequest;

Reply S3Error(int status, const std::string& code, const std::string& message) {
  Reply r;
  r.status = status;
  r.body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>" + code + "</Code><Message>" +
           message + "</Message></Error>";
  return r;
}

// A store on `server` with fast retries; `tweak` adjusts the options before opening.
std::unique_ptr<S3Store> StoreFor(const FaultServer& server, int max_attempts,
                                  const std::function<void(StoreOptions&)>& tweak = {}) {
  StoreOptions o;
  o.endpoint = server.endpoint();
  o.access_key = "AKIDTEST";
  o.secret_key = "secret";
  o.max_attempts = max_attempts;
  o.base_backoff_ms = 1;
  o.max_backoff_ms = 4;
  o.connect_timeout_ms = 2000;
  o.request_timeout_ms = 5000;
  if (tweak) tweak(o);
  auto s = S3Store::Open("bkt", "pre", o, MapEnv({}));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

TEST(S3Client, RetriesThrottlingErrorsAndTruncationThenSucceeds) {
  std::atomic<int> calls{0};
  FaultServer server([&](const SeenRequest&) {
    switch (calls++) {
      case 0:
        return S3Error(503, "SlowDown", "Please reduce your request rate.");
      case 1:
        return S3Error(500, "InternalError", "We encountered an internal error.");
      case 2: {
        Reply truncated;
        truncated.status = 206;
        truncated.body = "hello";
        truncated.content_length = 11;  // promises more than it sends, then hangs up
        truncated.headers["Content-Range"] = "bytes 0-10/11";
        return truncated;
      }
      case 3:
        return S3Error(400, "RequestTimeout", "Your socket connection timed out.");
      default: {
        Reply ok;
        ok.status = 206;
        ok.body = "hello world";
        ok.headers["Content-Range"] = "bytes 0-10/11";
        ok.headers["ETag"] = "\"e1\"";
        return ok;
      }
    }
  });
  auto store = StoreFor(server, 6);
  auto got = store->Get("a/b");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "hello world");
  EXPECT_EQ(calls.load(), 5);
  EXPECT_EQ(store->retries(), 4u);
  std::vector<SeenRequest> seen = server.seen();
  ASSERT_EQ(seen.size(), 5u);
  for (const SeenRequest& r : seen) {
    EXPECT_EQ(r.method, "GET");
    EXPECT_EQ(r.target, "/bkt/pre/a/b");
    EXPECT_EQ(r.headers.at("x-amz-content-sha256"),
              "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(r.headers.at("range"), "bytes=0-16777215");
    EXPECT_EQ(r.headers.at("authorization").rfind("AWS4-HMAC-SHA256 Credential=AKIDTEST/", 0), 0u);
    EXPECT_NE(r.headers.at("authorization")
                  .find("SignedHeaders=host;range;x-amz-content-sha256;"
                        "x-amz-date,"),
              std::string::npos);
  }
}

TEST(S3Client, GivesUpAfterMaxAttemptsWithAClearError) {
  FaultServer server([](const SeenRequest&) {
    return S3Error(503, "SlowDown", "Please reduce your request rate.");
  });
  auto store = StoreFor(server, 3);
  Status s = store->Put("x/y", "data");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(),
            "s3://bkt/pre: put 'x/y': HTTP 503 SlowDown: Please reduce your request rate. "
            "(after 3 attempts)");
  EXPECT_EQ(server.seen().size(), 3u);
  EXPECT_EQ(server.seen()[0].body, "data");
  EXPECT_EQ(server.seen()[0].headers.at("x-amz-content-sha256"),
            "3a6eb0790f39ac87c94f3856b2dd2c5d110e6811602261a9a923d3bb23adc8b7");
}

TEST(S3Client, AuthErrorsAreNotRetried) {
  FaultServer server([](const SeenRequest&) {
    return S3Error(403, "InvalidAccessKeyId",
                   "The AWS Access Key Id you provided does not exist in our records.");
  });
  auto store = StoreFor(server, 5);
  Status s = store->Put("a/b", "v");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "s3://bkt/pre: put 'a/b': HTTP 403 InvalidAccessKeyId: The AWS Access Key Id you "
            "provided does not exist in our records.");
  EXPECT_EQ(server.seen().size(), 1u);
}

TEST(S3Client, ConnectionRefusedIsRetriedThenReported) {
  int port;
  {
    FaultServer gone([](const SeenRequest&) { return Reply{}; });
    port = std::stoi(gone.endpoint().substr(gone.endpoint().rfind(':') + 1));
  }
  StoreOptions o;
  o.endpoint = "http://127.0.0.1:" + std::to_string(port);
  o.access_key = "K";
  o.secret_key = "S";
  o.max_attempts = 2;
  o.base_backoff_ms = 1;
  auto store = S3Store::Open("bkt", "", o, MapEnv({}));
  ASSERT_TRUE(store.ok());
  auto head = (*store)->Head("k");
  EXPECT_EQ(head.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(head.status().message().find("head 'k'"), std::string::npos);
  EXPECT_NE(head.status().message().find("after 2 attempts"), std::string::npos)
      << head.status().ToString();
  EXPECT_EQ((*store)->retries(), 1u);
}

TEST(S3Client, FailedPartAbortsTheMultipartUpload) {
  FaultServer server([](const SeenRequest& r) {
    Reply ok;
    if (r.method == "POST" && r.target.find("uploads=") != std::string::npos) {
      ok.body =
          "<InitiateMultipartUploadResult><UploadId>up-1</UploadId>"
          "</InitiateMultipartUploadResult>";
    } else if (r.method == "PUT" && r.target.find("partNumber=2&") != std::string::npos) {
      return S3Error(500, "InternalError", "disk on fire");
    } else if (r.method == "PUT") {
      ok.headers["ETag"] = "\"p\"";
    } else if (r.method == "DELETE") {
      ok.status = 204;
    }
    return ok;
  });
  StoreOptions o;
  o.endpoint = server.endpoint();
  o.access_key = "K";
  o.secret_key = "S";
  o.max_attempts = 2;
  o.base_backoff_ms = 1;
  o.multipart_threshold = 5 << 20;
  o.part_size = 5 << 20;
  o.parallelism = 1;  // parts in order, so the requests are predictable
  auto store = S3Store::Open("bkt", "", o, MapEnv({}));
  ASSERT_TRUE(store.ok());
  Status s = (*store)->Put("obj", std::string(12 << 20, 'x'));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("upload part 'obj': HTTP 500 InternalError: disk on fire"),
            std::string::npos)
      << s.ToString();
  std::vector<SeenRequest> seen = server.seen();
  ASSERT_EQ(seen.size(), 5u);  // create, part 1, part 2 twice, abort
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[1].target, "/bkt/obj?partNumber=1&uploadId=up-1");
  EXPECT_EQ(seen[1].body.size(), 5u << 20);
  EXPECT_EQ(seen[1].headers.at("x-amz-content-sha256"), "UNSIGNED-PAYLOAD");
  EXPECT_EQ(seen[4].method, "DELETE");
  EXPECT_EQ(seen[4].target, "/bkt/obj?uploadId=up-1");
  for (const SeenRequest& r : seen) {
    EXPECT_EQ(r.target.find("uploadId=up-1&complete"), std::string::npos);
    EXPECT_FALSE(r.method == "POST" && r.target.find("uploads=") == std::string::npos)
        << "CompleteMultipartUpload must not be sent";
  }
}

TEST(S3Client, NoSuchBucketNamesTheBucket) {
  FaultServer server([](const SeenRequest&) {
    return S3Error(404, "NoSuchBucket", "The specified bucket does not exist");
  });
  auto store = StoreFor(server, 3);
  auto got = store->Get("k");
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_NE(got.status().message().find("HTTP 404 NoSuchBucket"), std::string::npos);
  EXPECT_NE(got.status().message().find("bucket 'bkt' does not exist"), std::string::npos);
  EXPECT_EQ(store->Delete("k").code(), StatusCode::kNotFound);
  EXPECT_EQ(server.seen().size(), 2u);
}

// An earlier CompleteMultipartUpload attempt succeeded but its answer was lost: the retry gets
// NoSuchUpload, and the object under the key with the parts' multipart ETag proves success.
TEST(S3Client, LostCompleteAnswerIsRecognisedByTheMultipartETag) {
  const std::string part_md5 = "0cc175b9c0f1b6a831c399e269772661";  // MD5("a")
  std::string joined;
  for (int i = 0; i < 2; ++i) {
    for (size_t j = 0; j < 32; j += 2) {
      joined += static_cast<char>(std::stoi(part_md5.substr(j, 2), nullptr, 16));
    }
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(joined.data(), joined.size(), md, &len, EVP_md5(), nullptr);
  const std::string good_etag =
      sigv4::HexEncode(std::string_view(reinterpret_cast<char*>(md), len)) + "-2";
  for (const std::string& stored : {good_etag, std::string("ffff-2")}) {
    FaultServer server([&](const SeenRequest& r) {
      Reply ok;
      if (r.method == "POST" && r.target.find("uploads=") != std::string::npos) {
        ok.body =
            "<InitiateMultipartUploadResult><UploadId>u</UploadId>"
            "</InitiateMultipartUploadResult>";
      } else if (r.method == "PUT") {
        ok.headers["ETag"] = "\"" + part_md5 + "\"";
      } else if (r.method == "POST") {
        return S3Error(404, "NoSuchUpload", "The specified upload does not exist.");
      } else if (r.method == "HEAD") {
        ok.headers["ETag"] = "\"" + stored + "\"";
      } else if (r.method == "DELETE") {
        ok.status = 204;
      }
      return ok;
    });
    StoreOptions o;
    o.endpoint = server.endpoint();
    o.access_key = "K";
    o.secret_key = "S";
    o.multipart_threshold = 5 << 20;
    o.part_size = 5 << 20;
    auto store = S3Store::Open("bkt", "", o, MapEnv({}));
    ASSERT_TRUE(store.ok());
    Status s = (*store)->Put("obj", std::string(6 << 20, 'x'));
    if (stored == good_etag) {
      EXPECT_TRUE(s.ok()) << s.ToString();
    } else {
      EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
      EXPECT_NE(s.message().find("NoSuchUpload"), std::string::npos);
    }
  }
}

// Each S3 answer maps to the code callers react to, by S3's error code where it has one: a
// cache tier skips only ResourceExhausted, so a 403 must never read as "full".
TEST(S3Client, ErrorAnswersMapToCodesNeverByMessage) {
  struct Case {
    int status;
    std::string s3_code;
    StatusCode want;
  };
  const std::vector<Case> cases = {
      {403, "AccessDenied", StatusCode::kPermissionDenied},
      {403, "SignatureDoesNotMatch", StatusCode::kPermissionDenied},
      {401, "Unauthorized", StatusCode::kPermissionDenied},
      {403, "QuotaExceeded", StatusCode::kResourceExhausted},
      {404, "NoSuchKey", StatusCode::kNotFound},
      {409, "OperationAborted", StatusCode::kAborted},
      {409, "SomeConflict", StatusCode::kAborted},
      {400, "XAmzContentSHA256Mismatch", StatusCode::kDataLoss},
      {400, "BadDigest", StatusCode::kDataLoss},
      {400, "InvalidArgument", StatusCode::kInvalidArgument},
      {412, "PreconditionFailed", StatusCode::kFailedPrecondition},
      {503, "SlowDown", StatusCode::kUnavailable},
      {501, "NotImplemented", StatusCode::kUnimplemented},
  };
  for (const Case& c : cases) {
    FaultServer server([&](const SeenRequest&) { return S3Error(c.status, c.s3_code, "no"); });
    auto store = StoreFor(server, 2);
    const Status s = store->Put("a/b", "v");
    EXPECT_EQ(s.code(), c.want) << c.status << " " << c.s3_code << ": " << s.ToString();
    EXPECT_NE(s.message().find("HTTP " + std::to_string(c.status) + " " + c.s3_code),
              std::string::npos)
        << s.ToString();
  }
}

TEST(S3Client, ForbiddenHeadWithoutABodyIsPermissionDenied) {
  FaultServer server([](const SeenRequest&) {
    Reply r;
    r.status = 403;
    return r;
  });
  auto store = StoreFor(server, 1);
  const Status s = store->Head("k").status();
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.code(), StatusCode::kResourceExhausted);
}

TEST(S3Client, CreateOnlyPutOnAnExistingKeyIsAlreadyExists) {
  FaultServer server([](const SeenRequest& r) {
    if (r.headers.count("if-none-match") == 0) return S3Error(400, "Unexpected", "no header");
    return S3Error(412, "PreconditionFailed", "At least one of the pre-conditions failed");
  });
  auto store = StoreFor(server, 3);
  PutOptions once;
  once.create_if_absent = true;
  const Status s = store->Put("lock", "v", once);
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s.ToString();
  EXPECT_NE(s.message().find("already exists"), std::string::npos) << s.ToString();
  EXPECT_EQ(server.seen().size(), 1u);  // not retried
}

TEST(S3Client, ATimeoutOnTheLastAttemptIsDeadlineExceeded) {
  FaultServer server([](const SeenRequest&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    return Reply{};
  });
  auto store = StoreFor(server, 2, [](StoreOptions& o) { o.request_timeout_ms = 200; });
  const Status s = store->Put("k", "v");
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("(after 2 attempts)"), std::string::npos) << s.ToString();
}

// A parallel read pins its ranges to the first answer's ETag; an overwrite in between fails
// the If-Match (412): the read lost a race and says so with Aborted.
TEST(S3Client, ObjectReplacedDuringARangedReadIsAborted) {
  FaultServer server([](const SeenRequest& r) {
    Reply ok;
    if (r.headers.count("if-match") != 0) {
      return S3Error(412, "PreconditionFailed", "At least one of the pre-conditions failed");
    }
    ok.status = 206;
    ok.body = "01234";
    ok.headers["Content-Range"] = "bytes 0-4/10";
    ok.headers["ETag"] = "\"v1\"";
    return ok;
  });
  auto store = StoreFor(server, 1, [](StoreOptions& o) { o.part_size = 5; });
  auto got = store->Get("k");
  EXPECT_EQ(got.status().code(), StatusCode::kAborted) << got.status().ToString();
  EXPECT_NE(got.status().message().find("changed while being read"), std::string::npos);
}

}  // namespace
}  // namespace gantry::s3
