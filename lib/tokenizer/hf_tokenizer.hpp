// Reader for Hugging Face tokenizer files: tokenizer.json (a byte-level BPE model with its
// normalizer, pre-tokenizer, post-processor and decoder) and, beside it, tokenizer_config.json
// (BOS/EOS texts, add_bos_token, chat_template).
#pragma once

#include "tokenizer/vocabulary.hpp"

#include <string>
#include <string_view>

namespace sitsrt {

// Turns a tokenizer.json into a Vocabulary for make_tokenizer.
//  - Byte-level BPE (GPT-2, Llama 3, Qwen2) -> model "gpt2": model.vocab plus added_tokens
//    (special -> kControl, other -> kUserDefined), model.merges in either the "a b" or the
//    ["a", "b"] form, the Split / ByteLevel pre-tokenizer regexes, ignore_merges.
//  - SentencePiece-style BPE (model.byte_fallback, spaces as U+2581 by Replace / Metaspace, as
//    Llama 2 and Gemma ship it) -> model "llama": merge results score minus their rank, <0xNN>
//    pieces are byte tokens, a Prepend(U+2581) / Metaspace prefix is the dummy prefix.
// BOS comes from a TemplateProcessing post-processor. A tokenizer_config.json in the same folder
// overrides add_bos / add_eos and names BOS/EOS/UNK/PAD; its chat_template is kept as text.
// The NFC normalizer is accepted but not applied (docs/tokenizers.md). Throws kInvalidModel
// naming the file and the key for malformed JSON or missing keys, kUnsupported for valid but
// unsupported settings (dropout, subword affixes, lstrip/rstrip added tokens, other components).
Vocabulary read_hf_tokenizer(const std::string& tokenizer_json_path);

// Parses the text of a tokenizer.json (and optionally of a tokenizer_config.json: empty means
// none); the names are used in error messages. For tests and in-memory sources.
Vocabulary parse_hf_tokenizer(std::string_view tokenizer_json, std::string_view tokenizer_json_name,
                              std::string_view config_json = {}, std::string_view config_json_name = {});

}  // namespace sitsrt
