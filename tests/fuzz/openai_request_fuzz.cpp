// libFuzzer target: `sitsrt serve`'s request parsing and response writing on arbitrary bodies.
// First byte: bit 0 picks /v1/chat/completions over /v1/completions. Property: a body (invalid
// or deeply nested JSON included) is either refused with a ProtocolError (the server's 4xx) or
// parsed into a request whose
// response and stream chunks serialise (token bytes of any kind, invalid UTF-8 included);
// nothing crashes, hangs or throws anything else.
#include "openai_protocol.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool chat = (data[0] & 1) != 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  sitsrt::server::ProtocolLimits limits;
  limits.vocab_size = 32000;
  limits.max_tokens_limit = 4096;
  try {
    const nlohmann::json json = sitsrt::server::parse_request_body(body);
    const sitsrt::server::CompletionRequest request = sitsrt::server::parse_completion_request(json, chat, limits);
    // The request's own strings stand in for token bytes: arbitrary, possibly invalid UTF-8.
    const std::string bytes = request.chat ? request.messages.front().content : request.prompt;
    sitsrt::server::TokenPiece piece{bytes, bytes, -0.5f, {{bytes, -1.0f}}};
    const sitsrt::server::ResponseMeta meta{"cmpl-x", 1, request.model, ""};
    (void)sitsrt::server::completion_response(request, meta, bytes, {piece}, "stop", 3, 1).dump();
    (void)sitsrt::server::stream_chunk(request, meta, bytes, {piece}, 0, nullptr, true).dump();
  } catch (const sitsrt::server::ProtocolError&) {
  }
  return 0;
}
