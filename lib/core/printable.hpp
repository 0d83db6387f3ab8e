// Strings from files (model metadata, tensor names, config keys, audit-log text) shown to a
// person: escaped so that they cannot cut a message (NUL), move the cursor or recolour the
// terminal (ESC, CSI and other control characters), reverse the text (bidirectional overrides)
// or smuggle invalid UTF-8 into a terminal or a log.
#pragma once

#include <string>
#include <string_view>

namespace sitsrt {

// `text` with C0 controls, DEL, C1 controls (U+0080..U+009F), bidirectional formatting
// characters (U+202A..U+202E, U+2066..U+2069) and bytes that are not valid UTF-8 written as
// \xNN escapes (\n, \t, \r and \0 for those four), valid UTF-8 kept as it is. Backslashes are
// kept, so escaping twice changes nothing (messages that wrap other messages stay readable).
// `keep_line_breaks`: '\n' and '\t' pass through (multi-line text such as generated tokens).
std::string printable(std::string_view text, bool keep_line_breaks = false);

}  // namespace sitsrt
