// printable(): file-derived strings shown in messages and `info` output. A NUL must not cut a
// message short and no control sequence may reach a terminal; valid UTF-8 stays readable.
#include "core/printable.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <string>

using namespace sitsrt;
using namespace std::string_literals;

TEST_CASE("printable escapes controls, C1, bidi overrides and invalid UTF-8; keeps text and backslashes",
          "[core][printable]") {
  CHECK(printable("plain text: a/b\\c") == "plain text: a/b\\c");
  CHECK(printable("nul\0after"s) == "nul\\0after");
  CHECK(printable("\x1b[2J\x1b]0;title\x07") == "\\x1B[2J\\x1B]0;title\\x07");
  CHECK(printable("line\nbreak\ttab\rcr\x7f") == "line\\nbreak\\ttab\\rcr\\x7F");
  CHECK(printable("line\nbreak\ttab", true) == "line\nbreak\ttab");
  CHECK(printable("\xc2\x9b" "31m") == "\\xC2\\x9B31m");              // CSI as a C1 control (U+009B)
  CHECK(printable("abc\xe2\x80\xae" "cba") == "abc\\xE2\\x80\\xAEcba");  // RIGHT-TO-LEFT OVERRIDE
  CHECK(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(printable("\xff\xc0\xaf\xed\xa0\x80") == "\\xFF\\xC0\\xAF\\xED\\xA0\\x80");  // invalid, overlong, surrogate
  CHECK(printable("trunc\xe2\x82") == "trunc\\xE2\\x82");
  const std::string once = printable("a\0b\x1b\xff"s);
  CHECK(printable(once) == once);  // idempotent: wrapping an escaped message changes nothing
}

TEST_CASE("sitsrt::Error messages are printable whole", "[core][printable]") {
  const Error e(ErrorCode::kInvalidModel, "m.gguf: architecture 'lla\0ma\x1b[31m' is not supported"s);
  CHECK(std::string(e.what()) == "m.gguf: architecture 'lla\\0ma\\x1B[31m' is not supported");
}
