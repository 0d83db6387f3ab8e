#include "audit/anomaly.hpp"

#include "core/check.hpp"

#include <cmath>

namespace sitsrt::audit {

void validate_rule(const AnomalyRule& rule) {
  using Kind = AnomalyRule::Kind;
  const std::string& n = rule.name;
  switch (rule.kind) {
    case Kind::kEntropyAbove:
      if (rule.consecutive < 1) raise(ErrorCode::kInvalidArgument, "anomaly rule '{}': consecutive must be >= 1", n);
      [[fallthrough]];
    case Kind::kLogprobBelow:
      if (!std::isfinite(rule.threshold)) raise(ErrorCode::kInvalidArgument, "anomaly rule '{}': threshold is not finite", n);
      break;
    case Kind::kBannedToken:
      if (rule.token_id < 0) raise(ErrorCode::kInvalidArgument, "anomaly rule '{}': token_id must be >= 0", n);
      break;
    case Kind::kBannedString:
      if (rule.text.empty()) raise(ErrorCode::kInvalidArgument, "anomaly rule '{}': text is empty", n);
      break;
  }
}

AnomalyMonitor::AnomalyMonitor(std::vector<AnomalyRule> rules, std::string request_id)
    : rules_(std::move(rules)), run_lengths_(rules_.size(), 0), request_id_(std::move(request_id)) {
  for (const auto& r : rules_) {
    validate_rule(r);
    if (r.kind == AnomalyRule::Kind::kBannedString) keep_ = std::max(keep_, r.text.size() - 1);
  }
}

void AnomalyMonitor::observe(const TokenEvent& event, std::vector<AnomalyEvent>& out) {
  using Kind = AnomalyRule::Kind;
  const std::size_t old_size = tail_.size();
  tail_ += event.text;
  for (std::size_t r = 0; r < rules_.size(); ++r) {
    const AnomalyRule& rule = rules_[r];
    std::string detail;
    switch (rule.kind) {
      case Kind::kEntropyAbove:
        run_lengths_[r] = event.entropy > rule.threshold ? run_lengths_[r] + 1 : 0;
        if (run_lengths_[r] >= rule.consecutive) {
          detail = fmt::format("entropy {} > {} for {} consecutive tokens", event.entropy, rule.threshold,
                               rule.consecutive);
          run_lengths_[r] = 0;
        }
        break;
      case Kind::kLogprobBelow:
        if (event.logprob < rule.threshold) detail = fmt::format("logprob {} < {}", event.logprob, rule.threshold);
        break;
      case Kind::kBannedToken:
        if (event.token_id == rule.token_id) detail = fmt::format("banned token id {}", rule.token_id);
        break;
      case Kind::kBannedString: {
        // Only occurrences that end in this step's text count, so each is reported once.
        const std::size_t from = old_size >= rule.text.size() - 1 ? old_size - (rule.text.size() - 1) : 0;
        if (tail_.find(rule.text, from) != std::string::npos) detail = fmt::format("banned text \"{}\"", rule.text);
        break;
      }
    }
    if (!detail.empty()) out.push_back({request_id_, rule.name, rule.action, event.index, std::move(detail)});
  }
  if (tail_.size() > keep_) tail_.erase(0, tail_.size() - keep_);
}

}  // namespace sitsrt::audit
