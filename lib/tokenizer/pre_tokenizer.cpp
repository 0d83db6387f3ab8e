#include "tokenizer/pre_tokenizer.hpp"

#include "core/check.hpp"
#include "tokenizer/utf8.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

namespace sitsrt::detail {
namespace {

// The patterns as published with each model family's tokenizer (GPT-2's encoder.py, Llama 3's
// and Qwen2's tokenizer.json).
constexpr std::string_view kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct NamedPattern {
  std::string_view name;
  std::string_view pattern;
  bool ignore_merges;
};
constexpr std::array<NamedPattern, 6> kNamedPatterns = {{
    {"default", kGpt2, false},
    {"gpt2", kGpt2, false},
    {"llama-bpe", kLlama3, true},
    {"llama3", kLlama3, true},
    {"llama-v3", kLlama3, true},
    {"qwen2", kQwen2, false},
}};

}  // namespace

std::string_view gpt2_pattern() noexcept { return kGpt2; }

std::vector<std::string> pre_tokenizer_patterns(std::string_view pre, std::string_view source) {
  for (const NamedPattern& named : kNamedPatterns) {
    if (named.name == pre) return {std::string(named.pattern)};
  }
  std::string supported;
  for (const NamedPattern& named : kNamedPatterns) supported += (supported.empty() ? "" : ", ") + std::string(named.name);
  raise(ErrorCode::kUnsupported, "{}: pre-tokenizer '{}' (tokenizer.ggml.pre) is not supported; supported: {}", source,
        pre, supported);
}

bool pre_tokenizer_ignores_merges(std::string_view pre) {
  for (const NamedPattern& named : kNamedPatterns) {
    if (named.name == pre) return named.ignore_merges;
  }
  return false;
}

struct RegexSplitter::Pattern {
  pcre2_code* code = nullptr;
  ~Pattern() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(const std::vector<std::string>& patterns, std::string_view source) {
  for (const std::string& text : patterns) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    // MATCH_INVALID_UTF: arbitrary bytes may be matched against (invalid sequences never match).
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &error_offset, nullptr);
    if (code == nullptr) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(error, message.data(), message.size());
      raise(ErrorCode::kInvalidModel, "{}: pre-tokenizer regex '{}' does not compile at offset {}: {}", source, text,
            error_offset, reinterpret_cast<const char*>(message.data()));
    }
    auto pattern = std::make_unique<Pattern>();
    pattern->code = code;
    // Without JIT support in the library this fails and matching falls back to the interpreter.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    patterns_.push_back(std::move(pattern));
  }
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (const auto& pattern : patterns_) {
    const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
        pcre2_match_data_create_from_pattern(pattern->code, nullptr), &pcre2_match_data_free);
    if (!match) raise(ErrorCode::kOutOfMemory, "pre-tokenizer: cannot allocate PCRE2 match data");
    next.clear();
    for (const std::string_view piece : current) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      std::size_t gap_start = 0;
      std::size_t offset = 0;
      while (offset < piece.size()) {
        int rc = pcre2_match(pattern->code, subject, piece.size(), offset, 0, match.get(), nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {  // the interpreter keeps its backtracking on the heap
          rc = pcre2_match(pattern->code, subject, piece.size(), offset, PCRE2_NO_JIT, match.get(), nullptr);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          std::array<PCRE2_UCHAR, 256> message{};
          pcre2_get_error_message(rc, message.data(), message.size());
          raise(ErrorCode::kInvalidArgument, "pre-tokenizer: regex match failed: {}",
                reinterpret_cast<const char*>(message.data()));
        }
        const PCRE2_SIZE* bounds = pcre2_get_ovector_pointer(match.get());
        const std::size_t begin = bounds[0];
        const std::size_t end = bounds[1];
        if (end == begin) {  // an empty match splits nothing; retry one character further
          if (begin >= piece.size()) break;
          offset = begin + scan_utf8(piece.substr(begin)).length;
          continue;
        }
        if (begin > gap_start) next.push_back(piece.substr(gap_start, begin - gap_start));
        next.push_back(piece.substr(begin, end - begin));
        gap_start = offset = end;
      }
      if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
    }
    current.swap(next);
  }
  out.insert(out.end(), current.begin(), current.end());
}

}  // namespace sitsrt::detail
