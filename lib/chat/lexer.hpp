// Splits a template into jinja2's tokens, with the whitespace rules transformers configures:
// trim_blocks (the first newline after a block or comment tag is dropped), lstrip_blocks
// (spaces and tabs before a block or comment tag on its own line are dropped), '-' and '+'
// modifiers on tags, {% raw %} blocks, newlines normalized to "\n" and one trailing newline of the
// template dropped (keep_trailing_newline=False). It follows jinja2/lexer.py rule by rule.
#pragma once

#include "chat/source.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt::chat {

enum class TokenType {
  kData,           // template text to print as is
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,  // text holds the decoded value
  kInteger,
  kFloat,
  kOperator,  // text holds the operator, e.g. "//" or "("
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;
  std::int64_t integer = 0;
  double number = 0.0;
  SourcePos pos;
};

// The template text jinja2 tokenizes: "\r\n" and "\r" become "\n", and one trailing newline
// is removed.
[[nodiscard]] std::string normalize_template_source(std::string_view source);

// Tokenizes normalized source (see normalize_template_source). Throws ParseError.
[[nodiscard]] std::vector<Token> tokenize(std::string_view source);

}  // namespace sitsrt::chat
