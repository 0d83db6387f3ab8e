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

// Field `key` of a record as T (std::string, bool, an integer type, float, double, a vector of
// std::string or std::int32_t, or nlohmann::json). Throws sitsrt::Error(kInvalidArgument) naming
// the field when it is absent, of another JSON type, or out of T's range: a log never causes a
// narrowing or undefined conversion (e.g. 1.8e29 as an int64 timestamp, found by fuzzing).
template <typename T>
T record_field(const nlohmann::json& j, const char* key);

}  // namespace sitsrt::audit
