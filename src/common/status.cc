#include "gantry/common/status.h"

#include <cerrno>
#include <cstring>

namespace gantry {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kFailedPrecondition:
      return "FailedPrecondition";
    case StatusCode::kOutOfRange:
      return "OutOfRange";
    case StatusCode::kUnavailable:
      return "Unavailable";
    case StatusCode::kInternal:
      return "Internal";
    case StatusCode::kIoError:
      return "IoError";
    case StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case StatusCode::kResourceExhausted:
      return "ResourceExhausted";
    case StatusCode::kPermissionDenied:
      return "PermissionDenied";
    case StatusCode::kDataLoss:
      return "DataLoss";
    case StatusCode::kDeadlineExceeded:
      return "DeadlineExceeded";
    case StatusCode::kUnimplemented:
      return "Unimplemented";
    case StatusCode::kAborted:
      return "Aborted";
    case StatusCode::kCancelled:
      return "Cancelled";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  const std::string prefix = context + ": ";
  if (message_.compare(0, prefix.size(), prefix) == 0) return *this;
  return Status(code_, prefix + message_);
}

Status StatusFromErrno(int err, const std::string& what) {
  std::string text = std::strerror(err);
  StatusCode code = StatusCode::kIoError;
  switch (err) {
    case 0:
      return Internal(what + ": failed without an errno");
    case ENOENT:
      code = StatusCode::kNotFound;
      break;
    case EEXIST:
      code = StatusCode::kAlreadyExists;
      break;
    case ENOSPC:
      text = "disk full (" + text + ")";
      code = StatusCode::kResourceExhausted;
      break;
    case EDQUOT:
      text = "disk full: quota exceeded (" + text + ")";
      code = StatusCode::kResourceExhausted;
      break;
    case EFBIG:
      text = "file too large (" + text + ")";
      code = StatusCode::kResourceExhausted;
      break;
    case EMFILE:
    case ENFILE:
    case ENOMEM:
      code = StatusCode::kResourceExhausted;
      break;
    case EACCES:
    case EPERM:
    case EROFS:
      code = StatusCode::kPermissionDenied;
      break;
    case ETIMEDOUT:
      code = StatusCode::kDeadlineExceeded;
      break;
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EAGAIN:
      code = StatusCode::kUnavailable;
      break;
    case ECANCELED:
      code = StatusCode::kCancelled;
      break;
    default:
      break;
  }
  return Status(code, what + ": " + text);
}

int HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kAborted:
      return 409;
    case StatusCode::kFailedPrecondition:
      return 412;
    case StatusCode::kOutOfRange:
      return 416;
    case StatusCode::kCancelled:
      return 499;  // "client closed request", as nginx and gRPC gateways use it
    case StatusCode::kDataLoss:
    case StatusCode::kInternal:
    case StatusCode::kIoError:
      return 500;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    case StatusCode::kResourceExhausted:
      return 507;  // Insufficient Storage: our ResourceExhausted is out of space or quota
  }
  return 500;
}

}  // namespace gantry
