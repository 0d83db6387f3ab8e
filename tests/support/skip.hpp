// Visible skips. Catch2 v2 has no SKIP, and a case that returns early counts as passed: a case
// that cannot run here (a CPU level or feature, a shared model file, the CLI, a sanitizer) is
// tagged [gated] and calls SITSRT_SKIP(reason) at its start, before any assertion. That prints
// the marker line "SKIPPED: <reason>" and returns. A run in which every case that ran skipped,
// and none failed, exits with kSkipExitCode (support/catch_main.cpp), which ctest reports as
// skipped: each [gated] case is a ctest test of its own (support/register_unit_tests.cmake), and
// scripts/ctest-skips.sh prints each skipped test with its reason. A skip from a case without
// the [gated] tag fails the run, as it would otherwise pass unseen inside the executable's test.
// Skip whole cases only: a case that skips after running part of itself is reported as skipped.
#pragma once

#include <sstream>
#include <string>

namespace sitsrt::test {

inline constexpr int kSkipExitCode = 77;  // ctest SKIP_RETURN_CODE

// Marks the running case as skipped and prints the marker line (defined in catch_main.cpp).
void note_skip(const std::string& reason);

}  // namespace sitsrt::test

// Skips the running case (returns from the enclosing void function); `reason` is streamed, as
// in SITSRT_SKIP("this CPU lacks " << name).
#define SITSRT_SKIP(reason)                              \
  do {                                                   \
    std::ostringstream sitsrt_skip_reason;               \
    sitsrt_skip_reason << reason;                        \
    ::sitsrt::test::note_skip(sitsrt_skip_reason.str()); \
    return;                                              \
  } while (false)
