// Regex pre-tokenization for byte-level BPE: the text is cut into pieces (words, number runs,
// punctuation runs, whitespace) that BPE merges never cross. Runs PCRE2 in UTF mode with
// Unicode properties (\p{L}, \p{N}, \s) and JIT.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt::detail {

// What a tokenizer.ggml.pre name stands for: llama.cpp's LLAMA_VOCAB_PRE_TYPE_* regexes and the
// per-type flags that change ids (pre_tokenizer_table.cpp). "default" (also what a missing key
// means) is llama.cpp's default set, not GPT-2's pattern; "gpt2" is GPT-2's published pattern.
struct PreTokenizerSpec {
  std::vector<std::string_view> patterns;  // applied in turn
  bool ignore_merges = false;              // a pre-token that is itself a piece is emitted whole
  bool add_bos = false;                    // llama.cpp's default when tokenizer.ggml.add_bos_token is absent
  // SentencePiece-style BPE (llama.cpp's byte_encode = false): pieces are raw UTF-8, characters
  // without a piece fall back to <0xNN> tokens.
  bool raw_utf8 = false;
  bool escape_spaces = false;       // spaces become U+2581 before splitting (raw_utf8 only)
  bool newline_runs_whole = false;  // a pre-token of only '\n' that is a piece is one token (Gemma 4)
  bool force_bos = false;           // BOS even when the file says not (llama.cpp's Gemma 4 workaround)
};

// The spec of `pre`, or nullopt for a name that is unknown or not supported here.
std::optional<PreTokenizerSpec> find_pre_tokenizer(std::string_view pre);

// The spec of `pre`; throws kUnsupported naming `source`, the key and the supported names.
PreTokenizerSpec pre_tokenizer_spec(std::string_view pre, std::string_view source);

// pre_tokenizer_spec(pre, source).patterns as strings.
std::vector<std::string> pre_tokenizer_patterns(std::string_view pre, std::string_view source);

// Every supported name, in llama.cpp's order.
std::vector<std::string_view> pre_tokenizer_names();

// GPT-2's pattern (also what Hugging Face's ByteLevel pre-tokenizer applies with use_regex).
std::string_view gpt2_pattern() noexcept;

// Applies each regex in turn to every piece the previous one produced, keeping both the
// matches and the text between them as pieces (Hugging Face's Split with behavior "Isolated"); an
// empty match splits the text where it occurs, as in Hugging Face and llama.cpp. Invalid UTF-8
// never matches and so ends up in the in-between pieces (BpeTokenizer replaces it first).
// Immutable after construction and thread-safe.
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
