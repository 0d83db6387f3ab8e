// libFuzzer target: SentencePiece encode/decode and the streaming UTF-8 decoder on arbitrary
// bytes. Properties: encoding never fails on any input (byte fallback), decoding the ids gives
// the input back byte for byte, and the stream decoder emits only valid UTF-8 whose
// concatenation equals the whole-sequence decode.
#include "formats/gguf.hpp"
#include "fuzz/stream_check.hpp"
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
  sitsrt::fuzz::check_stream_decode(tok, ids);
  return 0;
}
