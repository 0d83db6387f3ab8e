// libFuzzer target: SentencePiece encode/decode and the streaming UTF-8 decoder on arbitrary
// bytes. Properties: encoding never fails on any input (byte fallback), decoding the ids gives
// the input back byte for byte, and the stream decoder emits only valid UTF-8 whose
// concatenation equals the whole-sequence decode.
#include "formats/gguf.hpp"
#include "tokenizer/spm_tokenizer.hpp"

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

namespace {

const sitsrt::SpmTokenizer& tokenizer() {
  // The vocabulary comes from a real GGUF (SITSRT_FUZZ_VOCAB, default: the shared stories model).
  static const std::unique_ptr<sitsrt::SpmTokenizer> t = [] {
    const char* env = std::getenv("SITSRT_FUZZ_VOCAB");
    const std::string path = env ? env : SITSRT_SHARED_DIR "/models/stories260K.gguf";
    return std::make_unique<sitsrt::SpmTokenizer>(sitsrt::read_vocabulary(sitsrt::gguf::File::open(path)));
  }();
  return *t;
}

bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto& tok = tokenizer();
  const auto ids = tok.encode(text, /*add_bos=*/false);
  std::string bytes;
  for (auto id : ids) bytes += tok.token_bytes(id);
  // The dummy prefix adds one leading space to non-empty input; a literal U+2581 (the
  // SentencePiece space mark) prints as a space.
  std::string expected = text.empty() ? std::string() : " " + std::string(text);
  for (std::size_t at = expected.find("\xE2\x96\x81"); at != std::string::npos; at = expected.find("\xE2\x96\x81", at + 1)) {
    expected.replace(at, 3, " ");
  }
  if (tok.vocab().add_space_prefix && bytes != expected) __builtin_trap();
  sitsrt::Utf8StreamDecoder stream;
  std::string streamed;
  for (auto id : ids) {
    const std::string piece = stream.push(tok.token_bytes(id));
    if (!valid_utf8(piece)) __builtin_trap();
    streamed += piece;
  }
  streamed += stream.flush();
  if (!valid_utf8(streamed) || streamed != tok.decode(ids)) __builtin_trap();
  return 0;
}
