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
  std::string model;                // tokenizer.ggml.model ("llama" = SentencePiece)
  std::vector<std::string> pieces;  // token text, SentencePiece style ("\xE2\x96\x81" = U+2581 for space)
  std::vector<float> scores;        // merge priority (higher merges first)
  std::vector<TokenType> types;
  std::int32_t bos = -1;
  std::int32_t eos = -1;
  std::int32_t unk = -1;
  std::int32_t pad = -1;
  bool add_bos = true;
  bool add_eos = false;
  bool add_space_prefix = true;  // SentencePiece dummy prefix

  [[nodiscard]] std::int32_t size() const noexcept { return static_cast<std::int32_t>(pieces.size()); }
};

// Reads tokenizer.ggml.{model,tokens,scores,token_type,bos_token_id,...} from a GGUF file.
// Throws sitsrt::Error naming the file and key when arrays are missing or inconsistent,
// or when the tokenizer model is not supported by this build.
Vocabulary read_vocabulary(const gguf::File& file);

}  // namespace sitsrt
