// llama.cpp-compatible tokenizer endpoints of `sitsrt serve` (the trace viewer uses /detokenize
// for the text of top-k alternatives and prompt tokens that a log holds only as ids):
//   POST /tokenize   {"content": TEXT, "add_special": bool = false, "with_pieces": bool = false}
//                 -> {"tokens": [id, ...]}, or with pieces {"tokens": [{"id", "piece"}, ...]}
//   POST /detokenize {"tokens": [id, ...], "with_pieces": bool = false}
//                 -> {"content": TEXT} (+ "pieces": [{"id", "piece"}, ...] with pieces)
// A piece is the token's bytes, invalid UTF-8 (part of a character) replaced by U+FFFD.
#pragma once

#include <sitsrt/engine.hpp>

#include <nlohmann/json.hpp>

namespace sitsrt::server {

// Both take the parsed request body and throw ProtocolError (400, naming the field) on bad input.
[[nodiscard]] nlohmann::json tokenize_response(const Engine& engine, const nlohmann::json& body);
[[nodiscard]] nlohmann::json detokenize_response(const Engine& engine, const nlohmann::json& body);

}  // namespace sitsrt::server
