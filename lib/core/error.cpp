#include <sitsrt/error.hpp>

#include "core/printable.hpp"

namespace sitsrt {

const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kInvalidModel: return "invalid model";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kIo: return "i/o error";
    case ErrorCode::kOutOfMemory: return "out of memory";
    case ErrorCode::kRejected: return "rejected";
    case ErrorCode::kInternal: return "internal error";
  }
  return "unknown error";
}

// Messages carry strings from files (keys, tensor names, paths): escaped once here, so that a NUL
// cannot cut what() short and no terminal control sequence reaches a user's screen or log.
Error::Error(ErrorCode code, const std::string& message) : std::runtime_error(printable(message)), code_(code) {}

}  // namespace sitsrt
