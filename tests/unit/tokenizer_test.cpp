// Tokenizer layer: GGUF vocabulary reading, SentencePiece BPE encoding on hand-built
// vocabularies, byte fallback, decoding, streaming UTF-8, and the real stories260K vocabulary
// (ids checked against llama.cpp / llama2.c references, pieces against llama2.c's tok512.bin).
#include "formats/gguf.hpp"
#include "support/random.hpp"
#include "support/skip.hpp"
#include "support/synthetic_vocab.hpp"
#include "tokenizer/spm_tokenizer.hpp"
#include "tokenizer/vocabulary.hpp"

#include <sitsrt/error.hpp>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace sitsrt;

namespace {

constexpr std::string_view kMarker = "\xE2\x96\x81";       // U+2581, SentencePiece's space
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Test pieces are written with '_' for U+2581 to stay readable.
std::string marked(std::string_view readable) {
  std::string out;
  for (const char c : readable) {
    if (c == '_') {
      out += kMarker;
    } else {
      out += c;
    }
  }
  return out;
}

std::string readable(std::string_view piece) {
  std::string out;
  while (!piece.empty()) {
    const bool at_marker = piece.starts_with(kMarker);
    out += at_marker ? '_' : piece.front();
    piece.remove_prefix(at_marker ? kMarker.size() : 1);
  }
  return out;
}

// ids 0..2: <unk>, <s>, </s>; then (optionally) 256 byte tokens; then `pieces` as normal tokens.
Vocabulary make_vocab(const std::vector<std::pair<std::string, float>>& pieces, bool with_byte_tokens = true) {
  Vocabulary vocab;
  vocab.model = "llama";
  const auto add = [&](std::string piece, float score, TokenType type) {
    vocab.pieces.push_back(std::move(piece));
    vocab.scores.push_back(score);
    vocab.types.push_back(type);
  };
  add("<unk>", 0.0f, TokenType::kUnknown);
  add("<s>", 0.0f, TokenType::kControl);
  add("</s>", 0.0f, TokenType::kControl);
  if (with_byte_tokens) {
    for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 0.0f, TokenType::kByte);
  }
  for (const auto& [piece, score] : pieces) add(marked(piece), score, TokenType::kNormal);
  vocab.unk = 0;
  vocab.bos = 1;
  vocab.eos = 2;
  return vocab;
}

std::vector<std::string> pieces_of(const SpmTokenizer& tokenizer, const std::vector<std::int32_t>& ids) {
  std::vector<std::string> out;
  for (const std::int32_t id : ids) out.push_back(readable(tokenizer.vocab().pieces.at(id)));
  return out;
}

std::int32_t id_of(const Vocabulary& vocab, std::string_view readable_piece) {
  const std::string piece = marked(readable_piece);
  for (std::int32_t id = 0; id < vocab.size(); ++id) {
    if (vocab.pieces[id] == piece) return id;
  }
  FAIL("no piece " << readable_piece);
  return -1;
}

ErrorCode error_code_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.code();
  }
  FAIL("no sitsrt::Error thrown");
  return ErrorCode::kInternal;
}

// --- A minimal GGUF v3 serialiser, independent of the library's writer ---------------------

template <typename T>
void put(std::vector<std::byte>& out, T value) {
  const auto* bytes = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof(T));
}

void put_string(std::vector<std::byte>& out, std::string_view text) {
  put<std::uint64_t>(out, text.size());
  const auto* bytes = reinterpret_cast<const std::byte*>(text.data());
  out.insert(out.end(), bytes, bytes + text.size());
}

void put_payload(std::vector<std::byte>& out, const gguf::Value& value) {
  using T = gguf::ValueType;
  const auto as_unsigned = [&] { return std::get<std::uint64_t>(value.data); };
  const auto as_signed = [&] { return std::get<std::int64_t>(value.data); };
  switch (value.type) {
    case T::kU8:
      put<std::uint8_t>(out, static_cast<std::uint8_t>(as_unsigned()));
      break;
    case T::kI8:
      put<std::int8_t>(out, static_cast<std::int8_t>(as_signed()));
      break;
    case T::kU16:
      put<std::uint16_t>(out, static_cast<std::uint16_t>(as_unsigned()));
      break;
    case T::kI16:
      put<std::int16_t>(out, static_cast<std::int16_t>(as_signed()));
      break;
    case T::kU32:
      put<std::uint32_t>(out, static_cast<std::uint32_t>(as_unsigned()));
      break;
    case T::kI32:
      put<std::int32_t>(out, static_cast<std::int32_t>(as_signed()));
      break;
    case T::kU64:
      put<std::uint64_t>(out, as_unsigned());
      break;
    case T::kI64:
      put<std::int64_t>(out, as_signed());
      break;
    case T::kF32:
      put<float>(out, static_cast<float>(std::get<double>(value.data)));
      break;
    case T::kF64:
      put<double>(out, std::get<double>(value.data));
      break;
    case T::kBool:
      put<std::uint8_t>(out, std::get<bool>(value.data) ? 1 : 0);
      break;
    case T::kString:
      put_string(out, std::get<std::string>(value.data));
      break;
    case T::kArray: {
      const auto& array = std::get<gguf::Array>(value.data);
      put<std::uint32_t>(out, static_cast<std::uint32_t>(array.element_type));
      put<std::uint64_t>(out, array.items.size());
      for (const gguf::Value& item : array.items) put_payload(out, item);
      break;
    }
  }
}

std::vector<std::byte> gguf_image(const std::vector<gguf::KeyValue>& metadata) {
  std::vector<std::byte> out;
  for (const char c : std::string_view("GGUF")) out.push_back(static_cast<std::byte>(c));
  put<std::uint32_t>(out, 3);
  put<std::uint64_t>(out, 0);  // tensors
  put<std::uint64_t>(out, metadata.size());
  for (const auto& [key, value] : metadata) {
    put_string(out, key);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(value.type));
    put_payload(out, value);
  }
  out.resize((out.size() + 31) / 32 * 32);
  return out;
}

gguf::Value string_array(const std::vector<std::string>& items) {
  std::vector<gguf::Value> values;
  for (const auto& item : items) values.push_back(gguf::Value::string(item));
  return gguf::Value::array(gguf::ValueType::kString, std::move(values));
}

gguf::Value f32_array(const std::vector<float>& items) {
  std::vector<gguf::Value> values;
  for (const float item : items) values.push_back(gguf::Value::f32(item));
  return gguf::Value::array(gguf::ValueType::kF32, std::move(values));
}

gguf::Value i32_array(const std::vector<std::int32_t>& items) {
  std::vector<gguf::Value> values;
  for (const std::int32_t item : items) values.push_back(gguf::Value::i32(item));
  return gguf::Value::array(gguf::ValueType::kI32, std::move(values));
}

// A valid four-token vocabulary; tests edit one key to break it.
std::vector<gguf::KeyValue> small_vocab_metadata() {
  return {
      {"tokenizer.ggml.model", gguf::Value::string("llama")},
      {"tokenizer.ggml.tokens", string_array({"<unk>", "<s>", "</s>", marked("_hi")})},
      {"tokenizer.ggml.scores", f32_array({0.0f, 0.0f, 0.0f, -1.5f})},
      {"tokenizer.ggml.token_type", i32_array({2, 3, 3, 1})},
      {"tokenizer.ggml.bos_token_id", gguf::Value::u32(1)},
      {"tokenizer.ggml.eos_token_id", gguf::Value::u32(2)},
      {"tokenizer.ggml.unknown_token_id", gguf::Value::u32(0)},
      {"tokenizer.ggml.padding_token_id", gguf::Value::u32(0xFFFFFFFFu)},
  };
}

void set_key(std::vector<gguf::KeyValue>& metadata, const std::string& key, std::optional<gguf::Value> value) {
  std::erase_if(metadata, [&](const gguf::KeyValue& kv) { return kv.key == key; });
  if (value) metadata.push_back({key, std::move(*value)});
}

Vocabulary read_from_image(const std::vector<gguf::KeyValue>& metadata) {
  const std::vector<std::byte> image = gguf_image(metadata);
  return read_vocabulary(gguf::File::parse(image, "test.gguf"));
}

// --- The real stories260K vocabulary ----------------------------------------------------------

std::string shared_file(std::string_view relative_path) {
  return std::string(SITSRT_SHARED_DIR) + "/" + std::string(relative_path);
}
std::string model_path() {
  return shared_file("models/stories260K.gguf");
}

const SpmTokenizer* real_tokenizer() {
  static const std::optional<SpmTokenizer> tokenizer = []() -> std::optional<SpmTokenizer> {
    if (!std::filesystem::exists(model_path())) return std::nullopt;
    return SpmTokenizer(read_vocabulary(gguf::File::open(model_path())));
  }();
  return tokenizer ? &*tokenizer : nullptr;
}


constexpr auto kRoundTripTexts = std::to_array<std::string_view>({
    "Once upon a time, there was a little girl named Lily.",
    "Hello,   world!  Trailing spaces   ",
    " leading space",
    "   ",
    "caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9 \xC3\x85ngstr\xC3\xB6m",
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xE4\xB8\xAD\xE6\x96\x87 \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",
    "emoji \xF0\x9F\x98\x80\xF0\x9F\x8E\x89 family \xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",
    "flag \xF0\x9F\x87\xAB\xF0\x9F\x87\xB7 \xE2\x82\xAC",
    "tabs\tand\nnewlines\r\n\n end",
    "no-break\xC2\xA0space",
    "<s> and </s> and <0x41> are plain text here",
    "",
});

}  // namespace

// --- Encoding on hand-built vocabularies -------------------------------------------------------

TEST_CASE("merges follow vocabulary scores", "[tokenizer]") {
  for (const auto& [ab, bc, expected] : {std::tuple{-1.0f, -2.0f, std::vector<std::string>{"ab", "c"}},
                                         std::tuple{-2.0f, -1.0f, std::vector<std::string>{"a", "bc"}}}) {
    Vocabulary vocab = make_vocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", ab}, {"bc", bc}});
    vocab.add_space_prefix = false;
    const SpmTokenizer tokenizer(vocab);
    CHECK(pieces_of(tokenizer, tokenizer.encode("abc", false)) == expected);
  }
  // Multi-step merges: "_t" + "he" builds "_the" even though "_th" is not a piece.
  const SpmTokenizer tokenizer(make_vocab({{"_t", -1}, {"he", -2}, {"_the", -3}, {"h", -9}, {"e", -9}}));
  CHECK(pieces_of(tokenizer, tokenizer.encode("the", false)) == std::vector<std::string>{"_the"});
}

TEST_CASE("equal scores merge the leftmost pair first", "[tokenizer]") {
  Vocabulary vocab = make_vocab({{"a", -10}, {"b", -10}, {"c", -10}, {"aa", 0}, {"ab", -1}, {"bc", -1}});
  vocab.add_space_prefix = false;
  const SpmTokenizer tokenizer(vocab);
  CHECK(pieces_of(tokenizer, tokenizer.encode("aaa", false)) == std::vector<std::string>{"aa", "a"});
  CHECK(pieces_of(tokenizer, tokenizer.encode("aaaaa", false)) == std::vector<std::string>{"aa", "aa", "a"});
  CHECK(pieces_of(tokenizer, tokenizer.encode("abc", false)) == std::vector<std::string>{"ab", "c"});
}

TEST_CASE("characters outside the vocabulary fall back to byte tokens", "[tokenizer]") {
  Vocabulary vocab = make_vocab({{"a", -1}, {"_", -2}});
  vocab.add_space_prefix = false;
  const SpmTokenizer tokenizer(vocab);
  const auto bytes = [](std::initializer_list<int> values) {
    std::vector<std::string> out;
    for (const int v : values) out.push_back(fmt::format("<0x{:02X}>", v));
    return out;
  };
  CHECK(pieces_of(tokenizer, tokenizer.encode("\xC3\xA9", false)) == bytes({0xC3, 0xA9}));                      // é
  CHECK(pieces_of(tokenizer, tokenizer.encode("\xF0\x9F\x98\x80", false)) == bytes({0xF0, 0x9F, 0x98, 0x80}));  // 😀
  CHECK(pieces_of(tokenizer, tokenizer.encode("\xE4\xB8\xAD", false)) == bytes({0xE4, 0xB8, 0xAD}));            // 中
  CHECK(pieces_of(tokenizer, tokenizer.encode("\n\t", false)) == bytes({0x0A, 0x09}));
  std::vector<std::string> mixed = {"a", "<0xE4>", "<0xB8>", "<0xAD>", "_", "a"};
  CHECK(pieces_of(tokenizer, tokenizer.encode("a\xE4\xB8\xAD a", false)) == mixed);
  // A byte that cannot start a character is a symbol of its own; the 'a' after it still matches.
  CHECK(pieces_of(tokenizer, tokenizer.encode("\xC3"
                                              "a",
                                              false)) == std::vector<std::string>{"<0xC3>", "a"});
  CHECK(pieces_of(tokenizer, tokenizer.encode("\xF0\x9F"
                                              "a",
                                              false)) == std::vector<std::string>{"<0xF0>", "<0x9F>", "a"});
}

TEST_CASE("without byte tokens an unknown character becomes one UNK", "[tokenizer]") {
  Vocabulary vocab = make_vocab({{"a", -1}, {"b", -1}}, /*with_byte_tokens=*/false);
  vocab.add_space_prefix = false;
  SpmTokenizer tokenizer(vocab);
  CHECK(pieces_of(tokenizer, tokenizer.encode("a\xE4\xB8\xAD\xF0\x9F\x98\x80"
                                              "b",
                                              false)) == std::vector<std::string>{"a", "<unk>", "<unk>", "b"});
  vocab.unk = -1;
  SpmTokenizer no_unk(vocab);
  CHECK(error_code_of([&] { (void)no_unk.encode("a\xE4\xB8\xAD", false); }) == ErrorCode::kInvalidArgument);
}

TEST_CASE("dummy prefix, whitespace runs and empty text", "[tokenizer]") {
  Vocabulary vocab =
      make_vocab({{"_", -5}, {"__", -1}, {"a", -10}, {"b", -10}, {"_a", -2}, {"_b", -3}, {"hi", -4}, {"_hi", -4}});
  const SpmTokenizer with_prefix(vocab);
  CHECK(pieces_of(with_prefix, with_prefix.encode("hi", true)) == std::vector<std::string>{"<s>", "_hi"});
  CHECK(pieces_of(with_prefix, with_prefix.encode("a   b", false)) == std::vector<std::string>{"_a", "__", "_b"});
  CHECK(pieces_of(with_prefix, with_prefix.encode(" ", false)) == std::vector<std::string>{"__"});
  CHECK(with_prefix.encode("", true) == std::vector<std::int32_t>{1});
  CHECK(with_prefix.encode("", false).empty());

  vocab.add_space_prefix = false;
  const SpmTokenizer without_prefix(vocab);
  CHECK(pieces_of(without_prefix, without_prefix.encode("hi", false)) == std::vector<std::string>{"hi"});
  CHECK(pieces_of(without_prefix, without_prefix.encode("a  b", false)) == std::vector<std::string>{"a", "__", "b"});

  vocab.bos = -1;
  const SpmTokenizer no_bos(vocab);
  CHECK(no_bos.encode("", true).empty());
}

TEST_CASE("user-defined pieces are cut out first as llama.cpp does: Gemma whitespace runs", "[tokenizer]") {
  // "   " (user-defined, as in Gemma 3) is one token, the text around it merged on its own;
  // with a dummy prefix the text after it gets one too. Control texts stay text.
  Vocabulary vocab = make_vocab({{"_", -5}, {"__", -1}, {"a", -10}, {"b", -10}, {"_a", -2}, {"_b", -3}});
  vocab.pieces.push_back("   ");
  vocab.scores.push_back(0.0f);
  vocab.types.push_back(TokenType::kUserDefined);
  vocab.add_space_prefix = false;
  const SpmTokenizer plain(vocab);
  CHECK(pieces_of(plain, plain.encode("a   b", false)) == std::vector<std::string>{"a", "   ", "b"});
  CHECK(pieces_of(plain, plain.encode("a    b", false)) == std::vector<std::string>{"a", "   ", "_b"});
  CHECK(pieces_of(plain, plain.encode("a  b", false)) == std::vector<std::string>{"a", "__", "b"});
  vocab.add_space_prefix = true;
  const SpmTokenizer prefixed(vocab);
  CHECK(pieces_of(prefixed, prefixed.encode("a   b", false)) == std::vector<std::string>{"_a", "   ", "_b"});
  CHECK(prefixed.encode("</s>", false).size() > 1);
  CHECK(prefixed.encode("</s>", false, true) == std::vector<std::int32_t>{2});
}

TEST_CASE("control and byte pieces never come out of merges", "[tokenizer]") {
  // "<s" + ">" would spell the BOS piece and "<0x4" + "1>" the byte token for 'A'.
  Vocabulary vocab = make_vocab({{"<", -1},
                                 {"s", -1},
                                 {">", -1},
                                 {"<s", -2},
                                 {"<0x4", -1},
                                 {"1>", -1},
                                 {"<0", -1},
                                 {"x4", -1},
                                 {"0x4", -1},
                                 {"<0x", -1}});
  vocab.add_space_prefix = false;
  const SpmTokenizer tokenizer(vocab);
  CHECK(pieces_of(tokenizer, tokenizer.encode("<s>", false)) == std::vector<std::string>{"<s", ">"});
  CHECK(pieces_of(tokenizer, tokenizer.encode("<0x41>", false)) == std::vector<std::string>{"<0x4", "1>"});
}

TEST_CASE("token_bytes, decode and end of generation", "[tokenizer]") {
  Vocabulary vocab = make_vocab({{"_the", -1}, {"a_b", -1}, {"_x", -1}});
  vocab.types[id_of(vocab, "_x")] = TokenType::kUserDefined;
  const SpmTokenizer tokenizer(vocab);
  CHECK(tokenizer.token_bytes(id_of(vocab, "_the")) == " the");
  CHECK(tokenizer.token_bytes(id_of(vocab, "a_b")) == "a b");
  CHECK(tokenizer.token_bytes(id_of(vocab, "_x")) == std::string(kMarker) + "x");  // user-defined: verbatim
  CHECK(tokenizer.token_bytes(id_of(vocab, "<0x0A>")) == "\n");
  CHECK(tokenizer.token_bytes(id_of(vocab, "<0xC3>")) == "\xC3");
  CHECK(tokenizer.token_bytes(id_of(vocab, "<0x00>")) == std::string(1, '\0'));
  CHECK(tokenizer.token_bytes(0).empty());  // <unk>
  CHECK(tokenizer.token_bytes(1).empty());  // <s>
  CHECK(tokenizer.token_bytes(2).empty());  // </s>
  CHECK_THROWS_AS(tokenizer.token_bytes(vocab.size()), Error);

  const std::int32_t the = id_of(vocab, "_the");
  const std::int32_t c3 = id_of(vocab, "<0xC3>");
  const std::int32_t a9 = id_of(vocab, "<0xA9>");
  CHECK(tokenizer.decode(std::vector<std::int32_t>{1, the, the}) == " the the");
  CHECK(tokenizer.decode(std::vector<std::int32_t>{1, the, the}, true) == "the the");
  CHECK(tokenizer.decode(std::vector<std::int32_t>{the, c3, a9}, true) == "the\xC3\xA9");
  const std::string r(kReplacement);
  CHECK(tokenizer.decode(std::vector<std::int32_t>{c3, the}) == r + " the");
  CHECK(tokenizer.decode(std::vector<std::int32_t>{the, c3}) == " the" + r);
  CHECK(tokenizer.decode(std::vector<std::int32_t>{a9, a9}) == r + r);
  CHECK(tokenizer.decode({}).empty());

  CHECK(tokenizer.is_end_of_generation(2));
  CHECK_FALSE(tokenizer.is_end_of_generation(1));
  CHECK_FALSE(tokenizer.is_end_of_generation(-1));
}

TEST_CASE("inconsistent hand-built vocabularies are rejected", "[tokenizer]") {
  Vocabulary vocab = make_vocab({{"a", 0}});
  vocab.scores.pop_back();
  CHECK(error_code_of([&] { SpmTokenizer{vocab}; }) == ErrorCode::kInvalidArgument);
  vocab = make_vocab({{"a", 0}});
  vocab.bos = vocab.size();
  CHECK_THROWS_WITH(SpmTokenizer{vocab}, Catch::Contains("bos"));
  CHECK_THROWS_AS(SpmTokenizer{Vocabulary{}}, Error);
  vocab = make_vocab({{"a", 0}});
  vocab.scores.clear();  // missing scores and types default to 0 / normal
  vocab.types.clear();
  CHECK_NOTHROW(SpmTokenizer{vocab});
}

// --- Streaming UTF-8 -----------------------------------------------------------------------------

TEST_CASE("Utf8StreamDecoder reassembles characters split across pushes", "[tokenizer]") {
  for (const std::string_view text : kRoundTripTexts) {
    CAPTURE(text);
    Utf8StreamDecoder decoder;
    std::string joined;
    for (const char byte : text) {
      const std::string piece = decoder.push(std::string_view(&byte, 1));
      // Whatever comes out is whole characters: decoding it again changes nothing.
      Utf8StreamDecoder check;
      CHECK(check.push(piece) == piece);
      CHECK(check.flush().empty());
      joined += piece;
    }
    joined += decoder.flush();
    CHECK(joined == text);
  }
  Utf8StreamDecoder decoder;
  CHECK(decoder.push("\xE4").empty());
  CHECK(decoder.push("\xB8").empty());
  CHECK(decoder.push("\xAD"
                     "ab\xF0\x9F") ==
        "\xE4\xB8\xAD"
        "ab");
  CHECK(decoder.push("\x98\x80") == "\xF0\x9F\x98\x80");
}

TEST_CASE("Utf8StreamDecoder replaces invalid sequences per maximal subpart", "[tokenizer]") {
  const auto decode_all = [](std::string_view bytes) {
    Utf8StreamDecoder decoder;
    std::string out = decoder.push(bytes);
    return out + decoder.flush();
  };
  const std::string r(kReplacement);
  CHECK(decode_all("\xC3(") == r + "(");                   // truncated 2-byte
  CHECK(decode_all("\x80\xBF") == r + r);                  // lone continuations
  CHECK(decode_all("\xC0\xAF") == r + r);                  // overlong '/'
  CHECK(decode_all("\xE0\x80\xAF") == r + r + r);          // overlong 3-byte
  CHECK(decode_all("\xED\xA0\x80") == r + r + r);          // surrogate U+D800
  CHECK(decode_all("\xF4\x90\x80\x80") == r + r + r + r);  // above U+10FFFF
  CHECK(decode_all("\xF5\xFF") == r + r);                  // never valid
  CHECK(decode_all("\xF0\x9F\x98"
                   "A") == r + "A");                                                 // one U+FFFD for the valid prefix
  CHECK(decode_all("\xE1\x80\xE2\xF0\x91\x92\xF1\xBF\x41") == r + r + r + r + "A");  // Unicode's example
  CHECK(decode_all("\xF0\x9F\x98") == r);                                            // cut off at the end: flushed

  Utf8StreamDecoder decoder;
  CHECK(decoder.push("ok\xE2\x82") == "ok");
  CHECK(decoder.flush() == r);
  CHECK(decoder.push("\xAC") == r);  // flush reset the state: now a lone continuation byte
  CHECK(decoder.flush().empty());
}

// --- GGUF vocabulary reading --------------------------------------------------------------------

TEST_CASE("read_vocabulary reads tokenizer.ggml keys", "[tokenizer][gguf]") {
  std::vector<gguf::KeyValue> metadata = small_vocab_metadata();
  set_key(metadata, "tokenizer.ggml.add_bos_token", gguf::Value::boolean(false));
  set_key(metadata, "tokenizer.ggml.add_space_prefix", gguf::Value::boolean(false));
  const Vocabulary vocab = read_from_image(metadata);
  CHECK(vocab.model == "llama");
  CHECK(vocab.size() == 4);
  CHECK(vocab.pieces[3] == marked("_hi"));
  CHECK(vocab.scores == std::vector<float>{0.0f, 0.0f, 0.0f, -1.5f});
  CHECK(vocab.types ==
        std::vector<TokenType>{TokenType::kUnknown, TokenType::kControl, TokenType::kControl, TokenType::kNormal});
  CHECK(vocab.bos == 1);
  CHECK(vocab.eos == 2);
  CHECK(vocab.unk == 0);
  CHECK(vocab.pad == -1);
  CHECK_FALSE(vocab.add_bos);
  CHECK_FALSE(vocab.add_eos);
  CHECK_FALSE(vocab.add_space_prefix);
}

TEST_CASE("read_vocabulary defaults for optional keys", "[tokenizer][gguf]") {
  std::vector<gguf::KeyValue> metadata = small_vocab_metadata();
  for (const char* key :
       {"tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"}) {
    set_key(metadata, key, std::nullopt);
  }
  const Vocabulary vocab = read_from_image(metadata);
  CHECK(vocab.scores == std::vector<float>(4, 0.0f));
  CHECK(vocab.types == std::vector<TokenType>(4, TokenType::kNormal));
  CHECK((vocab.bos == -1 && vocab.eos == -1 && vocab.unk == -1 && vocab.pad == -1));
  CHECK(vocab.add_bos);
  CHECK_FALSE(vocab.add_eos);
  CHECK(vocab.add_space_prefix);
}

TEST_CASE("read_vocabulary reads byte-level BPE keys (gpt2 model)", "[tokenizer][gguf]") {
  std::vector<gguf::KeyValue> metadata = small_vocab_metadata();
  set_key(metadata, "tokenizer.ggml.model", gguf::Value::string("gpt2"));
  set_key(metadata, "tokenizer.ggml.tokens", string_array({"h", "i", "hi", "<|endoftext|>"}));
  set_key(metadata, "tokenizer.ggml.merges", string_array({"h i"}));
  set_key(metadata, "tokenizer.ggml.pre", gguf::Value::string("qwen2"));
  set_key(metadata, "tokenizer.chat_template", gguf::Value::string("{{ messages }}"));
  const Vocabulary vocab = read_from_image(metadata);
  CHECK(vocab.model == "gpt2");
  CHECK(vocab.merges == std::vector<std::string>{"h i"});
  CHECK(vocab.pre == "qwen2");
  CHECK(vocab.chat_template == "{{ messages }}");
  CHECK_FALSE(vocab.add_space_prefix);  // byte-level BPE defaults: no dummy prefix, no BOS
  CHECK_FALSE(vocab.add_bos);

  set_key(metadata, "tokenizer.ggml.pre", std::nullopt);
  CHECK(read_from_image(metadata).pre == "default");
  set_key(metadata, "tokenizer.ggml.merges", std::nullopt);
  CHECK_THROWS_WITH(read_from_image(metadata), Catch::Contains("test.gguf") && Catch::Contains("tokenizer.ggml.merges"));
  set_key(metadata, "tokenizer.ggml.merges", f32_array({1.0f}));
  CHECK_THROWS_WITH(read_from_image(metadata), Catch::Contains("tokenizer.ggml.merges") && Catch::Contains("string"));
}

TEST_CASE("read_vocabulary rejects bad tokenizer metadata, naming the key", "[tokenizer][gguf]") {
  struct Case {
    std::string key;
    std::optional<gguf::Value> value;
    ErrorCode code;
    std::vector<std::string> message_parts;
  };
  const std::vector<Case> cases = {
      {"tokenizer.ggml.model", gguf::Value::string("t5"), ErrorCode::kUnsupported, {"t5", "supported: llama, gpt2"}},
      {"tokenizer.ggml.model", std::nullopt, ErrorCode::kInvalidModel, {"tokenizer.ggml.model"}},
      {"tokenizer.ggml.model", gguf::Value::u32(1), ErrorCode::kInvalidModel, {"tokenizer.ggml.model", "string"}},
      {"tokenizer.ggml.tokens", std::nullopt, ErrorCode::kInvalidModel, {"tokenizer.ggml.tokens", "missing"}},
      {"tokenizer.ggml.tokens", f32_array({1, 2, 3, 4}), ErrorCode::kInvalidModel, {"tokenizer.ggml.tokens"}},
      {"tokenizer.ggml.tokens", string_array({}), ErrorCode::kInvalidModel, {"tokenizer.ggml.tokens", "empty"}},
      {"tokenizer.ggml.scores", f32_array({0, 0, 0}), ErrorCode::kInvalidModel, {"tokenizer.ggml.scores", "3", "4"}},
      {"tokenizer.ggml.scores",
       f32_array({0, 0, 0, std::nanf("")}),
       ErrorCode::kInvalidModel,
       {"tokenizer.ggml.scores[3]"}},
      {"tokenizer.ggml.token_type",
       i32_array({1, 1, 1, 1, 1}),
       ErrorCode::kInvalidModel,
       {"tokenizer.ggml.token_type", "5", "4"}},
      {"tokenizer.ggml.token_type",
       i32_array({1, 1, 9, 1}),
       ErrorCode::kInvalidModel,
       {"tokenizer.ggml.token_type[2]"}},
      {"tokenizer.ggml.bos_token_id",
       gguf::Value::u32(4),
       ErrorCode::kInvalidModel,
       {"tokenizer.ggml.bos_token_id", "4"}},
      {"tokenizer.ggml.unknown_token_id",
       gguf::Value::string("0"),
       ErrorCode::kInvalidModel,
       {"tokenizer.ggml.unknown_token_id"}},
      {"tokenizer.ggml.add_bos_token",
       gguf::Value::u32(1),
       ErrorCode::kInvalidModel,
       {"tokenizer.ggml.add_bos_token", "bool"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.key);
    std::vector<gguf::KeyValue> metadata = small_vocab_metadata();
    set_key(metadata, c.key, c.value);
    try {
      read_from_image(metadata);
      FAIL("accepted");
    } catch (const Error& e) {
      CAPTURE(e.what());
      CHECK(e.code() == c.code);
      CHECK(std::string(e.what()).starts_with("test.gguf"));
      for (const std::string& part : c.message_parts) CHECK_THAT(e.what(), Catch::Contains(part));
    }
  }
  // A signed -1 also means "no token".
  std::vector<gguf::KeyValue> metadata = small_vocab_metadata();
  set_key(metadata, "tokenizer.ggml.padding_token_id", gguf::Value::i32(-1));
  CHECK(read_from_image(metadata).pad == -1);
}

// --- The real stories260K / tok512 vocabulary ---------------------------------------------------

TEST_CASE("stories260K vocabulary and reference encodings", "[tokenizer][model][gated]") {
  const SpmTokenizer* tokenizer = real_tokenizer();
  if (tokenizer == nullptr) SITSRT_SKIP(model_path() << " not found (see SITSRT_SHARED_DIR)");
  const Vocabulary& vocab = tokenizer->vocab();
  CHECK(vocab.size() == 512);
  CHECK(vocab.bos == 1);
  CHECK(vocab.eos == 2);
  CHECK(vocab.unk == 0);
  CHECK(vocab.pad == -1);
  CHECK(vocab.add_bos);
  CHECK(vocab.add_space_prefix);
  CHECK(tokenizer->encode("Once upon a time", true) == std::vector<std::int32_t>{1, 403, 407, 261, 378});
  CHECK(tokenizer->encode("Lily went to the park", true) ==
        std::vector<std::int32_t>{1, 317, 263, 377, 267, 265, 282, 295, 433});
  CHECK(tokenizer->is_end_of_generation(2));
}

TEST_CASE("stories260K: prompts and greedy continuations from llama.cpp", "[tokenizer][model][gated]") {
  const SpmTokenizer* tokenizer = real_tokenizer();
  if (tokenizer == nullptr) SITSRT_SKIP(model_path() << " not found (see SITSRT_SHARED_DIR)");
  const std::string path = shared_file("refdata/stories260K_greedy.json");
  std::ifstream file(path);
  if (!file) SITSRT_SKIP(path << " not found");
  const nlohmann::json reference = nlohmann::json::parse(file);
  for (const auto& result : reference.at("results")) {
    const auto prompt = result.at("prompt").get<std::string>();
    const auto prompt_ids = result.at("prompt_token_ids").get<std::vector<std::int32_t>>();
    const auto generated_ids = result.at("generated_token_ids").get<std::vector<std::int32_t>>();
    const auto generated_text = result.at("generated_text").get<std::string>();
    CAPTURE(prompt);
    CHECK(tokenizer->encode(prompt, true) == prompt_ids);
    CHECK(tokenizer->decode(generated_ids) == generated_text);
    std::vector<std::int32_t> all = prompt_ids;
    all.insert(all.end(), generated_ids.begin(), generated_ids.end());
    CHECK(tokenizer->decode(all, true) == prompt + generated_text);
  }
}

TEST_CASE("stories260K pieces and scores equal llama2.c's tok512.bin", "[tokenizer][model][gated]") {
  const SpmTokenizer* tokenizer = real_tokenizer();
  if (tokenizer == nullptr) SITSRT_SKIP(model_path() << " not found (see SITSRT_SHARED_DIR)");
  const std::string path = shared_file("models/tok512.bin");
  std::ifstream file(path, std::ios::binary);
  if (!file) SITSRT_SKIP(path << " not found");
  const auto read_i32 = [&] {
    std::int32_t v = 0;
    file.read(reinterpret_cast<char*>(&v), sizeof v);
    return v;
  };
  const std::int32_t max_token_length = read_i32();
  const Vocabulary& vocab = tokenizer->vocab();
  std::size_t longest = 0;
  for (std::int32_t id = 0; id < 512; ++id) {
    CAPTURE(id);
    float score = 0.0f;
    file.read(reinterpret_cast<char*>(&score), sizeof score);
    const std::int32_t length = read_i32();
    REQUIRE((length >= 0 && length <= 64));
    std::string piece(static_cast<std::size_t>(length), '\0');
    file.read(piece.data(), length);
    REQUIRE(file);
    longest = std::max(longest, piece.size());
    CHECK(score == vocab.scores[id]);
    // llama2.c keeps plain spaces and wraps BOS/EOS in newlines; GGUF uses U+2581 and "<s>".
    std::string expected;
    for (const char c : piece) expected += c == ' ' ? std::string(kMarker) : std::string(1, c);
    if (vocab.types[id] == TokenType::kControl) expected = expected.substr(1, expected.size() - 2);
    CHECK(vocab.pieces[id] == expected);
  }
  CHECK(file.peek() == std::char_traits<char>::eof());
  CHECK(static_cast<std::size_t>(max_token_length) == longest);
}

TEST_CASE("stories260K round trips: decode(encode(text)) == text", "[tokenizer][model][gated]") {
  const SpmTokenizer* tokenizer = real_tokenizer();
  if (tokenizer == nullptr) SITSRT_SKIP(model_path() << " not found (see SITSRT_SHARED_DIR)");
  for (const std::string_view text : kRoundTripTexts) {
    CAPTURE(text);
    const std::vector<std::int32_t> ids = tokenizer->encode(text, true);
    CHECK(tokenizer->decode(ids, /*strip_leading_space=*/true) == text);
    // Streaming the token bytes gives the same text.
    Utf8StreamDecoder stream;
    std::string streamed;
    for (const std::int32_t id : ids) streamed += stream.push(tokenizer->token_bytes(id));
    streamed += stream.flush();
    CHECK(streamed == tokenizer->decode(ids));
  }
  // Random mixes of ASCII, whitespace and multi-byte characters.
  const std::vector<std::string> alphabet = {"a",  "e", "t",    "h",   " ",        "  ",           "\n",
                                             "\t", ".", "Lily", "the", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80",
                                             "0"};
  test::Rng rng(3);
  for (int i = 0; i < 300; ++i) {
    std::string text;
    const int length = rng.uniform_int(1, 40);
    for (int j = 0; j < length; ++j) text += alphabet[rng.uniform_int(0, static_cast<int>(alphabet.size()) - 1)];
    CAPTURE(text);
    REQUIRE(tokenizer->decode(tokenizer->encode(text, true), true) == text);
  }
}

TEST_CASE("stories260K: arbitrary bytes survive encoding exactly", "[tokenizer][model][gated]") {
  const SpmTokenizer* tokenizer = real_tokenizer();
  if (tokenizer == nullptr) SITSRT_SKIP(model_path() << " not found (see SITSRT_SHARED_DIR)");
  test::Rng rng(11);
  for (int i = 0; i < 300; ++i) {
    std::string bytes(static_cast<std::size_t>(rng.uniform_int(1, 48)), '\0');
    for (char& b : bytes) b = static_cast<char>(rng.uniform_int(0, 255));
    CAPTURE(bytes);
    std::string raw;
    for (const std::int32_t id : tokenizer->encode(bytes, false)) raw += tokenizer->token_bytes(id);
    REQUIRE(raw == " " + bytes);  // invalid UTF-8 included: byte fallback loses nothing
  }
}

TEST_CASE("stories260K: a literal U+2581 in the text reads as a space", "[tokenizer][model][gated]") {
  // SentencePiece cannot tell U+2581 from an escaped space; llama.cpp behaves the same way.
  const SpmTokenizer* tokenizer = real_tokenizer();
  if (tokenizer == nullptr) SITSRT_SKIP(model_path() << " not found (see SITSRT_SHARED_DIR)");
  CHECK(tokenizer->encode("a\xE2\x96\x81the", false) == tokenizer->encode("a the", false));
  CHECK(tokenizer->decode(tokenizer->encode("a\xE2\x96\x81the", true), true) == "a the");
}

TEST_CASE("stories260K encodes a megabyte of text quickly", "[tokenizer][model][gated]") {
  const SpmTokenizer* tokenizer = real_tokenizer();
  if (tokenizer == nullptr) SITSRT_SKIP(model_path() << " not found (see SITSRT_SHARED_DIR)");
  const std::string paragraph =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.\n"
      "One day, she saw a big, red ball \xF0\x9F\x8E\x88 near the caf\xC3\xA9 \xE4\xB8\xAD.   The end.\t";
  std::string text;
  while (text.size() < (1u << 20)) text += paragraph;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::int32_t> ids = tokenizer->encode(text, true);
  const double encode_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const auto decode_start = std::chrono::steady_clock::now();
  const std::string decoded = tokenizer->decode(ids, true);
  const double decode_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - decode_start).count();
  std::cout << "tokenizer throughput: encode " << text.size() << " bytes -> " << ids.size() << " tokens in "
            << encode_ms << " ms; decode in " << decode_ms << " ms\n";
  CHECK(decoded == text);
}

TEST_CASE("SentencePiece encodes 1 MB with a 262k-entry vocabulary: whole words, exact round trip", "[tokenizer][speed]") {
  // Every prefix of every "_word" is a piece, so each word merges all the way (about five
  // merges per word). The time is printed, never checked (timings do not gate tests; the
  // throughput figure is benchmarks/bench_tokenizer.cpp's).
  test::Rng rng(262144);
  const std::vector<std::string> words = test::random_words(rng, 60000);
  const SpmTokenizer tokenizer(test::synthetic_spm_vocab(rng, words, 262144));
  REQUIRE(tokenizer.vocab().size() == 262144);
  const std::string text = test::synthetic_text(rng, words, 1 << 20);
  std::vector<std::int32_t> ids;
  const double best_ms = test::best_of_ms(2, [&] { ids = tokenizer.encode(text, false); });
  std::cout << "SentencePiece 262k: " << text.size() << " bytes -> " << ids.size() << " tokens in " << best_ms << " ms\n";
  CHECK(ids.size() < text.size() / 4);  // merges ran: whole words, not characters
  CHECK(tokenizer.decode(ids, true) == text);
}

TEST_CASE("SentencePiece word-by-word merging gives the whole-text result", "[tokenizer]") {
  // Pieces with U+2581 in a leading run ("__ab") and a few that cross a word boundary ("a_b",
  // as Gemma's ">_</") let encode() merge word by word, joining words only where a crossing
  // piece occurs. 65 more crossing pieces (never matched: the texts have no q or z) force the
  // whole-text path. Both must give the same ids on random texts, including runs of spaces.
  test::Rng rng(2581);
  std::vector<std::pair<std::string, float>> pieces;
  std::set<std::string> seen;
  while (pieces.size() < 300) {
    std::string piece(static_cast<std::size_t>(rng.uniform_int(0, 3)), '_');
    const int letters = rng.uniform_int(piece.empty() ? 2 : 0, 4);
    for (int i = 0; i < letters; ++i) piece += "abc"[rng.uniform_int(0, 2)];
    if (piece.size() >= 2 && seen.insert(piece).second) pieces.emplace_back(piece, rng.uniform(-10.0f, 0.0f));
  }
  for (const std::string crossing : {"a_b", "c_", "b__c", "_a_a", "ab_", "c_ab"}) {
    if (seen.insert(crossing).second) pieces.emplace_back(crossing, rng.uniform(-10.0f, 0.0f));
  }
  const SpmTokenizer by_word(make_vocab(pieces));
  for (int i = 0; i < 65; ++i) pieces.emplace_back("q_" + std::string(static_cast<std::size_t>(i + 1), 'z'), -1.0f);
  const SpmTokenizer whole(make_vocab(pieces));
  for (int trial = 0; trial < 1000; ++trial) {
    std::string text(static_cast<std::size_t>(rng.uniform_int(0, 40)), ' ');
    for (char& c : text) c = " abc"[rng.uniform_int(0, 3)];
    CAPTURE(text);
    REQUIRE(by_word.encode(text, false) == whole.encode(text, false));
  }
}
