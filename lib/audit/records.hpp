// Audit records as JSON objects (the schema of docs/audit-log.md), and back.
#pragma once

#include <sitsrt/audit.hpp>
#include <sitsrt/token_event.hpp>

#include <nlohmann/json.hpp>

#include <string>

namespace sitsrt::audit {

inline constexpr int kLogFormatVersion = 1;

nlohmann::json request_to_json(const RequestRecord& r);
// The fields of `level`: tokens -> id, text, logprob, time; topk -> + top, entropy; full -> + full.
nlohmann::json token_to_json(const std::string& request_id, const TokenEvent& e, TraceLevel level);
nlohmann::json anomaly_to_json(const AnomalyEvent& a);
nlohmann::json summary_to_json(const RequestSummary& s);
nlohmann::json shadow_to_json(const ShadowDivergence& d);

// Inverse of request_to_json; throws sitsrt::Error(kInvalidArgument) naming a missing field.
RequestRecord request_from_json(const nlohmann::json& j);

}  // namespace sitsrt::audit
