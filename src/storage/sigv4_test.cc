// SigV4 signing against AWS's published vectors.
//
// Sources (vectors copied verbatim):
//  * "Signature Version 4 test suite" (aws-sig-v4-test-suite, 2015 edition),
//    https://docs.aws.amazon.com/general/latest/gr/signature-v4-test-suite.html :
//    access key AKIDEXAMPLE, secret wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, region us-east-1,
//    service "service", X-Amz-Date 20150830T123600Z, host example.amazonaws.com.
//  * Amazon S3 API Reference, "Examples: Signature Calculations for the Authorization Header:
//    Transferring Payload in a Single Chunk" (sig-v4-header-based-auth.html):
//    access key AKIAIOSFODNN7EXAMPLE, secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY,
//    x-amz-date 20130524T000000Z, bucket examplebucket.
#include "storage/sigv4.h"

#include <gtest/gtest.h>

namespace gantry::sigv4 {
namespace {

const Credentials kSuite{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
const Credentials kS3Docs{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
constexpr char kSuiteDate[] = "20150830T123600Z";
constexpr char kS3Date[] = "20130524T000000Z";

Request SuiteRequest(std::string method, std::string path,
                     std::vector<std::pair<std::string, std::string>> query,
                     std::vector<std::pair<std::string, std::string>> extra_headers,
                     std::string_view body) {
  Request r;
  r.method = std::move(method);
  r.canonical_uri = std::move(path);
  r.query = std::move(query);
  r.headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", kSuiteDate}};
  for (auto& h : extra_headers) r.headers.push_back(std::move(h));
  r.payload_hash = Sha256Hex(body);
  return r;
}

std::string SuiteAuth(std::string_view signed_headers, std::string_view signature) {
  return "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
         "SignedHeaders=" +
         std::string(signed_headers) + ", Signature=" + std::string(signature);
}

TEST(SigV4Suite, GetVanilla) {
  const Signature s =
      Sign(SuiteRequest("GET", "/", {}, {}, ""), kSuite, "us-east-1", "service", kSuiteDate);
  // get-vanilla.creq, get-vanilla.sts, get-vanilla.authz
  EXPECT_EQ(s.canonical_request,
            "GET\n"
            "/\n"
            "\n"
            "host:example.amazonaws.com\n"
            "x-amz-date:20150830T123600Z\n"
            "\n"
            "host;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n"
            "20150830T123600Z\n"
            "20150830/us-east-1/service/aws4_request\n"
            "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
  EXPECT_EQ(s.authorization,
            SuiteAuth("host;x-amz-date",
                      "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"));
}

TEST(SigV4Suite, GetVanillaQueryOrderKeyCase) {
  // GET /?Param2=value2&Param1=value1
  const Signature s =
      Sign(SuiteRequest("GET", "/", {{"Param2", "value2"}, {"Param1", "value1"}}, {}, ""), kSuite,
           "us-east-1", "service", kSuiteDate);
  EXPECT_EQ(s.canonical_request,
            "GET\n"
            "/\n"
            "Param1=value1&Param2=value2\n"
            "host:example.amazonaws.com\n"
            "x-amz-date:20150830T123600Z\n"
            "\n"
            "host;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.authorization,
            SuiteAuth("host;x-amz-date",
                      "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"));
}

TEST(SigV4Suite, GetVanillaQueryOrderValue) {
  // GET /?Param1=value2&Param1=value1
  const Signature s =
      Sign(SuiteRequest("GET", "/", {{"Param1", "value2"}, {"Param1", "value1"}}, {}, ""), kSuite,
           "us-east-1", "service", kSuiteDate);
  EXPECT_EQ(s.authorization,
            SuiteAuth("host;x-amz-date",
                      "5772eed61e12b33fae39ee5e7012498b51d56abc0abb7c60486157bd471c4694"));
}

TEST(SigV4Suite, GetVanillaUtf8Query) {
  // GET /?ሴ=bar (U+1234 as UTF-8)
  const Signature s = Sign(SuiteRequest("GET", "/", {{"\xE1\x88\xB4", "bar"}}, {}, ""), kSuite,
                           "us-east-1", "service", kSuiteDate);
  EXPECT_NE(s.canonical_request.find("\n%E1%88%B4=bar\n"), std::string::npos);
  EXPECT_EQ(s.authorization,
            SuiteAuth("host;x-amz-date",
                      "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"));
}

TEST(SigV4Suite, GetUnreserved) {
  const std::string path = "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  EXPECT_EQ(UriEncode(path, false), path);
  const Signature s =
      Sign(SuiteRequest("GET", path, {}, {}, ""), kSuite, "us-east-1", "service", kSuiteDate);
  EXPECT_EQ(s.authorization,
            SuiteAuth("host;x-amz-date",
                      "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"));
}

TEST(SigV4Suite, GetHeaderValueTrim) {
  const Signature s =
      Sign(SuiteRequest("GET", "/", {},
                        {{"My-Header1", " value1"}, {"My-Header2", "\"a   b   c\""}}, ""),
           kSuite, "us-east-1", "service", kSuiteDate);
  EXPECT_NE(s.canonical_request.find("my-header1:value1\nmy-header2:\"a b c\"\n"),
            std::string::npos);
  EXPECT_EQ(s.authorization,
            SuiteAuth("host;my-header1;my-header2;x-amz-date",
                      "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"));
}

TEST(SigV4Suite, GetHeaderKeyDuplicate) {
  const Signature s =
      Sign(SuiteRequest(
               "GET", "/", {},
               {{"My-Header1", "value2"}, {"My-Header1", "value2"}, {"My-Header1", "value1"}}, ""),
           kSuite, "us-east-1", "service", kSuiteDate);
  EXPECT_NE(s.canonical_request.find("my-header1:value2,value2,value1\n"), std::string::npos);
  EXPECT_EQ(s.authorization,
            SuiteAuth("host;my-header1;x-amz-date",
                      "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"));
}

TEST(SigV4Suite, GetHeaderValueOrder) {
  const Signature s = Sign(SuiteRequest("GET", "/", {},
                                        {{"My-Header1", "value4"},
                                         {"My-Header1", "value1"},
                                         {"My-Header1", "value3"},
                                         {"My-Header1", "value2"}},
                                        ""),
                           kSuite, "us-east-1", "service", kSuiteDate);
  EXPECT_EQ(s.authorization,
            SuiteAuth("host;my-header1;x-amz-date",
                      "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01"));
}

TEST(SigV4Suite, PostXWwwFormUrlencoded) {
  const Signature s =
      Sign(SuiteRequest("POST", "/", {}, {{"Content-Type", "application/x-www-form-urlencoded"}},
                        "Param1=value1"),
           kSuite, "us-east-1", "service", kSuiteDate);
  EXPECT_EQ(s.canonical_request,
            "POST\n"
            "/\n"
            "\n"
            "content-type:application/x-www-form-urlencoded\n"
            "host:example.amazonaws.com\n"
            "x-amz-date:20150830T123600Z\n"
            "\n"
            "content-type;host;x-amz-date\n"
            "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e");
  EXPECT_EQ(s.authorization,
            SuiteAuth("content-type;host;x-amz-date",
                      "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"));
}

Request S3DocRequest(std::string method, std::string path,
                     std::vector<std::pair<std::string, std::string>> query,
                     std::vector<std::pair<std::string, std::string>> extra,
                     std::string payload_hash) {
  Request r;
  r.method = std::move(method);
  r.canonical_uri = std::move(path);
  r.query = std::move(query);
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"x-amz-date", kS3Date},
               {"x-amz-content-sha256", payload_hash}};
  for (auto& h : extra) r.headers.push_back(std::move(h));
  r.payload_hash = std::move(payload_hash);
  return r;
}

std::string S3DocAuth(std::string_view signed_headers, std::string_view signature) {
  return "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
         "SignedHeaders=" +
         std::string(signed_headers) + ",Signature=" + std::string(signature);
}

TEST(SigV4S3Docs, GetObjectWithRange) {
  const Signature s =
      Sign(S3DocRequest("GET", "/test.txt", {}, {{"Range", "bytes=0-9"}}, Sha256Hex("")), kS3Docs,
           "us-east-1", "s3", kS3Date, ",");
  EXPECT_EQ(
      s.canonical_request,
      "GET\n"
      "/test.txt\n"
      "\n"
      "host:examplebucket.s3.amazonaws.com\n"
      "range:bytes=0-9\n"
      "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
      "x-amz-date:20130524T000000Z\n"
      "\n"
      "host;range;x-amz-content-sha256;x-amz-date\n"
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n"
            "20130524T000000Z\n"
            "20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(s.authorization,
            S3DocAuth("host;range;x-amz-content-sha256;x-amz-date",
                      "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"));
}

TEST(SigV4S3Docs, PutObject) {
  const std::string body = "Welcome to Amazon S3.";
  const std::string hash = Sha256Hex(body);
  EXPECT_EQ(hash, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  const Signature s = Sign(S3DocRequest("PUT", "/" + UriEncode("test$file.text", false), {},
                                        {{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                                         {"x-amz-storage-class", "REDUCED_REDUNDANCY"}},
                                        hash),
                           kS3Docs, "us-east-1", "s3", kS3Date, ",");
  EXPECT_EQ(
      s.canonical_request,
      "PUT\n"
      "/test%24file.text\n"
      "\n"
      "date:Fri, 24 May 2013 00:00:00 GMT\n"
      "host:examplebucket.s3.amazonaws.com\n"
      "x-amz-content-sha256:44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072\n"
      "x-amz-date:20130524T000000Z\n"
      "x-amz-storage-class:REDUCED_REDUNDANCY\n"
      "\n"
      "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n"
      "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n"
            "20130524T000000Z\n"
            "20130524/us-east-1/s3/aws4_request\n"
            "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d");
  EXPECT_EQ(s.authorization,
            S3DocAuth("date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
                      "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"));
}

TEST(SigV4S3Docs, GetBucketLifecycle) {
  // GET /?lifecycle: a parameter without a value signs as "lifecycle=".
  const Signature s = Sign(S3DocRequest("GET", "/", {{"lifecycle", ""}}, {}, Sha256Hex("")),
                           kS3Docs, "us-east-1", "s3", kS3Date, ",");
  EXPECT_EQ(
      s.canonical_request,
      "GET\n"
      "/\n"
      "lifecycle=\n"
      "host:examplebucket.s3.amazonaws.com\n"
      "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
      "x-amz-date:20130524T000000Z\n"
      "\n"
      "host;x-amz-content-sha256;x-amz-date\n"
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n"
            "20130524T000000Z\n"
            "20130524/us-east-1/s3/aws4_request\n"
            "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca");
  EXPECT_EQ(s.authorization,
            S3DocAuth("host;x-amz-content-sha256;x-amz-date",
                      "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"));
}

TEST(SigV4S3Docs, ListObjects) {
  // GET /?max-keys=2&prefix=J
  const Signature s =
      Sign(S3DocRequest("GET", "/", {{"prefix", "J"}, {"max-keys", "2"}}, {}, Sha256Hex("")),
           kS3Docs, "us-east-1", "s3", kS3Date, ",");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n"
            "20130524T000000Z\n"
            "20130524/us-east-1/s3/aws4_request\n"
            "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7");
  EXPECT_EQ(s.authorization,
            S3DocAuth("host;x-amz-content-sha256;x-amz-date",
                      "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"));
}

TEST(SigV4Helpers, UriEncode) {
  EXPECT_EQ(UriEncode("a b/c", true), "a%20b%2Fc");
  EXPECT_EQ(UriEncode("a b/c", false), "a%20b/c");
  EXPECT_EQ(UriEncode("x+y=z&", true), "x%2By%3Dz%26");
  EXPECT_EQ(UriEncode("\xC3\xB1", true), "%C3%B1");
}

TEST(SigV4Helpers, AmzDate) {
  EXPECT_EQ(AmzDate(1440938160), "20150830T123600Z");
  EXPECT_EQ(AmzDate(0), "19700101T000000Z");
}

TEST(SigV4Helpers, SessionTokenIsSigned) {
  Request r = SuiteRequest("GET", "/", {}, {{"X-Amz-Security-Token", "tok"}}, "");
  const Signature s = Sign(r, kSuite, "us-east-1", "service", kSuiteDate);
  EXPECT_EQ(s.signed_headers, "host;x-amz-date;x-amz-security-token");
}

}  // namespace
}  // namespace gantry::sigv4
