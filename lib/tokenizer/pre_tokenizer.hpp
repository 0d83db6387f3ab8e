// Regex pre-tokenization for byte-level BPE: the text is cut into pieces (words, number runs,
// punctuation runs, whitespace) that BPE merges never cross. Runs PCRE2 in UTF mode with
// Unicode properties (\p{L}, \p{N}, \s) and JIT.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt::detail {

// The published patterns a GGUF tokenizer.ggml.pre names: "gpt2"/"default", "llama-bpe" /
// "llama3" / "llama-v3", "qwen2". Throws kUnsupported naming `source`, the key and the
// supported names for anything else.
std::vector<std::string> pre_tokenizer_patterns(std::string_view pre, std::string_view source);

// Whether encode() should emit a pre-token whole when it is a vocabulary piece (llama.cpp
// and Hugging Face do so for Llama 3).
bool pre_tokenizer_ignores_merges(std::string_view pre);

// GPT-2's pattern (also what Hugging Face's ByteLevel pre-tokenizer applies with use_regex).
std::string_view gpt2_pattern() noexcept;

// Applies each regex in turn to every piece the previous one produced, keeping both the
// matches and the text between them as pieces (Hugging Face's Split with behavior "Isolated").
// Invalid UTF-8 never matches and so ends up in the in-between pieces. Immutable after
// construction and thread-safe.
class RegexSplitter {
 public:
  // Throws kInvalidModel naming `source` and the pattern when a pattern does not compile.
  RegexSplitter(const std::vector<std::string>& patterns, std::string_view source);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  // Appends the pieces of `text` (views into it, none empty) to `out`.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct Pattern;
  std::vector<std::unique_ptr<Pattern>> patterns_;
};

}  // namespace sitsrt::detail
