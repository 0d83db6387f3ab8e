#include "chat/lexer.hpp"

#include "chat/unicode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <optional>

namespace sitsrt::chat {

LineIndex::LineIndex(std::string_view text) : text_(text) {
  line_starts_.push_back(0);
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n') line_starts_.push_back(i + 1);
  }
}

SourcePos LineIndex::position(std::size_t offset) {
  offset = std::min(offset, text_.size());
  const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  const auto line = static_cast<std::size_t>(it - line_starts_.begin());  // >= 1
  const std::size_t start = line_starts_[line - 1];
  std::size_t from = start;
  std::size_t column = 1;
  if (static_cast<std::size_t>(last_.line) == line && last_offset_ >= start && last_offset_ <= offset) {
    from = last_offset_;
    column = static_cast<std::size_t>(last_.column);
  }
  column += unicode::length(text_.substr(from, offset - from));
  last_offset_ = offset;
  last_ = {static_cast<int>(line), static_cast<int>(column)};
  return last_;
}

std::string normalize_template_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

namespace {

bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_ascii_digit(c); }

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(source), lines_(source) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_root();
    push(TokenType::kEof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  enum class Tag { kRaw, kComment, kBlock, kVariable };

  [[noreturn]] void fail(std::string message, std::size_t at, ErrorCode code = ErrorCode::kInvalidArgument) {
    throw ParseError{code, std::move(message), lines_.position(at)};
  }

  void push(TokenType type, std::string text, std::size_t at) {
    Token token;
    token.type = type;
    token.text = std::move(text);
    token.pos = lines_.position(at);
    tokens_.push_back(std::move(token));
  }

  bool starts_with(std::size_t at, std::string_view what) const {
    return at <= src_.size() && src_.substr(at).substr(0, what.size()) == what;
  }

  // Length of the Python \s run (Unicode whitespace) starting at `at`.
  std::size_t whitespace_run(std::size_t at) const {
    std::size_t end = at;
    while (end < src_.size()) {
      const unicode::Decoded d = unicode::decode_at(src_, end);
      if (!unicode::is_space(d.code_point)) break;
      end += d.bytes;
    }
    return end - at;
  }

  // Python's str.rstrip(): the length of `text` without its trailing Unicode whitespace.
  static std::size_t rstripped_length(std::string_view text) {
    std::size_t end = 0;
    for (std::size_t i = 0; i < text.size();) {
      const unicode::Decoded d = unicode::decode_at(text, i);
      i += d.bytes;
      if (!unicode::is_space(d.code_point)) end = i;
    }
    return end;
  }

  static bool all_whitespace(std::string_view text) {
    if (text.empty()) return false;  // \s+ needs one character
    return rstripped_length(text) == 0;
  }

  // `{%[-+]?\s*raw\s*(-%}\s*|%})` at `at`: the end of the match, if it matches.
  std::optional<std::size_t> match_raw_begin(std::size_t at) const {
    std::size_t p = at + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p += whitespace_run(p);
    if (!starts_with(p, "raw")) return std::nullopt;
    p += 3;
    p += whitespace_run(p);
    if (starts_with(p, "-%}")) return p + 3 + whitespace_run(p + 3);
    if (starts_with(p, "%}")) return p + 2;
    return std::nullopt;
  }

  // Emits the text before a tag, applying the '-' modifier or lstrip_blocks as jinja2's
  // OptionalLStrip rule does.
  void emit_data(std::size_t from, std::size_t to, char sign, bool variable_tag) {
    std::string_view text = src_.substr(from, to - from);
    if (sign == '-') {
      text = text.substr(0, rstripped_length(text));
    } else if (sign != '+' && !variable_tag) {
      const std::size_t newline = text.rfind('\n');
      const std::size_t line_start = newline == std::string_view::npos ? 0 : newline + 1;
      if ((line_start > 0 || line_starting_) && all_whitespace(text.substr(line_start))) {
        text = text.substr(0, line_start);
      }
    }
    if (!text.empty()) push(TokenType::kData, std::string(text), from);
  }

  // End of the closing tag of a block/comment (`+%}`, `-%}\s*`, `%}\n?`) at `at`, or nullopt.
  std::optional<std::size_t> match_block_close(std::size_t at, char mark) const {
    const char close[3] = {mark, '}', '\0'};
    if (at < src_.size() && src_[at] == '+' && starts_with(at + 1, close)) return at + 3;
    if (at < src_.size() && src_[at] == '-' && starts_with(at + 1, close)) return at + 3 + whitespace_run(at + 3);
    if (starts_with(at, close)) {
      std::size_t end = at + 2;
      if (end < src_.size() && src_[end] == '\n') ++end;  // trim_blocks
      return end;
    }
    return std::nullopt;
  }

  void set_line_starting(std::size_t match_end) { line_starting_ = match_end > 0 && src_[match_end - 1] == '\n'; }

  void lex_root() {
    // The earliest tag start; at a "{%", the raw-block rule is tried before the block rule.
    std::size_t at = pos_;
    Tag tag = Tag::kBlock;
    std::optional<std::size_t> raw_end;
    for (;; ++at) {
      at = src_.find('{', at);
      if (at == std::string_view::npos || at + 1 >= src_.size()) {
        push(TokenType::kData, std::string(src_.substr(pos_)), pos_);
        pos_ = src_.size();
        return;
      }
      const char next = src_[at + 1];
      if (next == '%') {
        raw_end = match_raw_begin(at);
        tag = raw_end ? Tag::kRaw : Tag::kBlock;
        break;
      }
      if (next == '#') {
        tag = Tag::kComment;
        break;
      }
      if (next == '{') {
        tag = Tag::kVariable;
        break;
      }
    }
    const char sign = at + 2 < src_.size() && (src_[at + 2] == '-' || src_[at + 2] == '+') ? src_[at + 2] : '\0';
    emit_data(pos_, at, sign, tag == Tag::kVariable);
    const std::size_t body = at + 2 + (sign != '\0' ? 1 : 0);
    switch (tag) {
      case Tag::kRaw: lex_raw(at, *raw_end); break;
      case Tag::kComment: lex_comment(at, body); break;
      case Tag::kBlock:
        push(TokenType::kBlockBegin, "", at);
        lex_tag(body, '%');
        break;
      case Tag::kVariable:
        push(TokenType::kVariableBegin, "", at);
        lex_tag(body, '}');
        break;
    }
  }

  void lex_comment(std::size_t start, std::size_t body) {
    for (std::size_t at = src_.find('#', body); at != std::string_view::npos; at = src_.find('#', at + 1)) {
      if (at + 1 >= src_.size() || src_[at + 1] != '}') continue;
      // A '+' or '-' right before "#}" belongs to the closing tag (the regex matches it first).
      std::size_t close = at;
      if (close > body && (src_[close - 1] == '+' || src_[close - 1] == '-')) --close;
      const std::optional<std::size_t> end = match_block_close(close, '#');
      pos_ = *end;
      set_line_starting(pos_);
      return;
    }
    fail("Missing end of comment tag", start);
  }

  void lex_raw(std::size_t start, std::size_t content) {
    set_line_starting(content);
    for (std::size_t at = src_.find("{%", content); at != std::string_view::npos; at = src_.find("{%", at + 1)) {
      std::size_t p = at + 2;
      const char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : '\0';
      if (sign != '\0') ++p;
      p += whitespace_run(p);
      if (!starts_with(p, "endraw")) continue;
      p += 6;
      p += whitespace_run(p);
      const std::optional<std::size_t> end = match_block_close(p, '%');
      if (!end) continue;
      emit_data(content, at, sign, false);
      pos_ = *end;
      set_line_starting(pos_);
      return;
    }
    fail("Missing end of raw directive", start);
  }

  // Tokens inside {% %} (mark '%') or {{ }} (mark '}') up to the closing tag.
  void lex_tag(std::size_t at, char mark) {
    std::vector<char> balance;
    while (true) {
      if (at >= src_.size()) {
        pos_ = at;
        return;  // the parser reports the unexpected end of the template
      }
      if (balance.empty()) {
        std::optional<std::size_t> end;
        if (mark == '%') {
          end = match_block_close(at, '%');
        } else if (starts_with(at, "-}}")) {
          end = at + 3 + whitespace_run(at + 3);
        } else if (starts_with(at, "}}")) {
          end = at + 2;
        }
        if (end) {
          push(mark == '%' ? TokenType::kBlockEnd : TokenType::kVariableEnd, "", at);
          pos_ = *end;
          set_line_starting(pos_);
          return;
        }
      }
      const std::size_t space = whitespace_run(at);
      if (space > 0) {
        at += space;
        continue;
      }
      const char c = src_[at];
      if (is_ascii_digit(c)) {
        at = lex_number(at);
      } else if (is_name_start(c)) {
        std::size_t end = at;
        while (end < src_.size() && is_name_char(src_[end])) ++end;
        if (end < src_.size() && static_cast<unsigned char>(src_[end]) >= 0x80) {
          fail("a non-ASCII identifier", at, ErrorCode::kUnsupported);
        }
        push(TokenType::kName, std::string(src_.substr(at, end - at)), at);
        at = end;
      } else if (c == '\'' || c == '"') {
        at = lex_string(at);
      } else if (static_cast<unsigned char>(c) >= 0x80) {
        fail("a non-ASCII character outside a string in a tag (a non-ASCII identifier?)", at, ErrorCode::kUnsupported);
      } else {
        at = lex_operator(at, balance);
      }
    }
  }

  std::size_t lex_operator(std::size_t at, std::vector<char>& balance) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const std::string_view op : kTwo) {
      if (starts_with(at, op)) {
        push(TokenType::kOperator, std::string(op), at);
        return at + 2;
      }
    }
    const char c = src_[at];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      fail(fmt::format("unexpected char '{}'", c), at);
    }
    if (c == '{' || c == '(' || c == '[') {
      balance.push_back(c == '{' ? '}' : c == '(' ? ')' : ']');
    } else if (c == '}' || c == ')' || c == ']') {
      if (balance.empty()) fail(fmt::format("unexpected '{}'", c), at);
      if (balance.back() != c) fail(fmt::format("unexpected '{}', expected '{}'", c, balance.back()), at);
      balance.pop_back();
    }
    push(TokenType::kOperator, std::string(1, c), at);
    return at + 1;
  }

  // (\d+_)*\d+ at `at`: the end of the run, or `at` when there is no digit.
  std::size_t digit_group(std::size_t at) const {
    std::size_t end = at;
    while (end < src_.size() && is_ascii_digit(src_[end])) {
      while (end < src_.size() && is_ascii_digit(src_[end])) ++end;
      if (end + 1 < src_.size() && src_[end] == '_' && is_ascii_digit(src_[end + 1])) ++end;
    }
    return end;
  }

  std::optional<std::size_t> exponent_at(std::size_t at) const {
    if (at >= src_.size() || (src_[at] != 'e' && src_[at] != 'E')) return std::nullopt;
    std::size_t p = at + 1;
    if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
    const std::size_t end = digit_group(p);
    if (end == p) return std::nullopt;
    return end;
  }

  static std::string without_underscores(std::string_view text) {
    std::string out;
    for (const char c : text) {
      if (c != '_') out.push_back(c);
    }
    return out;
  }

  std::size_t lex_number(std::size_t at) {
    // jinja2 tries its float rule first; it does not apply right after a '.' (as in x.0.1).
    if (at == 0 || src_[at - 1] != '.') {
      const std::size_t whole = digit_group(at);
      std::optional<std::size_t> end;
      if (whole < src_.size() && src_[whole] == '.') {
        const std::size_t fraction = digit_group(whole + 1);
        if (fraction > whole + 1) end = exponent_at(fraction).value_or(fraction);
      }
      if (!end) end = exponent_at(whole);
      if (end) {
        const std::string text = without_underscores(src_.substr(at, *end - at));
        double value = 0;
        std::from_chars(text.data(), text.data() + text.size(), value);
        push(TokenType::kFloat, text, at);
        tokens_.back().number = value;
        return *end;
      }
    }
    int base = 10;
    std::size_t end = at;
    const char prefix = at + 1 < src_.size() ? static_cast<char>(src_[at + 1] | 0x20) : '\0';
    const auto digit_ok = [&](char c, int b) {
      if (b == 2) return c == '0' || c == '1';
      if (b == 8) return c >= '0' && c <= '7';
      return is_ascii_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
    };
    std::size_t digits_from = at;
    if (src_[at] == '0' && (prefix == 'b' || prefix == 'o' || prefix == 'x')) {
      base = prefix == 'b' ? 2 : prefix == 'o' ? 8 : 16;
      std::size_t p = at + 2;
      while (true) {
        std::size_t q = p;
        if (q < src_.size() && src_[q] == '_') ++q;
        if (q < src_.size() && digit_ok(src_[q], base)) {
          p = q + 1;
        } else {
          break;
        }
      }
      if (p > at + 2) {
        end = p;
        digits_from = at + 2;
      } else {
        base = 10;
      }
    }
    if (base == 10) {
      const bool zero = src_[at] == '0';
      std::size_t p = at + 1;
      while (true) {
        std::size_t q = p;
        if (q < src_.size() && src_[q] == '_') ++q;
        if (q < src_.size() && (zero ? src_[q] == '0' : is_ascii_digit(src_[q]))) {
          p = q + 1;
        } else {
          break;
        }
      }
      end = p;
      digits_from = at;
    }
    const std::string digits = without_underscores(src_.substr(digits_from, end - digits_from));
    std::int64_t value = 0;
    const auto result = std::from_chars(digits.data(), digits.data() + digits.size(), value, base);
    if (result.ec != std::errc()) {
      fail("an integer literal beyond 64 bits (Python's integers are unbounded)", at, ErrorCode::kUnsupported);
    }
    push(TokenType::kInteger, std::string(src_.substr(at, end - at)), at);
    tokens_.back().integer = value;
    return end;
  }

  std::size_t lex_string(std::size_t at) {
    const char quote = src_[at];
    std::size_t p = at + 1;
    while (p < src_.size() && src_[p] != quote) p += src_[p] == '\\' ? 2 : 1;
    if (p >= src_.size()) fail(fmt::format("unexpected char '{}'", quote), at);
    push(TokenType::kString, decode_string_literal(src_.substr(at + 1, p - at - 1), at), at);
    return p + 1;
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = static_cast<char>(c | 0x20);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }

  // jinja2 decodes literals with .encode("ascii", "backslashreplace").decode("unicode-escape"):
  // non-ASCII characters first become \x/\u/\U escapes, then Python's escapes are resolved.
  std::string decode_string_literal(std::string_view raw, std::size_t at) {
    std::string ascii;
    for (std::size_t i = 0; i < raw.size();) {
      const unicode::Decoded d = unicode::decode_at(raw, i);
      if (d.code_point < 0x80) {
        ascii.push_back(static_cast<char>(d.code_point));
      } else if (d.code_point <= 0xFF) {
        ascii += fmt::format("\\x{:02x}", static_cast<unsigned>(d.code_point));
      } else if (d.code_point <= 0xFFFF) {
        ascii += fmt::format("\\u{:04x}", static_cast<unsigned>(d.code_point));
      } else {
        ascii += fmt::format("\\U{:08x}", static_cast<unsigned>(d.code_point));
      }
      i += d.bytes;
    }
    std::string out;
    for (std::size_t i = 0; i < ascii.size(); ++i) {
      if (ascii[i] != '\\' || i + 1 >= ascii.size()) {
        out.push_back(ascii[i]);
        continue;
      }
      const char e = ascii[++i];
      const auto hex_escape = [&](std::size_t width, const char* name) {
        char32_t cp = 0;
        for (std::size_t k = 0; k < width; ++k) {
          if (i + 1 + k >= ascii.size() || hex_value(ascii[i + 1 + k]) < 0) {
            fail(fmt::format("truncated {} escape in a string literal", name), at);
          }
          cp = cp * 16 + static_cast<char32_t>(hex_value(ascii[i + 1 + k]));
        }
        i += width;
        if (cp > 0x10FFFF) fail("illegal Unicode character in a string literal", at);
        if (cp >= 0xD800 && cp <= 0xDFFF) {
          fail("a lone surrogate escape in a string literal", at, ErrorCode::kUnsupported);
        }
        unicode::append(out, cp);
      };
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x': hex_escape(2, "\\xXX"); break;
        case 'u': hex_escape(4, "\\uXXXX"); break;
        case 'U': hex_escape(8, "\\UXXXXXXXX"); break;
        case 'N': fail("a \\N{...} escape in a string literal", at, ErrorCode::kUnsupported);
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i + 1 < ascii.size() && ascii[i + 1] >= '0' && ascii[i + 1] <= '7'; ++k) {
              cp = cp * 8 + static_cast<char32_t>(ascii[++i] - '0');
            }
            unicode::append(out, cp);
          } else {
            out.push_back('\\');  // Python keeps an unknown escape as written
            out.push_back(e);
          }
      }
    }
    return out;
  }

  std::string_view src_;
  LineIndex lines_;
  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
  bool line_starting_ = true;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace sitsrt::chat
