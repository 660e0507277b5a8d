// The storage layer's shared HTTP pieces: the libcurl handle pool and the HTTP-to-code mapping
// (see http_common.h).
#include "storage/http_common.h"

#include <mutex>

namespace gantry::storage_internal {

CurlHandlePool::CurlHandlePool(size_t max_idle) : max_idle_(max_idle) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

CurlHandlePool::~CurlHandlePool() {
  for (CURL* h : idle_) curl_easy_cleanup(h);
}

CURL* CurlHandlePool::Acquire() {
  {
    MutexLock lock(mu_);
    if (!idle_.empty()) {
      CURL* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void CurlHandlePool::Release(CURL* h, bool reusable) {
  if (h == nullptr) return;
  if (reusable) {
    MutexLock lock(mu_);
    if (idle_.size() < max_idle_) {
      idle_.push_back(h);
      return;
    }
  }
  curl_easy_cleanup(h);
}

StatusCode CodeForHttpError(int http_status, std::string_view s3_code, HttpRequestKind kind) {
  if (!s3_code.empty()) {
    if (s3_code == "NoSuchKey" || s3_code == "NoSuchBucket" || s3_code == "NoSuchUpload") {
      return StatusCode::kNotFound;
    }
    if (s3_code == "AccessDenied" || s3_code == "SignatureDoesNotMatch" ||
        s3_code == "InvalidAccessKeyId" || s3_code == "ExpiredToken" || s3_code == "InvalidToken") {
      return StatusCode::kPermissionDenied;
    }
    if (s3_code == "QuotaExceeded") return StatusCode::kResourceExhausted;
    if (s3_code == "PreconditionFailed") {
      return kind.create_only ? StatusCode::kAlreadyExists : StatusCode::kFailedPrecondition;
    }
    if (s3_code == "BadDigest" || s3_code == "InvalidDigest" ||
        s3_code == "XAmzContentSHA256Mismatch") {
      return StatusCode::kDataLoss;
    }
    if (s3_code == "SlowDown" || s3_code == "ServiceUnavailable" || s3_code == "InternalError") {
      return StatusCode::kUnavailable;
    }
    if (s3_code == "RequestTimeout") return StatusCode::kDeadlineExceeded;
    if (s3_code == "ConditionalRequestConflict" || s3_code == "OperationAborted") {
      return StatusCode::kAborted;
    }
  }
  switch (http_status) {
    case 400:
      return StatusCode::kInvalidArgument;
    case 401:
    case 403:
      return StatusCode::kPermissionDenied;
    case 404:
      return StatusCode::kNotFound;
    case 405:
    case 501:
      return StatusCode::kUnimplemented;
    case 408:
      return StatusCode::kDeadlineExceeded;
    case 409:
      return StatusCode::kAborted;
    case 412:
      return kind.create_only ? StatusCode::kAlreadyExists : StatusCode::kFailedPrecondition;
    case 416:
      return StatusCode::kOutOfRange;
    case 429:
    case 500:
    case 502:
    case 503:
    case 504:
      return StatusCode::kUnavailable;
    case 507:
      return StatusCode::kResourceExhausted;
    default:
      return StatusCode::kIoError;
  }
}

StatusCode CodeForCurlError(CURLcode rc) {
  switch (rc) {
    case CURLE_OPERATION_TIMEDOUT:
      return StatusCode::kDeadlineExceeded;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return StatusCode::kUnavailable;
    default:
      return StatusCode::kIoError;
  }
}

}  // namespace gantry::storage_internal
