// The real S3 endpoint the test suite runs against (Ceph RGW, started by scripts/test or
// `source "$(scripts/rgw start)"`), as tests read it from the environment: GANTRY_S3_ENDPOINT,
// GANTRY_S3_ACCESS_KEY, GANTRY_S3_SECRET_KEY, GANTRY_S3_BUCKET. Header-only, for tests.
//
// A test that needs it starts with GANTRY_REQUIRE_RGW(rgw): without an endpoint the test is
// skipped on a developer's machine but fails under CI (CI set), where scripts/test must have
// started RGW, so a broken start can never pass as a row of skips.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "gantry/storage/object_store.h"

namespace gantry::test_support {

struct RgwEnv {
  std::string endpoint;
  std::string access_key;
  std::string secret_key;
  std::string bucket;

  StoreOptions Options() const {
    StoreOptions o;
    o.endpoint = endpoint;
    o.access_key = access_key;
    o.secret_key = secret_key;
    o.region = "us-east-1";
    return o;
  }
  // A key prefix no other run shares: runs of the suite, and tests within it, share the bucket.
  static std::string UniquePrefix(std::string_view what) {
    std::random_device rd;
    return std::string(what) + "-" + std::to_string(::getpid()) + "-" +
           std::to_string(rd() % 1000000);
  }
  // "s3://BUCKET/<what>-<unique>".
  std::string UniqueUrl(std::string_view what) const {
    return "s3://" + bucket + "/" + UniquePrefix(what);
  }
};

inline std::string EnvOrEmpty(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// The endpoint from the environment; nullopt when GANTRY_S3_ENDPOINT is unset or empty.
inline std::optional<RgwEnv> RgwFromEnv() {
  RgwEnv e{EnvOrEmpty("GANTRY_S3_ENDPOINT"), EnvOrEmpty("GANTRY_S3_ACCESS_KEY"),
           EnvOrEmpty("GANTRY_S3_SECRET_KEY"), EnvOrEmpty("GANTRY_S3_BUCKET")};
  if (e.endpoint.empty()) return std::nullopt;
  return e;
}

}  // namespace gantry::test_support

// Declares `std::optional<RgwEnv> var` and returns from the calling test body or SetUp when
// there is no endpoint: a failure under CI, a skip elsewhere. Also fails when the endpoint is
// set without its keys or bucket.
#define GANTRY_REQUIRE_RGW(var)                                                                   \
  const std::optional<::gantry::test_support::RgwEnv> var = ::gantry::test_support::RgwFromEnv(); \
  if (!var.has_value()) {                                                                         \
    if (!::gantry::test_support::EnvOrEmpty("CI").empty()) {                                      \
      FAIL() << "CI is set but GANTRY_S3_ENDPOINT is not: scripts/test did not start RGW";        \
    }                                                                                             \
    GTEST_SKIP() << "GANTRY_S3_ENDPOINT unset (source \"$(scripts/rgw start)\" to run)";          \
  }                                                                                               \
  if (var->access_key.empty() || var->secret_key.empty() || var->bucket.empty()) {                \
    FAIL() << "GANTRY_S3_ENDPOINT is set but GANTRY_S3_ACCESS_KEY, GANTRY_S3_SECRET_KEY "         \
              "or GANTRY_S3_BUCKET is not";                                                       \
  }
