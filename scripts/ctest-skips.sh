#!/usr/bin/env bash
# Prints the tests the last ctest run in a build folder skipped, each with the reason it gave
# (its "SKIPPED: <reason>" lines, tests/support/skip.hpp): ctest's summary names skipped tests
# but does not show their output. Run by scripts/test.sh and scripts/sanitize.sh after ctest.
#   scripts/ctest-skips.sh [build folder, default build]
set -euo pipefail
log="${1:-build}/Testing/Temporary/LastTest.log"
[ -f "$log" ] || exit 0
awk '
  /^[0-9]+\/[0-9]+ Test: / { sub(/^[0-9]+\/[0-9]+ Test: /, ""); name = $0; reasons = ""; next }
  /^SKIPPED: / { sub(/^SKIPPED: /, ""); reasons = reasons (reasons == "" ? "" : "; ") $0; next }
  # A case that skips does nothing else (a skip in a case not tagged [gated] fails its run), so
  # a test whose output has a marker line is one ctest reported as skipped.
  /^<end of output>$/ { if (name != "" && reasons != "") lines[++n] = name ": " reasons; name = "" }
  END {
    if (n == 0) exit
    print "Skipped tests (" n "), and why:"
    for (i = 1; i <= n; ++i) print "  " lines[i] | "sort"
  }
' "$log"
