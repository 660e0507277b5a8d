// Status and Result<T>: the error vocabulary of every fallible path in Gantry.
//
// A Status is either OK or carries a code and a message that names what failed (file, line,
// field, object). Library code returns these instead of throwing across module boundaries.
//
//   Result<Cluster> c = LoadClusterSpec("philly.yaml");
//   if (!c.ok()) return c.status();
//   GANTRY_ASSIGN_OR_RETURN(Workload w, ImportTrace(path, options));
//
// Both types are values; they are not thread-safe to mutate concurrently, like any value.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace gantry {

// The canonical codes, after absl::StatusCode (and gRPC's): a caller decides what to do from the
// code alone, never from the message. Add a code only where some caller reacts to it.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller's input is malformed (bad trace row, bad spec field)
  kNotFound,            // a named thing does not exist (file, team, GPU type, object)
  kFailedPrecondition,  // well-formed but cannot be honoured in this state (job larger than
                        // cluster, a condition on an object did not hold: HTTP 412)
  kOutOfRange,          // a read past the end, a number too large for its type
  kUnavailable,         // a transient failure; retrying may help (connection refused, HTTP 503)
  kInternal,            // a broken invariant in Gantry itself
  kIoError,             // an I/O failure no other code describes (EIO)
  kAlreadyExists,       // a create-only write found the name taken (EEXIST, a lost put race)
  kResourceExhausted,   // out of space or quota (ENOSPC, EDQUOT, a tier at capacity)
  kPermissionDenied,    // not allowed (EACCES, EPERM, EROFS, HTTP 401 and 403)
  kDataLoss,            // stored bytes are damaged (a checksum mismatch, a truncated file)
  kDeadlineExceeded,    // a deadline passed before the operation finished (a timeout)
  kUnimplemented,       // the backend or build cannot do this (a read-only store asked to write)
  kAborted,             // lost a race with a concurrent writer (HTTP 409); retry from the start
  kCancelled,           // the caller cancelled the operation
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: trace.csv:12: field 'num_gpus': not a number".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context` (e.g. the file being read), unless
  // it already starts with that context: two layers naming the same thing (the engine and the
  // command both say which profile) should not make the message say it twice.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }

// The one errno-to-code mapping every path that calls the OS uses, so that "disk full" or "not
// allowed" reads the same from every module: ENOENT NotFound; EEXIST AlreadyExists; ENOSPC,
// EDQUOT, EFBIG, EMFILE, ENFILE, ENOMEM ResourceExhausted; EACCES, EPERM, EROFS
// PermissionDenied; ETIMEDOUT DeadlineExceeded; ECONNREFUSED, ECONNRESET, ECONNABORTED, EPIPE,
// EHOSTUNREACH, ENETUNREACH, EAGAIN Unavailable; ECANCELED Cancelled; EIO and anything else
// IoError. The message is `what` followed by the errno's text ("open /t/x: No space left on
// device"); ENOSPC and EDQUOT say "disk full" first, since an operator has to act on them.
Status StatusFromErrno(int err, const std::string& what);

// The one code-to-HTTP mapping (the agent now, the daemon next). Chosen so that the storage
// clients' HTTP-to-code mapping gives most codes back (400, 403, 404, 412, 416, 501, 503, 507
// round trip); AlreadyExists and Aborted share 409 Conflict, which a client reads as Aborted
// unless its request was create-only, and a 504 reads as Unavailable (a gateway's timeout):
//   OK 200; InvalidArgument 400; PermissionDenied 403; NotFound 404; AlreadyExists, Aborted 409;
//   FailedPrecondition 412; OutOfRange 416; Cancelled 499; DataLoss, Internal, IoError 500;
//   Unimplemented 501; Unavailable 503; DeadlineExceeded 504; ResourceExhausted 507.
int HttpStatusFor(StatusCode code);

// Result<T> holds either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (status_.ok()) status_ = Internal("Result constructed from an OK status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace gantry

#define GANTRY_CONCAT_INNER_(a, b) a##b
#define GANTRY_CONCAT_(a, b) GANTRY_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define GANTRY_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::gantry::Status gantry_status_ = (expr);        \
    if (!gantry_status_.ok()) return gantry_status_; \
  } while (0)

// Declares `lhs` from the value of `rexpr` (a Result<T>), or returns its error.
#define GANTRY_ASSIGN_OR_RETURN(lhs, rexpr) \
  GANTRY_ASSIGN_OR_RETURN_IMPL_(GANTRY_CONCAT_(gantry_result_, __LINE__), lhs, rexpr)
#define GANTRY_ASSIGN_OR_RETURN_IMPL_(result, lhs, rexpr) \
  auto result = (rexpr);                                  \
  if (!result.ok()) return result.status();               \
  lhs = std::move(result).value()
