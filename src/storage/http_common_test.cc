// The one HTTP-to-code mapping of the storage layer (S3 and http:// stores), and the shared
// libcurl handle pool.
#include "storage/http_common.h"

#include <gtest/gtest.h>

namespace gantry::storage_internal {
namespace {

TEST(CodeForHttpError, ByStatus) {
  EXPECT_EQ(CodeForHttpError(400, ""), StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeForHttpError(401, ""), StatusCode::kPermissionDenied);
  EXPECT_EQ(CodeForHttpError(403, ""), StatusCode::kPermissionDenied);
  EXPECT_EQ(CodeForHttpError(404, ""), StatusCode::kNotFound);
  EXPECT_EQ(CodeForHttpError(405, ""), StatusCode::kUnimplemented);
  EXPECT_EQ(CodeForHttpError(408, ""), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(CodeForHttpError(409, ""), StatusCode::kAborted);
  EXPECT_EQ(CodeForHttpError(412, ""), StatusCode::kFailedPrecondition);
  EXPECT_EQ(CodeForHttpError(416, ""), StatusCode::kOutOfRange);
  for (int s : {429, 500, 502, 503, 504}) {
    EXPECT_EQ(CodeForHttpError(s, ""), StatusCode::kUnavailable) << s;
  }
  EXPECT_EQ(CodeForHttpError(501, ""), StatusCode::kUnimplemented);
  EXPECT_EQ(CodeForHttpError(507, ""), StatusCode::kResourceExhausted);
  EXPECT_EQ(CodeForHttpError(418, ""), StatusCode::kIoError);
}

TEST(CodeForHttpError, CreateOnlyTurnsAFailedPreconditionIntoAlreadyExists) {
  const HttpRequestKind create{.create_only = true};
  EXPECT_EQ(CodeForHttpError(412, "", create), StatusCode::kAlreadyExists);
  EXPECT_EQ(CodeForHttpError(412, "PreconditionFailed", create), StatusCode::kAlreadyExists);
  EXPECT_EQ(CodeForHttpError(412, "PreconditionFailed"), StatusCode::kFailedPrecondition);
  // A conflict with a concurrent conditional write: retry, which then finds the key.
  EXPECT_EQ(CodeForHttpError(409, "ConditionalRequestConflict", create), StatusCode::kAborted);
}

TEST(CodeForHttpError, S3CodesDecideOverTheStatus) {
  EXPECT_EQ(CodeForHttpError(404, "NoSuchKey"), StatusCode::kNotFound);
  EXPECT_EQ(CodeForHttpError(404, "NoSuchBucket"), StatusCode::kNotFound);
  EXPECT_EQ(CodeForHttpError(404, "NoSuchUpload"), StatusCode::kNotFound);
  EXPECT_EQ(CodeForHttpError(403, "AccessDenied"), StatusCode::kPermissionDenied);
  EXPECT_EQ(CodeForHttpError(403, "SignatureDoesNotMatch"), StatusCode::kPermissionDenied);
  EXPECT_EQ(CodeForHttpError(403, "InvalidAccessKeyId"), StatusCode::kPermissionDenied);
  // RGW answers an exceeded user or bucket quota with 403: full, not forbidden.
  EXPECT_EQ(CodeForHttpError(403, "QuotaExceeded"), StatusCode::kResourceExhausted);
  EXPECT_EQ(CodeForHttpError(400, "BadDigest"), StatusCode::kDataLoss);
  EXPECT_EQ(CodeForHttpError(400, "InvalidDigest"), StatusCode::kDataLoss);
  EXPECT_EQ(CodeForHttpError(400, "XAmzContentSHA256Mismatch"), StatusCode::kDataLoss);
  EXPECT_EQ(CodeForHttpError(503, "SlowDown"), StatusCode::kUnavailable);
  EXPECT_EQ(CodeForHttpError(200, "InternalError"), StatusCode::kUnavailable);
  EXPECT_EQ(CodeForHttpError(400, "RequestTimeout"), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(CodeForHttpError(409, "OperationAborted"), StatusCode::kAborted);
  // An unknown code falls back to the status.
  EXPECT_EQ(CodeForHttpError(403, "SomethingNew"), StatusCode::kPermissionDenied);
}

TEST(CodeForCurlError, TimeoutsAreDeadlineExceededLostConnectionsUnavailable) {
  EXPECT_EQ(CodeForCurlError(CURLE_OPERATION_TIMEDOUT), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(CodeForCurlError(CURLE_COULDNT_CONNECT), StatusCode::kUnavailable);
  EXPECT_EQ(CodeForCurlError(CURLE_RECV_ERROR), StatusCode::kUnavailable);
  EXPECT_EQ(CodeForCurlError(CURLE_PARTIAL_FILE), StatusCode::kUnavailable);
  EXPECT_EQ(CodeForCurlError(CURLE_WEIRD_SERVER_REPLY), StatusCode::kIoError);
}

TEST(CurlHandlePool, ReusesIdleHandlesUpToTheLimitAndDropsFailedOnes) {
  CurlHandlePool pool(1);
  CURL* a = pool.Acquire();
  CURL* b = pool.Acquire();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  pool.Release(a, true);
  pool.Release(b, true);  // over the limit: cleaned up
  EXPECT_EQ(pool.Acquire(), a);
  pool.Release(a, false);  // a failed transfer's handle is not kept
  CURL* c = pool.Acquire();
  ASSERT_NE(c, nullptr);
  pool.Release(c, true);
}

}  // namespace
}  // namespace gantry::storage_internal
