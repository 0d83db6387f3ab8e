#include "tokenizer/pre_tokenizer.hpp"

#include "core/check.hpp"
#include "tokenizer/utf8.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

namespace sitsrt::detail {

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
      std::size_t last_match_end = std::string_view::npos;
      while (offset <= piece.size()) {
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
        if (begin == end && end == last_match_end) {
          // An empty match right where the previous match ended is skipped, one character on (the
          // `onig` crate's find_iter, which Hugging Face's Split runs).
          if (end >= piece.size()) break;
          offset = end + scan_utf8(piece.substr(end)).length;
          continue;
        }
        // A match, empty or not, ends the text before it; an empty one adds no piece.
        if (begin > gap_start) next.push_back(piece.substr(gap_start, begin - gap_start));
        if (end > begin) next.push_back(piece.substr(begin, end - begin));
        gap_start = offset = last_match_end = end;
      }
      if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
    }
    current.swap(next);
  }
  out.insert(out.end(), current.begin(), current.end());
}

}  // namespace sitsrt::detail
