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

TEST(Status, WithContextNamesEachContextOnce) {
  const Status s = InvalidArgument("plugin 'power': unknown argument 'reserv'");
  const Status once = s.WithContext("profile 'p'");
  EXPECT_EQ(once.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(once.message(), "profile 'p': plugin 'power': unknown argument 'reserv'");
  EXPECT_EQ(once.WithContext("profile 'p'").message(), once.message());
  // Another context, or one that is only a prefix of the first, is added.
  EXPECT_EQ(once.WithContext("profile 'q'").message(),
            "profile 'q': profile 'p': plugin 'power': unknown argument 'reserv'");
  EXPECT_EQ(once.WithContext("profile").message(), "profile: " + once.message());
  EXPECT_TRUE(Status::Ok().WithContext("x").ok());
}

}  // namespace
}  // namespace gantry
