// Streaming UTF-8 assembly for generated tokens (see Utf8StreamDecoder).
#pragma once

#include <string>
#include <string_view>

namespace sitsrt {

// Turns a stream of token bytes into valid UTF-8 text pieces: a character split across
// several byte tokens is held back until complete; invalid sequences become U+FFFD.
class Utf8StreamDecoder {
 public:
  // Appends bytes and returns the text that is now complete (possibly empty).
  std::string push(std::string_view bytes);
  // Returns what is held back (an incomplete sequence becomes U+FFFD) and resets.
  std::string flush();

 private:
  std::string pending_;
};

}  // namespace sitsrt
