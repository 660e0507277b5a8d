// The error vocabulary's two mappings: errno to code, and code to HTTP status.
#include "gantry/common/status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>

namespace gantry {
namespace {

using ::testing::HasSubstr;

TEST(StatusFromErrno, OutOfSpaceAndQuotaAreResourceExhausted) {
  const Status nospc = StatusFromErrno(ENOSPC, "write /t/x");
  EXPECT_EQ(nospc.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(nospc.message(), HasSubstr("write /t/x: disk full"));
  const Status quota = StatusFromErrno(EDQUOT, "write /t/x");
  EXPECT_EQ(quota.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(quota.message(), HasSubstr("quota exceeded"));
  EXPECT_EQ(StatusFromErrno(EFBIG, "w").code(), StatusCode::kResourceExhausted);
}

TEST(StatusFromErrno, NotAllowedIsPermissionDeniedNeverResourceExhausted) {
  for (int err : {EACCES, EPERM, EROFS}) {
    const Status s = StatusFromErrno(err, "open /t/x");
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("open /t/x: "));
  }
}

TEST(StatusFromErrno, EveryOtherMapping) {
  EXPECT_EQ(StatusFromErrno(ENOENT, "x").code(), StatusCode::kNotFound);
  EXPECT_EQ(StatusFromErrno(EEXIST, "x").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(StatusFromErrno(ETIMEDOUT, "x").code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(StatusFromErrno(ECONNREFUSED, "x").code(), StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromErrno(ECONNRESET, "x").code(), StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromErrno(ECANCELED, "x").code(), StatusCode::kCancelled);
  EXPECT_EQ(StatusFromErrno(EIO, "x").code(), StatusCode::kIoError);
  EXPECT_EQ(StatusFromErrno(EBADF, "x").code(), StatusCode::kIoError);
  // errno 0 means the caller lost it: a bug, never success.
  EXPECT_EQ(StatusFromErrno(0, "x").code(), StatusCode::kInternal);
}

TEST(HttpStatusFor, EachCodeHasItsAnswer) {
  EXPECT_EQ(HttpStatusFor(StatusCode::kOk), 200);
  EXPECT_EQ(HttpStatusFor(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(HttpStatusFor(StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(StatusCode::kAlreadyExists), 409);
  EXPECT_EQ(HttpStatusFor(StatusCode::kAborted), 409);
  EXPECT_EQ(HttpStatusFor(StatusCode::kFailedPrecondition), 412);
  EXPECT_EQ(HttpStatusFor(StatusCode::kOutOfRange), 416);
  EXPECT_EQ(HttpStatusFor(StatusCode::kCancelled), 499);
  EXPECT_EQ(HttpStatusFor(StatusCode::kDataLoss), 500);
  EXPECT_EQ(HttpStatusFor(StatusCode::kInternal), 500);
  EXPECT_EQ(HttpStatusFor(StatusCode::kIoError), 500);
  EXPECT_EQ(HttpStatusFor(StatusCode::kUnimplemented), 501);
  EXPECT_EQ(HttpStatusFor(StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusFor(StatusCode::kResourceExhausted), 507);
}

TEST(HttpStatusFor, ErrorsAreNeverSuccessAndFullIsNotForbidden) {
  for (int c = static_cast<int>(StatusCode::kInvalidArgument);
       c <= static_cast<int>(StatusCode::kCancelled); ++c) {
    const int http = HttpStatusFor(static_cast<StatusCode>(c));
    EXPECT_GE(http, 400) << StatusCodeName(static_cast<StatusCode>(c));
  }
  EXPECT_NE(HttpStatusFor(StatusCode::kResourceExhausted),
            HttpStatusFor(StatusCode::kPermissionDenied));
}

}  // namespace
}  // namespace gantry
