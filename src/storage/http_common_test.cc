// The one HTTP-to-code mapping of the storage layer (S3 and http:// stores), and the shared
// libcurl handle pool.
#include "storage/http_common.h"

#include <gtest/gtest.h>

#include <vector>

namespace gantry::storage_internal {
namespace {

struct Case {
  int status;
  const char* s3_code;
  StatusCode want;
};

void ExpectCodes(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    EXPECT_EQ(CodeForHttpError(c.status, c.s3_code), c.want) << c.status << " " << c.s3_code;
  }
}

TEST(CodeForHttpError, ByStatus) {
  ExpectCodes({{400, "", StatusCode::kInvalidArgument},
               {401, "", StatusCode::kPermissionDenied},
               {403, "", StatusCode::kPermissionDenied},
               {404, "", StatusCode::kNotFound},
               {405, "", StatusCode::kUnimplemented},
               {408, "", StatusCode::kDeadlineExceeded},
               {409, "", StatusCode::kAborted},
               {412, "", StatusCode::kFailedPrecondition},
               {416, "", StatusCode::kOutOfRange},
               {429, "", StatusCode::kUnavailable},
               {500, "", StatusCode::kUnavailable},
               {501, "", StatusCode::kUnimplemented},
               {502, "", StatusCode::kUnavailable},
               {503, "", StatusCode::kUnavailable},
               {504, "", StatusCode::kUnavailable},
               {507, "", StatusCode::kResourceExhausted},
               {418, "", StatusCode::kIoError}});
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
  ExpectCodes({{404, "NoSuchKey", StatusCode::kNotFound},
               {404, "NoSuchBucket", StatusCode::kNotFound},
               {404, "NoSuchUpload", StatusCode::kNotFound},
               {403, "AccessDenied", StatusCode::kPermissionDenied},
               {403, "SignatureDoesNotMatch", StatusCode::kPermissionDenied},
               {403, "InvalidAccessKeyId", StatusCode::kPermissionDenied},
               // RGW answers an exceeded user or bucket quota with 403: full, not forbidden.
               {403, "QuotaExceeded", StatusCode::kResourceExhausted},
               {400, "BadDigest", StatusCode::kDataLoss},
               {400, "InvalidDigest", StatusCode::kDataLoss},
               {400, "XAmzContentSHA256Mismatch", StatusCode::kDataLoss},
               {503, "SlowDown", StatusCode::kUnavailable},
               {200, "InternalError", StatusCode::kUnavailable},
               {400, "RequestTimeout", StatusCode::kDeadlineExceeded},
               {409, "OperationAborted", StatusCode::kAborted},
               // An unknown code falls back to the status.
               {403, "SomethingNew", StatusCode::kPermissionDenied}});
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
