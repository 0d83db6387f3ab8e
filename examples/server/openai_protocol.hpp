// The OpenAI wire format of `sitsrt serve`: request bodies of /v1/completions and
// /v1/chat/completions validated into the engine's GenerationConfig and prompt (or messages),
// and the JSON of responses, stream chunks and error objects. Only the public API.
#pragma once

#include <sitsrt/chat.hpp>
#include <sitsrt/generation.hpp>
#include <sitsrt/token_event.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace sitsrt::server {

// A request the server refuses: the HTTP status and OpenAI's error fields.
struct ProtocolError : std::runtime_error {
  ProtocolError(int status, std::string type, std::string message, std::string param = {})
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)) {}
  int status;
  std::string type;   // "invalid_request_error", "authentication_error", "not_found_error", ...
  std::string param;  // the offending field ("" for none)
};

// {"error": {"message", "type", "param", "code"}}
[[nodiscard]] nlohmann::json error_body(const std::string& message, const std::string& type,
                                        const std::string& param = {});

struct CompletionRequest {
  bool chat = false;
  std::string model;
  std::string prompt;                       // /v1/completions: text ...
  std::vector<std::int32_t> prompt_tokens;  // ... or token ids (prompt_is_tokens)
  bool prompt_is_tokens = false;
  std::vector<ChatMessage> messages;  // /v1/chat/completions
  GenerationConfig config;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Log-probabilities: completions' logprobs (0..5 alternatives), chat's logprobs + top_logprobs
  // (0..20); off when !want_logprobs.
  bool want_logprobs = false;
  int top_logprobs = 0;
  std::string user;
};

struct ProtocolLimits {
  std::int32_t max_tokens_limit = 1 << 20;           // the most max_tokens may ask for (the context bounds it too)
  std::int32_t default_max_tokens_completions = 16;  // OpenAI's default for /v1/completions
  std::int32_t vocab_size = 0;                       // token-id prompts are checked against it
};

// Most nesting a request body may have: OpenAI bodies are shallow, and copying or printing a
// deeper value would recurse that deep (a stack overflow for a hostile body).
inline constexpr int kMaxBodyDepth = 64;

// The body as JSON; throws ProtocolError (400) for invalid JSON or nesting past kMaxBodyDepth.
[[nodiscard]] nlohmann::json parse_request_body(const std::string& body);

// Throws ProtocolError (400) naming the field for anything malformed or unsupported (n != 1,
// echo, best_of, non-zero presence / frequency penalties).
[[nodiscard]] CompletionRequest parse_completion_request(const nlohmann::json& body, bool chat,
                                                         const ProtocolLimits& limits);

// What a token contributes to a response: its text (UTF-8-safe, as streamed), and for
// logprobs its own bytes and those of the alternatives.
struct TokenPiece {
  std::string text;
  std::string token;  // the token's bytes (a partial UTF-8 sequence possibly)
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;  // alternatives' bytes and logprobs
};

// Bytes of a token id (Engine::token_bytes).
using TokenBytes = std::function<std::string(std::int32_t)>;
[[nodiscard]] TokenPiece token_piece(const TokenEvent& event, const TokenBytes& bytes, int top_logprobs);

// "stop", "length", "content_filter" (a circuit breaker), "cancelled"
[[nodiscard]] const char* finish_reason_name(FinishReason reason) noexcept;

struct ResponseMeta {
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  std::int64_t created = 0;
  std::string model;
  std::string audit_id;  // the engine's request id ("" without audit)
};

// logprobs objects: completions' {tokens, token_logprobs, top_logprobs, text_offset} and chat's
// {content: [{token, logprob, bytes, top_logprobs}]}; `offset` is the text offset of the first.
[[nodiscard]] nlohmann::json completion_logprobs(const std::vector<TokenPiece>& pieces, std::size_t offset);
[[nodiscard]] nlohmann::json chat_logprobs(const std::vector<TokenPiece>& pieces);

[[nodiscard]] nlohmann::json usage_json(std::int64_t prompt_tokens, std::int64_t completion_tokens);

// A whole (non-streamed) response.
[[nodiscard]] nlohmann::json completion_response(const CompletionRequest& request, const ResponseMeta& meta,
                                                 const std::string& text, const std::vector<TokenPiece>& pieces,
                                                 const char* finish_reason, std::int64_t prompt_tokens,
                                                 std::int64_t completion_tokens);

// One streamed chunk: `pieces` (possibly none) of new text, the finish reason on the last one
// (nullptr before), and for chat the assistant role on the first.
[[nodiscard]] nlohmann::json stream_chunk(const CompletionRequest& request, const ResponseMeta& meta,
                                          const std::string& text, const std::vector<TokenPiece>& pieces,
                                          std::size_t text_offset, const char* finish_reason, bool first);
// The usage chunk (stream_options.include_usage): no choices, the counts.
[[nodiscard]] nlohmann::json usage_chunk(const CompletionRequest& request, const ResponseMeta& meta,
                                         std::int64_t prompt_tokens, std::int64_t completion_tokens);

}  // namespace sitsrt::server
