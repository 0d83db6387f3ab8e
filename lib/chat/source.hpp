// Positions in a template and the parse-time error the lexer and parser raise.
#pragma once

#include <sitsrt/error.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt::chat {

struct SourcePos {
  int line = 1;
  int column = 1;  // in code points, from 1
};

// A template that cannot be loaded: a syntax error (kInvalidArgument) or a construct this
// implementation does not support (kUnsupported). Template turns it into a sitsrt::Error that
// names the template's origin and the position.
struct ParseError {
  ErrorCode code;
  std::string message;
  SourcePos pos;
};

// Byte offsets to line:column, over the template text the lexer works on. The lexer asks in
// increasing order, so the last answer is kept and the next column counted on from it (a
// template on one long line would otherwise cost quadratic time).
class LineIndex {
 public:
  explicit LineIndex(std::string_view text);
  [[nodiscard]] SourcePos position(std::size_t offset);

 private:
  std::string_view text_;
  std::vector<std::size_t> line_starts_;
  std::size_t last_offset_ = 0;
  SourcePos last_;
};

}  // namespace sitsrt::chat
