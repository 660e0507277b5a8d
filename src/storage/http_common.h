// What the two HTTP clients of the storage layer (the S3 backend and the http:// peer store)
// share: a pool of idle libcurl handles, and the one mapping from an HTTP answer (its status,
// and S3's error code when there is one) to a StatusCode.
//
// CurlHandlePool is thread-safe; the mapping functions are pure.
#pragma once

#include <curl/curl.h>

#include <cstddef>
#include <string_view>
#include <vector>

#include "gantry/common/status.h"
#include "gantry/common/thread_annotations.h"

namespace gantry::storage_internal {

// Idle easy handles, each keeping its connection alive, so sequential requests on a thread
// reuse the TCP connection instead of paying a handshake per request. Initialises libcurl once
// per process.
class CurlHandlePool {
 public:
  explicit CurlHandlePool(size_t max_idle);
  ~CurlHandlePool();
  CurlHandlePool(const CurlHandlePool&) = delete;
  CurlHandlePool& operator=(const CurlHandlePool&) = delete;

  // An idle handle, or a fresh one (nullptr only if libcurl cannot allocate).
  CURL* Acquire() EXCLUDES(mu_);
  // A handle whose transfer failed may hold a connection in an unknown state: pass
  // reusable=false and it is dropped. Handles beyond max_idle are dropped too.
  void Release(CURL* h, bool reusable) EXCLUDES(mu_);

 private:
  const size_t max_idle_;
  Mutex mu_;
  std::vector<CURL*> idle_ GUARDED_BY(mu_);
};

// What a request was, where that changes the meaning of an answer.
struct HttpRequestKind {
  // A create-only write (If-None-Match: *): 409 and 412 mean the name is taken.
  bool create_only = false;
};

// The code for an HTTP error answer. `s3_code` is the <Code> of an S3 error body (empty for
// other servers and for bodiless answers); where it is known it decides over the status:
//   NoSuchKey, NoSuchBucket, NoSuchUpload NotFound; AccessDenied, SignatureDoesNotMatch,
//   InvalidAccessKeyId, ExpiredToken, InvalidToken PermissionDenied; QuotaExceeded (RGW answers
//   it with 403) ResourceExhausted; PreconditionFailed FailedPrecondition; BadDigest,
//   InvalidDigest, XAmzContentSHA256Mismatch DataLoss (the bytes the server got are not the
//   bytes sent); SlowDown, ServiceUnavailable, InternalError Unavailable; RequestTimeout
//   DeadlineExceeded; ConditionalRequestConflict, OperationAborted Aborted.
// Otherwise by status: 400 InvalidArgument; 401, 403 PermissionDenied; 404 NotFound;
//   405, 501 Unimplemented; 408 DeadlineExceeded; 409 Aborted; 412 FailedPrecondition;
//   416 OutOfRange; 429, 500, 502, 503, 504 Unavailable; 507 ResourceExhausted; else IoError.
// A create-only request turns 412 (and PreconditionFailed) into AlreadyExists.
StatusCode CodeForHttpError(int http_status, std::string_view s3_code, HttpRequestKind kind = {});

// The code for a libcurl transport failure: timeouts (total, connect or the low-speed limit)
// DeadlineExceeded; connection refused, reset, lost mid-body, or a name that does not resolve
// Unavailable; a malformed answer or anything else IoError.
StatusCode CodeForCurlError(CURLcode rc);

}  // namespace gantry::storage_internal
