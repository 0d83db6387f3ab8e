// The single exception type thrown across the public API.
#pragma once

#include <sitsrt/export.hpp>

#include <stdexcept>
#include <string>

namespace sitsrt {

enum class ErrorCode {
  kInvalidArgument,  // a parameter or option the caller passed is out of range
  kInvalidModel,     // a model file is malformed, truncated or inconsistent
  kUnsupported,      // valid input that this build cannot handle (tensor type, architecture)
  kIo,               // the operating system refused a file operation
  kOutOfMemory,      // an allocation or a memory budget could not be satisfied
  kRejected,         // the engine refused the request (e.g. a tripped circuit breaker)
  kInternal,         // a broken invariant inside the library (a bug)
};

SITSRT_API const char* to_string(ErrorCode code) noexcept;

// Every failure a caller can cause is reported as sitsrt::Error; the message names the
// file, field or parameter at fault. Nothing in the library aborts on user input. The message
// is printable: control characters (NUL and newlines included), terminal escapes, bidirectional
// overrides and invalid UTF-8 that came from a file are shown as \xNN escapes.
class SITSRT_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  [[nodiscard]] ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace sitsrt
