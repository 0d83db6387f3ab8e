// Evaluates anomaly rules over one request's token stream.
#pragma once

#include <sitsrt/audit.hpp>
#include <sitsrt/token_event.hpp>

#include <string>
#include <vector>

namespace sitsrt::audit {

// Throws sitsrt::Error(kInvalidArgument) naming the rule when its fields do not fit its kind.
void validate_rule(const AnomalyRule& rule);

// Not thread-safe: one per request.
class AnomalyMonitor {
 public:
  AnomalyMonitor(std::vector<AnomalyRule> rules, std::string request_id);
  [[nodiscard]] bool empty() const noexcept { return rules_.empty(); }
  // Appends an event to `out` for every rule `event` trips. A kEntropyAbove rule counts again
  // from zero after it trips; a kBannedString rule trips once per occurrence.
  void observe(const TokenEvent& event, std::vector<AnomalyEvent>& out);

 private:
  std::vector<AnomalyRule> rules_;
  std::vector<std::int32_t> run_lengths_;  // per rule: consecutive high-entropy steps
  std::string request_id_;
  std::string tail_;        // recent released text, long enough to catch a banned string split across tokens
  std::size_t keep_ = 0;    // longest banned string - 1
};

}  // namespace sitsrt::audit
