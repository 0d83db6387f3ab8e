#include "openai_protocol.hpp"

#include <cmath>
#include <limits>

namespace sitsrt::server {
namespace {

using nlohmann::json;

[[noreturn]] void invalid(const std::string& param, const std::string& message) {
  throw ProtocolError(400, "invalid_request_error", message, param);
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "a number";
  }
}

// The field when present and not null.
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

bool boolean(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) invalid(name, std::string("'") + name + "' must be a boolean, not " + type_name(*v));
  return v->get<bool>();
}

double number(const json& body, const char* name, double fallback, double lo, double hi) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_number()) invalid(name, std::string("'") + name + "' must be a number, not " + type_name(*v));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    invalid(name, std::string("'") + name + "' is " + v->dump() + "; it must be in [" + json(lo).dump() + ", " +
                      json(hi).dump() + "]");
  }
  return x;
}

std::int64_t integer(const json& body, const char* name, std::int64_t fallback, std::int64_t lo, std::int64_t hi) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer() && !(v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
                                   std::fabs(v->get<double>()) < 9e15)) {
    invalid(name,
            std::string("'") + name + "' must be an integer, not " + (v->is_number() ? v->dump() : type_name(*v)));
  }
  const auto x = v->is_number_integer() ? v->get<std::int64_t>() : static_cast<std::int64_t>(v->get<double>());
  if (v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) {
    invalid(name, std::string("'") + name + "' is " + v->dump() + "; the most it may be is " + std::to_string(hi));
  }
  if (x < lo || x > hi) {
    invalid(name, std::string("'") + name + "' is " + std::to_string(x) + "; it must be in [" + std::to_string(lo) +
                      ", " + std::to_string(hi) + "]");
  }
  return x;
}

std::string text(const json& body, const char* name) {
  const json* v = field(body, name);
  if (v == nullptr) return {};
  if (!v->is_string()) invalid(name, std::string("'") + name + "' must be a string, not " + type_name(*v));
  return v->get<std::string>();
}

// stop: a string or up to 4 non-empty strings.
std::vector<std::string> stop_strings(const json& body) {
  const json* v = field(body, "stop");
  if (v == nullptr) return {};
  std::vector<std::string> stops;
  if (v->is_string()) {
    stops.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > 4) invalid("stop", "'stop' holds " + std::to_string(v->size()) + " strings; at most 4 are allowed");
    for (const json& s : *v) {
      if (!s.is_string()) invalid("stop", std::string("'stop' must hold strings, not ") + type_name(s));
      stops.push_back(s.get<std::string>());
    }
  } else {
    invalid("stop", std::string("'stop' must be a string or an array of strings, not ") + type_name(*v));
  }
  for (const std::string& s : stops) {
    if (s.empty()) invalid("stop", "'stop' holds an empty string");
  }
  return stops;
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts (joined).
std::string message_content(const json& content, std::size_t index) {
  const std::string param = "messages[" + std::to_string(index) + "].content";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    invalid(param, "'" + param + "' must be a string or an array of text parts, not " + type_name(content));
  std::string joined;
  for (const json& part : content) {
    if (!part.is_object() || part.value("type", std::string()) != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      invalid(param, "'" + param + "' parts must be {\"type\": \"text\", \"text\": \"...\"} (only text is supported)");
    }
    joined += part["text"].get<std::string>();
  }
  return joined;
}

std::vector<ChatMessage> chat_messages(const json& body) {
  const json* v = field(body, "messages");
  if (v == nullptr) invalid("messages", "'messages' is required");
  if (!v->is_array()) invalid("messages", std::string("'messages' must be an array, not ") + type_name(*v));
  if (v->empty()) invalid("messages", "'messages' must hold at least one message");
  std::vector<ChatMessage> messages;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) invalid(at, "'" + at + "' must be an object, not " + type_name(m));
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) invalid(at + ".role", "'" + at + ".role' must be a string");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "developer" && r != "tool") {
      invalid(at + ".role", "'" + at + ".role' is '" + r + "'; it must be system, developer, user, assistant or tool");
    }
    ChatMessage message;
    message.role = r == "developer" ? "system" : r;
    const auto content = m.find("content");
    if (content != m.end() && !content->is_null())
      message.content = message_content(*content, i);
    else if (r != "assistant")
      invalid(at + ".content", "'" + at + ".content' is required");
    json extra = json::object();
    for (const auto& [key, value] : m.items()) {
      if (key != "role" && key != "content") extra[key] = value;
    }
    if (!extra.empty()) message.extra_json = extra.dump();
    messages.push_back(std::move(message));
  }
  return messages;
}

void unsupported_unless(const json& body, const char* name, const json& allowed, const std::string& why) {
  const json* v = field(body, name);
  if (v != nullptr && *v != allowed) invalid(name, std::string("'") + name + "' " + why);
}

}  // namespace

json parse_request_body(const std::string& body) {
  // The parser itself is iterative; the callback refuses depth before any value is built deeper.
  const json::parser_callback_t limit = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxBodyDepth) {
      throw ProtocolError(400, "invalid_request_error",
                          "the body nests deeper than " + std::to_string(kMaxBodyDepth) + " levels");
    }
    return true;
  };
  try {
    return json::parse(body, limit);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 2e1402
    throw ProtocolError(400, "invalid_request_error", std::string("the body is not valid JSON: ") + e.what());
  }
}

json error_body(const std::string& message, const std::string& type, const std::string& param) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", nullptr}}}};
}

CompletionRequest parse_completion_request(const json& body, bool chat, const ProtocolLimits& limits) {
  if (!body.is_object()) invalid("", std::string("the request body must be a JSON object, not ") + type_name(body));
  CompletionRequest r;
  r.chat = chat;
  const json* model = field(body, "model");
  if (model == nullptr) invalid("model", "'model' is required");
  if (!model->is_string()) invalid("model", std::string("'model' must be a string, not ") + type_name(*model));
  r.model = model->get<std::string>();

  if (chat) {
    r.messages = chat_messages(body);
  } else {
    const json* prompt = field(body, "prompt");
    if (prompt == nullptr) invalid("prompt", "'prompt' is required");
    const json* single = prompt;
    if (prompt->is_array() && !prompt->empty() && !(*prompt)[0].is_number()) {  // a batch of prompts: one only
      if (prompt->size() != 1) invalid("prompt", "'prompt' holds several prompts; this server takes one per request");
      single = &(*prompt)[0];
    }
    if (single->is_string()) {
      r.prompt = single->get<std::string>();
    } else if (single->is_array() && !single->empty()) {
      for (const json& t : *single) {
        if (!t.is_number_integer() || t.get<std::int64_t>() < 0 || t.get<std::int64_t>() >= limits.vocab_size) {
          invalid("prompt", "'prompt' token ids must be integers in [0, " + std::to_string(limits.vocab_size) + ")");
        }
        r.prompt_tokens.push_back(t.get<std::int32_t>());
      }
      r.prompt_is_tokens = true;
    } else {
      invalid("prompt", std::string("'prompt' must be a string or an array of token ids, not ") + type_name(*single));
    }
  }

  GenerationConfig& c = r.config;
  const std::int64_t fallback = chat ? limits.max_tokens_limit : limits.default_max_tokens_completions;
  std::int64_t max_tokens = integer(body, "max_tokens", fallback, 0, limits.max_tokens_limit);
  if (chat) max_tokens = integer(body, "max_completion_tokens", max_tokens, 0, limits.max_tokens_limit);
  c.max_new_tokens = static_cast<std::int32_t>(max_tokens);
  // OpenAI's sampling: temperature then nucleus; no top-k or min-p unless asked (vLLM's extras).
  c.temperature = static_cast<float>(number(body, "temperature", 1.0, 0.0, 2.0));
  c.top_p = static_cast<float>(number(body, "top_p", 1.0, 0.0, 1.0));
  if (c.top_p <= 0.0f) invalid("top_p", "'top_p' must be above 0");
  c.top_k = static_cast<std::int32_t>(integer(body, "top_k", 0, -1, 1 << 20));
  if (c.top_k < 0) c.top_k = 0;  // vLLM's -1: off
  c.min_p = static_cast<float>(number(body, "min_p", 0.0, 0.0, 1.0));
  c.repeat_penalty = static_cast<float>(number(body, "repetition_penalty", 1.0, 0.01, 100.0));
  if (const json* seed = field(body, "seed"); seed != nullptr) {
    c.seed = static_cast<std::uint64_t>(
        integer(body, "seed", 0, std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()));
  }
  c.stop = stop_strings(body);
  c.top_logprobs = 0;

  if (integer(body, "n", 1, 1, 128) != 1) invalid("n", "'n' must be 1 (one choice per request)");
  unsupported_unless(body, "best_of", 1, "must be 1");
  unsupported_unless(body, "echo", false, "is not supported (the prompt is not echoed)");
  if (number(body, "presence_penalty", 0.0, -2.0, 2.0) != 0.0) {
    invalid("presence_penalty", "'presence_penalty' is not supported (use repetition_penalty)");
  }
  if (number(body, "frequency_penalty", 0.0, -2.0, 2.0) != 0.0) {
    invalid("frequency_penalty", "'frequency_penalty' is not supported (use repetition_penalty)");
  }
  if (field(body, "logit_bias") != nullptr && !(*field(body, "logit_bias")).empty()) {
    invalid("logit_bias", "'logit_bias' is not supported");
  }
  if (field(body, "tools") != nullptr || field(body, "tool_choice") != nullptr) {
    invalid("tools", "'tools' is not supported by this server yet");
  }

  r.stream = boolean(body, "stream", false);
  if (const json* options = field(body, "stream_options"); options != nullptr) {
    if (!options->is_object())
      invalid("stream_options", std::string("'stream_options' must be an object, not ") + type_name(*options));
    if (!r.stream) invalid("stream_options", "'stream_options' is only allowed with 'stream': true");
    r.include_usage = boolean(*options, "include_usage", false);
  }

  if (chat) {
    r.want_logprobs = boolean(body, "logprobs", false);
    const json* top = field(body, "top_logprobs");
    if (top != nullptr && !r.want_logprobs) invalid("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r.top_logprobs = static_cast<int>(integer(body, "top_logprobs", 0, 0, 20));
  } else if (field(body, "logprobs") != nullptr) {
    r.want_logprobs = true;
    r.top_logprobs = static_cast<int>(integer(body, "logprobs", 0, 0, 5));
  }
  c.top_logprobs = r.top_logprobs;
  r.user = text(body, "user");
  return r;
}

TokenPiece token_piece(const TokenEvent& event, const TokenBytes& bytes, int top_logprobs) {
  TokenPiece p;
  p.text = event.text;
  p.logprob = event.logprob;
  if (bytes) {
    p.token = bytes(event.token_id);
    for (std::size_t i = 0; i < event.top.size() && static_cast<int>(i) < top_logprobs; ++i) {
      p.top.emplace_back(bytes(event.top[i].id), event.top[i].logprob);
    }
  }
  return p;
}

const char* finish_reason_name(FinishReason reason) noexcept {
  switch (reason) {
    case FinishReason::kLength:
    case FinishReason::kContextFull:
      return "length";
    case FinishReason::kCircuitBreaker:
      return "content_filter";
    case FinishReason::kCancelled:
      return "cancelled";
    default:
      return "stop";
  }
}

namespace {

// Token bytes as a JSON string (invalid UTF-8 replaced) and as the byte list OpenAI gives.
std::string utf8_string(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

json string_value(const std::string& s) {
  return json::parse(utf8_string(s));
}

json byte_list(const std::string& s) {
  json list = json::array();
  for (const char c : s) list.push_back(static_cast<unsigned char>(c));
  return list;
}

}  // namespace

json completion_logprobs(const std::vector<TokenPiece>& pieces, std::size_t offset) {
  json tokens = json::array(), logprobs = json::array(), tops = json::array(), offsets = json::array();
  for (const TokenPiece& p : pieces) {
    tokens.push_back(string_value(p.token));
    logprobs.push_back(p.logprob);
    json top = json::object();
    for (const auto& [token, lp] : p.top) top[string_value(token).get<std::string>()] = lp;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += p.text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", logprobs}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json chat_logprobs(const std::vector<TokenPiece>& pieces) {
  json content = json::array();
  for (const TokenPiece& p : pieces) {
    json top = json::array();
    for (const auto& [token, lp] : p.top) {
      top.push_back({{"token", string_value(token)}, {"logprob", lp}, {"bytes", byte_list(token)}});
    }
    content.push_back({{"token", string_value(p.token)},
                       {"logprob", p.logprob},
                       {"bytes", byte_list(p.token)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json usage_json(std::int64_t prompt_tokens, std::int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

json completion_response(const CompletionRequest& request, const ResponseMeta& meta, const std::string& text,
                         const std::vector<TokenPiece>& pieces, const char* finish_reason, std::int64_t prompt_tokens,
                         std::int64_t completion_tokens) {
  json choice = {{"index", 0}, {"finish_reason", finish_reason}};
  if (request.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", string_value(text)}};
    choice["logprobs"] = request.want_logprobs ? chat_logprobs(pieces) : json(nullptr);
  } else {
    choice["text"] = string_value(text);
    choice["logprobs"] = request.want_logprobs ? completion_logprobs(pieces, 0) : json(nullptr);
  }
  return {{"id", meta.id},
          {"object", request.chat ? "chat.completion" : "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array({choice})},
          {"usage", usage_json(prompt_tokens, completion_tokens)},
          {"system_fingerprint", nullptr}};
}

json stream_chunk(const CompletionRequest& request, const ResponseMeta& meta, const std::string& text,
                  const std::vector<TokenPiece>& pieces, std::size_t text_offset, const char* finish_reason,
                  bool first) {
  json choice = {{"index", 0}, {"finish_reason", finish_reason != nullptr ? json(finish_reason) : json(nullptr)}};
  if (request.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = string_value(text);
    choice["delta"] = delta;
    choice["logprobs"] = request.want_logprobs && !pieces.empty() ? chat_logprobs(pieces) : json(nullptr);
  } else {
    choice["text"] = string_value(text);
    choice["logprobs"] =
        request.want_logprobs && !pieces.empty() ? completion_logprobs(pieces, text_offset) : json(nullptr);
  }
  json chunk = {{"id", meta.id},
                {"object", request.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", json::array({choice})}};
  if (request.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json usage_chunk(const CompletionRequest& request, const ResponseMeta& meta, std::int64_t prompt_tokens,
                 std::int64_t completion_tokens) {
  return {{"id", meta.id},
          {"object", request.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array()},
          {"usage", usage_json(prompt_tokens, completion_tokens)}};
}

}  // namespace sitsrt::server
