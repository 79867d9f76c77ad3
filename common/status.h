// Status and StatusOr<T>: the one error style of tqserve.
//
// Expected outcomes (bad input, out of space, a failed read) are a Status with a code and a message; asserts are
// for bugs only. Context is added on the way up with Status::WithContext or TQ_RETURN_IF_ERROR_CTX. Exceptions
// thrown by libraries are caught at the boundary of our code and turned into a Status.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace tq {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller's input is wrong (request, file, option)
  kNotFound,            // a named thing does not exist
  kAlreadyExists,
  kOutOfRange,          // a value or index past its allowed range
  kResourceExhausted,   // out of pages, budget, disk space (ENOSPC)
  kFailedPrecondition,  // the system is not in a state that allows this
  kUnavailable,         // draining, not ready, transient
  kDataLoss,            // corrupt or truncated data (checksum mismatch, short file)
  kIoError,             // the OS refused a read or write (EIO and friends)
  kUnimplemented,       // a valid request for something this build does not do
  kCancelled,
  kDeadlineExceeded,
  kPermissionDenied,
  kUnauthenticated,
  kInternal,            // a bug; should not happen
};

// Stable lower_snake name of a code, e.g. "invalid_argument".
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "invalid_argument: message" or "ok".
  std::string ToString() const;

  // Prepends context: "context: message". No-op on OK.
  Status WithContext(std::string_view context) const&;
  Status WithContext(std::string_view context) &&;

  // Explicitly drops a status whose failure the caller has decided not to care about.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Short constructors: InvalidArgumentError("...") etc.
Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status AlreadyExistsError(std::string message);
Status OutOfRangeError(std::string message);
Status ResourceExhaustedError(std::string message);
Status FailedPreconditionError(std::string message);
Status UnavailableError(std::string message);
Status DataLossError(std::string message);
Status IoError(std::string message);
Status UnimplementedError(std::string message);
Status CancelledError(std::string message);
Status DeadlineExceededError(std::string message);
Status PermissionDeniedError(std::string message);
Status UnauthenticatedError(std::string message);
Status InternalError(std::string message);

// Status from an errno value: ENOSPC -> resource_exhausted, ENOENT -> not_found, EACCES/EPERM ->
// permission_denied, everything else -> io_error. The message is "what: strerror(err)".
Status ErrnoToStatus(int err, std::string_view what);

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const T& value) : value_(value) {}           // NOLINT(google-explicit-constructor)
  StatusOr(T&& value) : value_(std::move(value)) {}     // NOLINT(google-explicit-constructor)
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.ok() && "StatusOr built from an OK Status without a value");
    if (status_.ok()) status_ = InternalError("StatusOr constructed from OK status without a value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const& { return status_; }
  Status status() && { return std::move(status_); }

  // Precondition: ok().
  const T& value() const& { assert(ok()); return *value_; }
  T& value() & { assert(ok()); return *value_; }
  T&& value() && { assert(ok()); return std::move(*value_); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  T value_or(T fallback) const& { return ok() ? *value_ : std::move(fallback); }

 private:
  Status status_;
  std::optional<T> value_;
};

namespace internal {
inline Status AsStatus(const Status& s) { return s; }
inline Status AsStatus(Status&& s) { return std::move(s); }
template <typename T>
Status AsStatus(const StatusOr<T>& s) { return s.status(); }
}  // namespace internal

}  // namespace tq

#define TQ_STATUS_CONCAT_INNER(a, b) a##b
#define TQ_STATUS_CONCAT(a, b) TQ_STATUS_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function if it is not OK.
#define TQ_RETURN_IF_ERROR(expr)                                   \
  do {                                                             \
    ::tq::Status tq_status_ = ::tq::internal::AsStatus(expr);      \
    if (!tq_status_.ok()) return tq_status_;                       \
  } while (0)

// Same, with context prepended to the message.
#define TQ_RETURN_IF_ERROR_CTX(expr, context)                      \
  do {                                                             \
    ::tq::Status tq_status_ = ::tq::internal::AsStatus(expr);      \
    if (!tq_status_.ok()) return tq_status_.WithContext(context);  \
  } while (0)

// `lhs = value of expr`, or returns its Status. lhs may be a declaration: TQ_ASSIGN_OR_RETURN(auto x, F());
#define TQ_ASSIGN_OR_RETURN(lhs, expr) \
  TQ_ASSIGN_OR_RETURN_IMPL(TQ_STATUS_CONCAT(tq_statusor_, __LINE__), lhs, expr)
#define TQ_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return std::move(tmp).status(); \
  lhs = std::move(tmp).value()
