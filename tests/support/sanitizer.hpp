// Whether this test binary runs under a sanitizer (scripts/sanitize.sh: ASan + UBSan, or TSan).
// The heaviest kernel sweeps then run one thread count (the one that splits the work) and skip
// their widest shapes: a sanitizer looks for bad accesses and races, which the edge shapes and
// the threaded split exercise; the release build's ctest runs every combination.
#pragma once

namespace sitsrt::test {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace sitsrt::test
