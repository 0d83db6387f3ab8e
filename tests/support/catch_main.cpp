// Catch2 main for every unit test: runs the session, then turns "every case that ran skipped"
// into the skip exit code (support/skip.hpp).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "support/skip.hpp"

#include <algorithm>
#include <iostream>
#include <string>

namespace {

struct SkipCount {
  int cases = 0;          // cases started
  int skipped_cases = 0;  // of those, cases that skipped
  bool current_gated = false;
  bool current_skipped = false;
  std::string misplaced;  // a case without [gated] that skipped
};
SkipCount counts;

class SkipListener : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    ++counts.cases;
    counts.current_skipped = false;
    counts.current_gated = std::find(info.lcaseTags.begin(), info.lcaseTags.end(), "gated") != info.lcaseTags.end();
    current_name_ = info.name;
  }
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    if (counts.current_skipped) ++counts.skipped_cases;
    if (counts.current_skipped && !counts.current_gated && counts.misplaced.empty()) counts.misplaced = current_name_;
    TestEventListenerBase::testCaseEnded(stats);
  }

 private:
  std::string current_name_;
};

}  // namespace

CATCH_REGISTER_LISTENER(SkipListener)

void sitsrt::test::note_skip(const std::string& reason) {
  counts.current_skipped = true;
  std::cout << "SKIPPED: " << reason << std::endl;
}

int main(int argc, char* argv[]) {
  const int result = Catch::Session().run(argc, argv);
  if (!counts.misplaced.empty()) {
    std::cout << "error: the case \"" << counts.misplaced
              << "\" skipped but is not tagged [gated], so ctest would count it as passed" << std::endl;
    return result != 0 ? result : 1;
  }
  if (result == 0 && counts.cases > 0 && counts.skipped_cases == counts.cases) return sitsrt::test::kSkipExitCode;
  return result;
}
