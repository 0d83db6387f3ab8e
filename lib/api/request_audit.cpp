#include "api/request_audit.hpp"

#include <exception>

namespace sitsrt {

RequestAudit::RequestAudit(std::vector<std::shared_ptr<AuditSink>> sinks, std::vector<AnomalyRule> rules,
                           const std::function<void(const AnomalyEvent&)>& on_anomaly, std::atomic<bool>& breaker,
                           std::string request_id)
    : sinks_(std::move(sinks)),
      monitor_(std::move(rules), request_id),
      on_anomaly_(on_anomaly),
      breaker_(breaker),
      request_id_(std::move(request_id)) {}

void RequestAudit::begin(const RequestRecord& record) {
  level_ = record.level;
  prompt_tokens_ = static_cast<std::int64_t>(record.input_tokens.size());
  for (const auto& s : sinks_) {
    try {
      s->on_request_begin(record);
    } catch (const std::exception& e) {
      // The sinks that saw the begin record get an end record: no log is left with an open request.
      end_with_error(e.what());
      throw;
    }
    ++begun_;
  }
}

bool RequestAudit::on_token(const TokenEvent& event) {
  tokens_.push_back(event.token_id);
  if (level_ != TraceLevel::kOff) {
    for (const auto& s : sinks_) s->on_token(request_id_, event);
  }
  if (monitor_.empty()) return true;
  tripped_.clear();
  monitor_.observe(event, tripped_);
  bool keep_going = true;
  for (const AnomalyEvent& a : tripped_) {
    for (const auto& s : sinks_) s->on_anomaly(a);
    if (on_anomaly_) on_anomaly_(a);
    if (a.action == AnomalyAction::kOpenBreaker) breaker_.store(true);
    if (a.action != AnomalyAction::kContinue) keep_going = false;
  }
  if (!keep_going) stopped_by_rule_ = true;
  return keep_going;
}

void RequestAudit::end(GenerationResult& result) {
  // The generator reports a stop by any callback as kCallback; a rule's stop is ours.
  if (stopped_by_rule_ && result.finish_reason == FinishReason::kCallback) {
    result.finish_reason = FinishReason::kCircuitBreaker;
  }
  result.request_id = request_id_;
  if (sinks_.empty()) return;
  RequestSummary s;
  s.request_id = request_id_;
  s.finish_reason = to_string(result.finish_reason);
  s.prompt_tokens = result.timings.prompt_tokens;
  s.generated_tokens = result.timings.generated_tokens;
  s.tokens = result.tokens;
  s.prefill_ns = static_cast<std::int64_t>(result.timings.prefill_seconds * 1e9);
  s.decode_ns = static_cast<std::int64_t>(result.timings.decode_seconds * 1e9);
  s.total_ns = static_cast<std::int64_t>(result.timings.total_seconds * 1e9);
  // Every sink gets its end record once, also when another one fails at it; the first failure
  // then fails the request (end_with_error sends nothing more).
  ended_ = true;
  std::exception_ptr first_failure;
  for (const auto& sink : sinks_) {
    try {
      sink->on_request_end(s);
    } catch (const std::exception&) {
      if (!first_failure) first_failure = std::current_exception();
    }
  }
  if (first_failure) std::rethrow_exception(first_failure);
}

void RequestAudit::end_with_error(const std::string& message) {
  if (ended_) return;
  ended_ = true;
  RequestSummary s;
  s.request_id = request_id_;
  s.finish_reason = "error";
  s.error = message;
  // What was generated before the error (token records may exist for each of them).
  s.prompt_tokens = prompt_tokens_;
  s.generated_tokens = static_cast<std::int64_t>(tokens_.size());
  s.tokens = tokens_;
  for (std::size_t i = 0; i < begun_; ++i) {
    const auto& sink = sinks_[i];
    try {
      sink->on_request_end(s);
    } catch (const std::exception&) {  // the request's own error is the one to report
    }
  }
}

}  // namespace sitsrt
