// A tokenizer vocabulary as stored in GGUF (tokenizer.ggml.*).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace sitsrt::gguf {
class File;
}

namespace sitsrt {

// Token types, numbered as in GGUF's tokenizer.ggml.token_type.
enum class TokenType : std::int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct Vocabulary {
  std::string model;  // tokenizer.ggml.model ("llama" = SentencePiece, "gpt2" = byte-level BPE)
  // Token text: SentencePiece style ("\xE2\x96\x81" = U+2581 for space) for "llama"; GPT-2
  // byte-to-unicode mapped bytes ("\xC4\xA0" = U+0120 for space) for "gpt2".
  std::vector<std::string> pieces;
  std::vector<float> scores;  // SentencePiece merge priority (higher merges first)
  std::vector<TokenType> types;
  std::int32_t bos = -1;
  std::int32_t eos = -1;
  std::int32_t unk = -1;
  std::int32_t pad = -1;
  bool add_bos = true;
  bool add_eos = false;
  bool add_space_prefix = true;  // SentencePiece dummy prefix (ignored by byte-level BPE)
  // ... but not before text that already starts with a space (Hugging Face's Metaspace).
  bool space_prefix_unless_leading_space = false;

  // Byte-level BPE only.
  std::vector<std::string> merges;  // tokenizer.ggml.merges: "left right" pieces, highest priority first
  std::string pre;                  // tokenizer.ggml.pre: names the pre-tokenizer regexes
  // Explicit pre-tokenizer regexes (from tokenizer.json), applied in turn; empty: those of `pre`.
  std::vector<std::string> pre_patterns;
  bool ignore_merges = false;  // a pre-token that is itself a piece is emitted whole (Llama 3)

  std::string chat_template;  // tokenizer.chat_template (Jinja text), stored, not interpreted

  [[nodiscard]] std::int32_t size() const noexcept { return static_cast<std::int32_t>(pieces.size()); }
};

// Fills missing scores/types of a hand-built vocabulary (0 / kNormal) and checks it: tokens
// present, array sizes equal, special ids in range. Throws kInvalidArgument otherwise.
Vocabulary complete_vocabulary(Vocabulary vocab);

// Reads tokenizer.ggml.{model,tokens,scores,token_type,merges,pre,bos_token_id,...} and
// tokenizer.chat_template from a GGUF file.
// Throws sitsrt::Error naming the file and key when arrays are missing or inconsistent,
// or when the tokenizer model is not supported by this build.
Vocabulary read_vocabulary(const gguf::File& file);

}  // namespace sitsrt
