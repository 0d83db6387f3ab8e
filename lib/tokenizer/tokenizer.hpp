// The tokenizer interface the engine and the generation loop use, and the factories that pick
// an implementation: SentencePiece (tokenizer.ggml.model = "llama", SpmTokenizer) or byte-level
// BPE ("gpt2", BpeTokenizer), from a GGUF file or a Hugging Face tokenizer.json.
#pragma once

#include "tokenizer/vocabulary.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt {

// Immutable after construction; every member is thread-safe.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text to ids; prepends BOS when `add_bos` and the vocabulary has one, never appends EOS.
  // As llama.cpp, user-defined token texts (tokenizer.json's non-special added tokens) found in
  // the text always become their single ids; with `parse_special` control and unknown-type ones
  // too (tokenizer.json's special added tokens). The longest token text is taken first.
  [[nodiscard]] virtual std::vector<std::int32_t> encode(std::string_view text, bool add_bos,
                                                         bool parse_special = false) const = 0;

  // Bytes one token prints as (possibly an incomplete UTF-8 sequence); control tokens print
  // nothing, user-defined tokens their text. Throws kInvalidArgument for an id out of range.
  [[nodiscard]] std::string token_bytes(std::int32_t id) const;

  // Whole-sequence decode; invalid UTF-8 becomes U+FFFD per maximal subpart. With
  // `strip_dummy_prefix`, undoes the leading space encode() inserted (SentencePiece's dummy
  // prefix); tokenizers that insert none ignore it. Throws kInvalidArgument for a bad id.
  [[nodiscard]] std::string decode(std::span<const std::int32_t> ids, bool strip_dummy_prefix = false) const;

  [[nodiscard]] virtual const Vocabulary& vocab() const noexcept = 0;
  [[nodiscard]] virtual bool is_end_of_generation(std::int32_t id) const noexcept = 0;

 protected:
  // Appends the bytes of token `id`, which the caller has checked to be in range.
  virtual void append_token_bytes(std::int32_t id, std::string& out) const = 0;
  // Whether encode() puts a space before the text that decode() may strip.
  [[nodiscard]] virtual bool inserts_dummy_prefix() const noexcept { return false; }

 private:
  void check_id(std::int32_t id) const;
};

// The implementation named by vocab.model ("llama" -> SentencePiece, "gpt2" -> byte-level BPE,
// "gemma4" -> BPE over raw UTF-8).
// `source` (a file path) is only used in error messages. Throws kUnsupported naming the source,
// the tokenizer.ggml.model key and the supported values for any other model.
std::unique_ptr<Tokenizer> make_tokenizer(Vocabulary vocab, std::string_view source);

// Loads a tokenizer from a GGUF model file, or from a Hugging Face tokenizer.json (a path
// ending in ".json", or a folder holding tokenizer.json; tokenizer_config.json beside it is
// read too). Throws sitsrt::Error naming the file and key for anything malformed.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

}  // namespace sitsrt
