#include "tokenizer_endpoints.hpp"

#include "openai_protocol.hpp"

#include <sitsrt/model_info.hpp>

#include <string>
#include <vector>

namespace sitsrt::server {
namespace {

using nlohmann::json;

// More ids than any context holds is a mistake, not a request.
constexpr std::size_t kMaxTokens = 1 << 20;

[[noreturn]] void invalid(const std::string& param, const std::string& message) {
  throw ProtocolError(400, "invalid_request_error", message, param);
}

bool flag(const json& body, const char* name) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return false;
  if (!it->is_boolean()) invalid(name, std::string("'") + name + "' must be a boolean");
  return it->get<bool>();
}

// Valid UTF-8 for a JSON string: bytes of a partial character become U+FFFD.
std::string piece_text(const std::string& bytes) {
  return json::parse(json(bytes).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
}

json pieces_of(const Engine& engine, const std::vector<std::int32_t>& tokens) {
  json pieces = json::array();
  for (const std::int32_t id : tokens) pieces.push_back({{"id", id}, {"piece", piece_text(engine.token_bytes(id))}});
  return pieces;
}

}  // namespace

json tokenize_response(const Engine& engine, const json& body) {
  if (!body.is_object()) invalid("", "the request body must be a JSON object");
  const auto content = body.find("content");
  if (content == body.end() || !content->is_string()) invalid("content", "'content' must be a string");
  const std::vector<std::int32_t> tokens = engine.tokenize(content->get<std::string>(), flag(body, "add_special"));
  if (!flag(body, "with_pieces")) return {{"tokens", tokens}};
  return {{"tokens", pieces_of(engine, tokens)}};
}

json detokenize_response(const Engine& engine, const json& body) {
  if (!body.is_object()) invalid("", "the request body must be a JSON object");
  const auto list = body.find("tokens");
  if (list == body.end() || !list->is_array()) invalid("tokens", "'tokens' must be an array of token ids");
  if (list->size() > kMaxTokens) invalid("tokens", "'tokens' holds more than " + std::to_string(kMaxTokens) + " ids");
  const std::int64_t vocab = engine.model_info().n_vocab;
  std::vector<std::int32_t> tokens;
  tokens.reserve(list->size());
  for (std::size_t i = 0; i < list->size(); ++i) {
    const json& id = (*list)[i];
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= vocab) {
      invalid("tokens", "tokens[" + std::to_string(i) + "] is not a token id of this model (0.." +
                            std::to_string(vocab - 1) + ")");
    }
    tokens.push_back(static_cast<std::int32_t>(id.get<std::int64_t>()));
  }
  json out{{"content", piece_text(engine.detokenize(tokens))}};
  if (flag(body, "with_pieces")) out["pieces"] = pieces_of(engine, tokens);
  return out;
}

}  // namespace sitsrt::server
