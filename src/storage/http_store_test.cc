// The http:// peer store against a scripted local server: every HTTP answer and transport
// failure maps to the code the shared mapping promises, and writes are refused as read-only.
// (src/agent/agent_test.cc runs the store against the real agent.)
#include "gantry/storage/http_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "common/test_support.h"
#include "storage/test_http_server.h"

namespace gantry {
namespace {

using storage_test::FaultServer;
using storage_test::Reply;
using storage_test::SeenRequest;
using ::testing::HasSubstr;

std::unique_ptr<ObjectStore> StoreFor(const FaultServer& server, int timeout_ms = 5000) {
  HttpStoreOptions o;
  o.timeout_ms = timeout_ms;
  auto s = OpenHttpStore(server.endpoint(), o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

Reply Answer(int status, std::string body = "refused") {
  Reply r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

// The one rule for a daemon's agent token: the named file's secret, else $GANTRY_AGENT_TOKEN,
// and nothing that cannot go into a Bearer header.
TEST(AgentToken, FileThenEnvironmentAndOnlyValidTokens) {
  test_support::TempDir tmp;
  const std::string file = tmp.path() + "/token";
  std::ofstream(file) << "from-file\n";
  ASSERT_EQ(setenv(kAgentTokenEnv, "from-env", 1), 0);
  EXPECT_EQ(*AgentTokenFrom(file), "from-file");
  EXPECT_EQ(*AgentTokenFrom(""), "from-env");
  EXPECT_EQ(AgentTokenFrom(tmp.path() + "/missing").status().code(), StatusCode::kNotFound);
  std::ofstream(file) << "two words\n";
  EXPECT_EQ(AgentTokenFrom(file).status().code(), StatusCode::kInvalidArgument);
  ASSERT_EQ(setenv(kAgentTokenEnv, "bad\r\nheader", 1), 0);
  EXPECT_EQ(AgentTokenFrom("").status().code(), StatusCode::kInvalidArgument);
  ASSERT_EQ(unsetenv(kAgentTokenEnv), 0);
  EXPECT_EQ(*AgentTokenFrom(""), "");
}

TEST(HttpStoreErrors, ForbiddenIsPermissionDeniedNeverResourceExhausted) {
  for (int status : {401, 403}) {
    FaultServer server([&](const SeenRequest&) { return Answer(status); });
    auto store = StoreFor(server);
    for (const Status& s : {store->Get("a/b").status(), store->GetRange("a/b", 0, 4).status(),
                            store->Head("a/b").status()}) {
      EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
      EXPECT_NE(s.code(), StatusCode::kResourceExhausted);
      EXPECT_THAT(s.message(), HasSubstr("HTTP " + std::to_string(status)));
      EXPECT_THAT(s.message(), HasSubstr("'a/b'"));
    }
  }
}

TEST(HttpStoreErrors, EachStatusHasItsCode) {
  const std::vector<std::pair<int, StatusCode>> cases = {
      {400, StatusCode::kInvalidArgument},    {404, StatusCode::kNotFound},
      {405, StatusCode::kUnimplemented},      {409, StatusCode::kAborted},
      {412, StatusCode::kFailedPrecondition}, {429, StatusCode::kUnavailable},
      {500, StatusCode::kUnavailable},        {502, StatusCode::kUnavailable},
      {503, StatusCode::kUnavailable},        {504, StatusCode::kUnavailable},
      {507, StatusCode::kResourceExhausted},  {418, StatusCode::kIoError},
  };
  for (const auto& [http, code] : cases) {
    const int status = http;  // a lambda cannot capture a structured binding in C++20 (clang)
    FaultServer server([status](const SeenRequest&) { return Answer(status); });
    auto store = StoreFor(server);
    const Status s = store->Get("k").status();
    EXPECT_EQ(s.code(), code) << status << ": " << s.ToString();
  }
}

TEST(HttpStoreErrors, WritesToTheReadOnlyStoreAreUnimplementedAndSendNothing) {
  FaultServer server([](const SeenRequest&) { return Answer(200, "x"); });
  auto store = StoreFor(server);
  PutOptions once;
  once.create_if_absent = true;
  for (const Status& s : {store->Put("k", "v"), store->Put("k", "v", once), store->Delete("k"),
                          store->PutFile("k", "/etc/hostname"), store->List("", "", 10).status()}) {
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("read-only"));
  }
  EXPECT_TRUE(server.seen().empty());
}

TEST(HttpStoreErrors, ATimeoutIsDeadlineExceeded) {
  FaultServer server([](const SeenRequest&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    return Answer(200, "late");
  });
  auto store = StoreFor(server, 200);
  const Status s = store->Get("k").status();
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("timed out after 200 ms"));
}

}  // namespace
}  // namespace gantry
