// What the engine shares with load_chat_template: the text a special token has as a template's
// bos_token / eos_token.
#pragma once

#include "tokenizer/vocabulary.hpp"

#include <cstdint>
#include <string>

namespace sitsrt::detail {

// A special token's text as transformers' special-tokens map has it: control, user-defined and
// unknown pieces are the text itself; other pieces are decoded (byte-level BPE's byte map,
// SentencePiece's U+2581 for a space). "" for an id outside the vocabulary (no such token).
std::string special_token_text(const Vocabulary& vocab, std::int32_t id);

}  // namespace sitsrt::detail
