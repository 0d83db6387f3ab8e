// Helpers to raise sitsrt::Error with fmt-formatted messages.
#pragma once

#include <sitsrt/error.hpp>

#include <fmt/format.h>

namespace sitsrt {

template <typename... Args>
[[noreturn]] void raise(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(code, fmt::format(format, std::forward<Args>(args)...));
}

// Internal invariant check; a failure is a library bug, reported as kInternal with file:line.
#define SITSRT_ASSERT(cond)                                                                  \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      ::sitsrt::raise(::sitsrt::ErrorCode::kInternal, "internal check failed: {} ({}:{})", \
                      #cond, __FILE__, __LINE__);                                            \
    }                                                                                        \
  } while (0)

}  // namespace sitsrt
