// libFuzzer target: byte-level BPE encode/decode on arbitrary bytes and on random valid UTF-8.
// The first input byte picks the pre-tokenizer (gpt2, llama3, qwen2), whether special tokens
// are parsed, and whether the rest is used as raw bytes or turned into code points (3 bytes ->
// one scalar value). Properties: encoding never fails; the tokens' bytes give the input back
// byte for byte (control tokens standing for their own text when parsed), with each byte outside
// a well-formed UTF-8 character read as U+FFFD (llama.cpp's reading); decode(encode(x)) ==
// x for valid UTF-8; the stream decoder emits valid UTF-8 that adds up to decode().
// The vocabulary: SITSRT_FUZZ_BPE (a tokenizer.json or a byte-level GGUF) or a synthetic one.
#include "fuzz/stream_check.hpp"
#include "support/synthetic_vocab.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/utf8.hpp"

#include <array>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

namespace {

using sitsrt::Tokenizer;

const std::array<std::unique_ptr<Tokenizer>, 3>& tokenizers() {
  static const std::array<std::unique_ptr<Tokenizer>, 3> all = [] {
    std::array<std::unique_ptr<Tokenizer>, 3> out;
    if (const char* path = std::getenv("SITSRT_FUZZ_BPE")) {
      for (auto& t : out) t = sitsrt::load_tokenizer(path);
      return out;
    }
    sitsrt::test::Rng rng(7);
    sitsrt::Vocabulary vocab = sitsrt::test::synthetic_bpe_vocab(sitsrt::test::random_words(rng, 2000), 8000);
    vocab.pieces.push_back("<|im_start|>");
    vocab.types.push_back(sitsrt::TokenType::kControl);
    vocab.pieces.push_back("<tag>");
    vocab.types.push_back(sitsrt::TokenType::kUserDefined);
    const std::array<const char*, 3> pres = {"gpt2", "llama3", "qwen2"};
    for (std::size_t i = 0; i < out.size(); ++i) {
      vocab.pre = pres[i];
      out[i] = sitsrt::make_tokenizer(vocab, "synthetic");
    }
    return out;
  }();
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  const Tokenizer& tok = *tokenizers()[mode % 3];
  const bool parse_special = (mode & 0x10) != 0;
  std::string text;
  if ((mode & 0x20) != 0) {  // random valid UTF-8
    for (std::size_t i = 1; i + 2 < size; i += 3) {
      std::uint32_t cp = (static_cast<std::uint32_t>(data[i]) << 16 | data[i + 1] << 8 | data[i + 2]) % 0x110000;
      if (cp >= 0xD800 && cp <= 0xDFFF) cp -= 0x800;
      if ((data[i] & 0x80) != 0) cp %= 0x80;  // keep ASCII (spaces, digits, quotes) frequent
      sitsrt::test::append_code_point(cp, text);
    }
  } else {
    text.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  }

  const auto ids = tok.encode(text, /*add_bos=*/false, parse_special);
  std::string bytes;
  for (const auto id : ids) {
    const bool control = tok.vocab().types[static_cast<std::size_t>(id)] == sitsrt::TokenType::kControl;
    bytes += control ? tok.vocab().pieces[static_cast<std::size_t>(id)] : tok.token_bytes(id);
  }
  std::string expected;
  for (std::size_t pos = 0; pos < text.size();) {
    const sitsrt::detail::Utf8Sequence seq = sitsrt::detail::scan_utf8(std::string_view(text).substr(pos));
    const bool complete = seq.status == sitsrt::detail::Utf8Status::kComplete;
    expected += complete ? std::string_view(text).substr(pos, seq.length) : sitsrt::detail::kReplacementCharacter;
    pos += complete ? seq.length : 1;
  }
  if (bytes != expected) __builtin_trap();
  if (sitsrt::fuzz::valid_utf8(text) && !parse_special && tok.decode(ids) != text) __builtin_trap();
  sitsrt::fuzz::check_stream_decode(tok, ids);
  return 0;
}
