// The audit context of one request: its sinks, trace level and anomaly rules. Built by the
// engine before generation; its token hook runs inside the generation callback.
#pragma once

#include "audit/anomaly.hpp"

#include <sitsrt/audit.hpp>
#include <sitsrt/generation.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace sitsrt {

class RequestAudit {
 public:
  RequestAudit(std::vector<std::shared_ptr<AuditSink>> sinks, std::vector<AnomalyRule> rules,
               const std::function<void(const AnomalyEvent&)>& on_anomaly, std::atomic<bool>& breaker,
               std::string request_id);

  // False when neither sinks nor rules are attached: the request runs without hooks.
  [[nodiscard]] bool active() const noexcept { return !sinks_.empty() || !monitor_.empty(); }
  [[nodiscard]] const std::string& request_id() const noexcept { return request_id_; }

  // Reports the request to every sink; when a sink throws, the sinks before it get an error end
  // record and the exception propagates.
  void begin(const RequestRecord& record);
  // Reports the token and applies the rules; false when a rule stops the request.
  bool on_token(const TokenEvent& event);
  // Reports the end; turns a stop by a rule into FinishReason::kCircuitBreaker.
  void end(GenerationResult& result);
  void end_with_error(const std::string& message);

 private:
  std::vector<std::shared_ptr<AuditSink>> sinks_;
  audit::AnomalyMonitor monitor_;
  const std::function<void(const AnomalyEvent&)>& on_anomaly_;
  std::atomic<bool>& breaker_;
  std::string request_id_;
  TraceLevel level_ = TraceLevel::kOff;
  bool stopped_by_rule_ = false;
  std::vector<AnomalyEvent> tripped_;  // reused per token
  std::size_t begun_ = 0;              // sinks that accepted the begin record
  bool ended_ = false;                 // end records sent (by end or end_with_error)
  std::int64_t prompt_tokens_ = 0;
  std::vector<std::int32_t> tokens_;   // generated so far, for an error's end record
};

}  // namespace sitsrt
