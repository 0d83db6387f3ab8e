#include "audit/records.hpp"

#include "core/check.hpp"

#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

namespace sitsrt::audit {
namespace {

using nlohmann::json;

// Times in records are integer nanoseconds, so the only non-integer numbers are float32 values.
std::int64_t to_ns(double seconds) { return static_cast<std::int64_t>(std::llround(seconds * 1e9)); }

template <typename T>
struct IsVector : std::false_type {};
template <typename E>
struct IsVector<std::vector<E>> : std::true_type {};

// `v` as T, or nullopt when it is another JSON type or out of T's range.
template <typename T>
std::optional<T> convert(const json& v) {
  if constexpr (std::is_same_v<T, json>) {
    return v;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (v.is_boolean()) return v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return static_cast<T>(u);
    } else if (v.is_number_integer()) {
      const auto i = v.get<std::int64_t>();
      if (i >= 0 || std::is_signed_v<T>) {
        if constexpr (std::is_signed_v<T>) {
          if (i >= std::numeric_limits<T>::min() && i <= std::numeric_limits<T>::max()) return static_cast<T>(i);
        } else {
          if (static_cast<std::uint64_t>(i) <= std::numeric_limits<T>::max()) return static_cast<T>(i);
        }
      }
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (v.is_number()) {
      const double d = v.get<double>();
      if (std::fabs(d) <= static_cast<double>(std::numeric_limits<T>::max())) return static_cast<T>(d);
    }
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (v.is_string()) return v.get<std::string>();
  } else if constexpr (IsVector<T>::value) {
    if (!v.is_array()) return std::nullopt;
    T out;
    for (const json& item : v) {
      auto e = convert<typename T::value_type>(item);
      if (!e) return std::nullopt;
      out.push_back(std::move(*e));
    }
    return out;
  }
  return std::nullopt;
}

template <typename T>
T field(const json& j, const char* key) {
  return record_field<T>(j, key);
}
template <typename T>
T optional_field(const json& j, const char* key, T fallback) {
  return j.contains(key) ? field<T>(j, key) : fallback;
}

}  // namespace

template <typename T>
T record_field(const json& j, const char* key) {
  if (!j.is_object()) raise(ErrorCode::kInvalidArgument, "audit record is not an object (reading '{}')", key);
  const auto it = j.find(key);
  if (it == j.end()) raise(ErrorCode::kInvalidArgument, "audit record lacks field '{}'", key);
  auto value = convert<T>(*it);
  if (!value) raise(ErrorCode::kInvalidArgument, "audit record field '{}' has the wrong type or is out of range", key);
  return std::move(*value);
}
template std::string record_field<std::string>(const json&, const char*);
template json record_field<json>(const json&, const char*);
template bool record_field<bool>(const json&, const char*);
template int record_field<int>(const json&, const char*);
template std::int64_t record_field<std::int64_t>(const json&, const char*);
template std::uint64_t record_field<std::uint64_t>(const json&, const char*);
template float record_field<float>(const json&, const char*);
template double record_field<double>(const json&, const char*);
template std::vector<std::string> record_field<std::vector<std::string>>(const json&, const char*);
template std::vector<std::int32_t> record_field<std::vector<std::int32_t>>(const json&, const char*);

json request_to_json(const RequestRecord& r) {
  const EngineDigest& e = r.engine;
  const SamplingRecord& s = r.sampling;
  json out{
      {"type", "request"},
      {"req", r.request_id},
      {"ts_ns", r.unix_time_ns},
      {"model", {{"path", r.model_path}, {"sha256", r.model_sha256}}},
      {"engine",
       {{"version", e.library_version}, {"weights", e.weights_format}, {"conversion", e.weights_conversion},
        {"placement", e.weights_placement}, {"kv", e.kv_cache_type}, {"isa", e.cpu_isa},
        {"activations", e.activations},
        {"threads", e.threads}, {"max_batch_tokens", e.max_batch_tokens}, {"ctx", e.context_length},
        {"deterministic", e.deterministic}, {"batch_invariant", e.batch_invariant}}},
      {"sampling",
       {{"temperature", s.temperature}, {"top_k", s.top_k}, {"top_p", s.top_p}, {"min_p", s.min_p},
        {"repeat_penalty", s.repeat_penalty}, {"repeat_last_n", s.repeat_last_n}, {"seed", s.seed},
        {"max_new_tokens", s.max_new_tokens}, {"top_logprobs", s.top_logprobs}, {"stop", s.stop},
        {"stop_at_eos", s.stop_at_end_of_sequence}}},
      {"level", to_string(r.level)},
      {"input_sha256", r.input_sha256},
      {"input_tokens_sha256", r.input_tokens_sha256},
      {"input_tokens", r.input_tokens},
      {"meta", {{"tenant", r.metadata.tenant}, {"user", r.metadata.user}, {"tags", r.metadata.tags}}},
  };
  if (!r.chat_messages_json.empty()) {
    json messages = json::parse(r.chat_messages_json, nullptr, /*allow_exceptions=*/false);
    if (!messages.is_array()) raise(ErrorCode::kInternal, "audit record: chat messages are not a JSON array");
    out["chat"] = {{"messages", std::move(messages)},
                   {"template_sha256", r.chat_template_sha256},
                   {"add_generation_prompt", r.chat_add_generation_prompt}};
  }
  return out;
}

json token_to_json(const std::string& request_id, const TokenEvent& e, TraceLevel level) {
  json j{{"type", "token"}, {"req", request_id}, {"i", e.index}, {"id", e.token_id}, {"text", e.text},
         {"lp", e.logprob}, {"t_ns", to_ns(e.seconds_since_start)}};
  if (level == TraceLevel::kTopK || level == TraceLevel::kFull) {
    json top = json::array();
    for (const auto& t : e.top) top.push_back(json::array({t.id, t.logprob}));
    j["top"] = std::move(top);
    j["entropy"] = e.entropy;
  }
  if (level == TraceLevel::kFull && !e.full_logprobs.empty()) {
    json full = json::array();
    for (const float lp : e.full_logprobs) full.push_back(std::isfinite(lp) ? json(lp) : json(nullptr));
    j["full"] = std::move(full);
  }
  return j;
}

json anomaly_to_json(const AnomalyEvent& a) {
  return json{{"type", "anomaly"}, {"req", a.request_id}, {"rule", a.rule}, {"action", to_string(a.action)},
              {"i", a.token_index}, {"detail", a.detail}};
}

json summary_to_json(const RequestSummary& s) {
  return json{{"type", "end"},           {"req", s.request_id},
              {"finish", s.finish_reason}, {"error", s.error},
              {"prompt_tokens", s.prompt_tokens}, {"generated_tokens", s.generated_tokens},
              {"tokens", s.tokens},        {"prefill_ns", s.prefill_ns},
              {"decode_ns", s.decode_ns},  {"total_ns", s.total_ns}};
}

json shadow_to_json(const ShadowDivergence& d) {
  const auto finite = [](const std::vector<float>& v) {
    json a = json::array();
    for (const float x : v) a.push_back(std::isfinite(x) ? json(x) : json(nullptr));
    return a;
  };
  return json{{"type", "shadow"},
              {"req", d.request_id},
              {"shadow_model_sha256", d.shadow_model_sha256},
              {"lp_diff", finite(d.logprob_diff)},
              {"topk_kl", finite(d.topk_kl)},
              {"max_abs_lp_diff", std::isfinite(d.max_abs_logprob_diff) ? json(d.max_abs_logprob_diff) : json(nullptr)},
              {"mean_topk_kl", std::isfinite(d.mean_topk_kl) ? json(d.mean_topk_kl) : json(nullptr)},
              {"tripped", d.tripped}};
}

RequestRecord request_from_json(const json& j) {
  RequestRecord r;
  r.request_id = field<std::string>(j, "req");
  r.unix_time_ns = field<std::int64_t>(j, "ts_ns");
  const json model = field<json>(j, "model");
  r.model_path = field<std::string>(model, "path");
  r.model_sha256 = field<std::string>(model, "sha256");
  const json e = field<json>(j, "engine");
  r.engine.library_version = field<std::string>(e, "version");
  r.engine.weights_format = field<std::string>(e, "weights");
  // Absent in logs written before these fields: such engines ran as-stored, resident (the defaults).
  r.engine.weights_conversion = optional_field<std::string>(e, "conversion", "as-stored");
  r.engine.weights_placement = optional_field<std::string>(e, "placement", "resident");
  r.engine.kv_cache_type = field<std::string>(e, "kv");
  r.engine.cpu_isa = field<std::string>(e, "isa");
  r.engine.activations = field<std::string>(e, "activations");
  r.engine.threads = field<int>(e, "threads");
  r.engine.max_batch_tokens = field<std::int64_t>(e, "max_batch_tokens");
  r.engine.context_length = field<std::int64_t>(e, "ctx");
  r.engine.deterministic = field<bool>(e, "deterministic");
  r.engine.batch_invariant = optional_field<bool>(e, "batch_invariant", false);
  const json s = field<json>(j, "sampling");
  r.sampling.temperature = field<float>(s, "temperature");
  r.sampling.top_k = field<std::int32_t>(s, "top_k");
  r.sampling.top_p = field<float>(s, "top_p");
  r.sampling.min_p = field<float>(s, "min_p");
  r.sampling.repeat_penalty = field<float>(s, "repeat_penalty");
  r.sampling.repeat_last_n = field<std::int32_t>(s, "repeat_last_n");
  r.sampling.seed = field<std::uint64_t>(s, "seed");
  r.sampling.max_new_tokens = field<std::int32_t>(s, "max_new_tokens");
  r.sampling.top_logprobs = field<std::int32_t>(s, "top_logprobs");
  r.sampling.stop = field<std::vector<std::string>>(s, "stop");
  r.sampling.stop_at_end_of_sequence = field<bool>(s, "stop_at_eos");
  r.level = parse_trace_level(field<std::string>(j, "level"));
  r.input_sha256 = field<std::string>(j, "input_sha256");
  r.input_tokens_sha256 = field<std::string>(j, "input_tokens_sha256");
  r.input_tokens = field<std::vector<std::int32_t>>(j, "input_tokens");
  const json m = field<json>(j, "meta");
  r.metadata.tenant = field<std::string>(m, "tenant");
  r.metadata.user = field<std::string>(m, "user");
  r.metadata.tags = field<std::vector<std::string>>(m, "tags");
  if (j.contains("chat")) {
    const json c = field<json>(j, "chat");
    const json messages = field<json>(c, "messages");
    if (!messages.is_array()) raise(ErrorCode::kInvalidArgument, "audit record field 'chat.messages' is not an array");
    r.chat_messages_json = messages.dump();
    r.chat_template_sha256 = field<std::string>(c, "template_sha256");
    r.chat_add_generation_prompt = field<bool>(c, "add_generation_prompt");
  }
  return r;
}

}  // namespace sitsrt::audit

namespace sitsrt {

const char* to_string(TraceLevel level) noexcept {
  switch (level) {
    case TraceLevel::kOff: return "off";
    case TraceLevel::kTokens: return "tokens";
    case TraceLevel::kTopK: return "topk";
    case TraceLevel::kFull: return "full";
  }
  return "unknown";
}

TraceLevel parse_trace_level(const std::string& name) {
  if (name == "off") return TraceLevel::kOff;
  if (name == "tokens") return TraceLevel::kTokens;
  if (name == "topk") return TraceLevel::kTopK;
  if (name == "full") return TraceLevel::kFull;
  raise(ErrorCode::kInvalidArgument, "audit level '{}' is not one of off, tokens, topk, full", name);
}

const char* to_string(AnomalyAction action) noexcept {
  switch (action) {
    case AnomalyAction::kContinue: return "continue";
    case AnomalyAction::kStopRequest: return "stop_request";
    case AnomalyAction::kOpenBreaker: return "open_breaker";
  }
  return "unknown";
}

AuditSink::~AuditSink() = default;

}  // namespace sitsrt
