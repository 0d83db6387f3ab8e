// Byte-level BPE: the GPT-2 byte mapping, pre-tokenizer splits of the GPT-2 / Llama 3 / Qwen2
// patterns, hand-checked merges on small vocabularies, special tokens, lossless round trips on
// random UTF-8 and random bytes, and the Tokenizer factory. Parity with Hugging Face's
// `tokenizers` on trained vocabularies is in python/tests/test_tokenizer_parity.py.
#include "support/random.hpp"
#include "support/synthetic_vocab.hpp"
#include "tokenizer/bpe_tokenizer.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/utf8.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <chrono>
#include <iostream>
#include <set>
#include <string>
#include <vector>

using namespace sitsrt;

namespace {

std::string mapped(std::string_view bytes) {
  std::string out;
  detail::append_byte_level(bytes, out);
  return out;
}

// 256 byte tokens (id = byte), then the result of each merge (raw bytes, mapped here), then
// <|endoftext|> (control, EOS), <|im_start|>, <|im_end|> (control) and <tag> (user-defined).
struct TestVocab {
  Vocabulary vocab;
  std::int32_t id(std::string_view raw) const {
    const std::string piece = mapped(raw);
    for (std::int32_t i = 0; i < vocab.size(); ++i) {
      if (vocab.pieces[i] == piece && vocab.types[i] == TokenType::kNormal) return i;
    }
    for (std::int32_t i = 0; i < vocab.size(); ++i) {
      if (vocab.pieces[i] == raw) return i;  // special tokens are stored as is
    }
    FAIL("no piece " << raw);
    return -1;
  }
};

TestVocab make_bpe_vocab(const std::vector<std::pair<std::string, std::string>>& merges, std::string pre = "gpt2") {
  TestVocab t;
  Vocabulary& v = t.vocab;
  v.model = "gpt2";
  v.pre = std::move(pre);
  for (int b = 0; b < 256; ++b) v.pieces.push_back(mapped(std::string(1, static_cast<char>(b))));
  for (const auto& [left, right] : merges) {
    v.merges.push_back(mapped(left) + " " + mapped(right));
    const std::string joined = mapped(left + right);
    if (std::find(v.pieces.begin(), v.pieces.end(), joined) == v.pieces.end()) v.pieces.push_back(joined);
  }
  v.types.assign(v.pieces.size(), TokenType::kNormal);
  for (const std::string special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    v.pieces.push_back(special);
    v.types.push_back(TokenType::kControl);
  }
  v.eos = v.size() - 3;
  v.pieces.push_back("<tag>");
  v.types.push_back(TokenType::kUserDefined);
  v.add_bos = false;
  v.add_space_prefix = false;
  return t;
}

std::vector<std::string> split(std::string_view pre, std::string_view text) {
  const detail::RegexSplitter splitter(detail::pre_tokenizer_patterns(pre, "test"), "test");
  std::vector<std::string_view> pieces;
  splitter.split(text, pieces);
  return {pieces.begin(), pieces.end()};
}

using Pieces = std::vector<std::string>;

// Random text from code points of assorted classes (ASCII letters, digits, punctuation,
// whitespace, Latin-1, CJK, Hangul, emoji, combining marks).
std::string random_utf8(test::Rng& rng, int characters) {
  static const std::vector<std::pair<std::uint32_t, std::uint32_t>> kRanges = {
      {'a', 'z'},       {'A', 'Z'},         {'0', '9'},         {'!', '/'},         {' ', ' '},
      {'\t', '\r'},     {0xA0, 0xFF},       {0x300, 0x36F},     {0x4E00, 0x9FFF},   {0xAC00, 0xD7A3},
      {0x1F600, 0x1F64F}, {0x2000, 0x206F}, {0x0660, 0x0669},   {0x10000, 0x10FFFF}};
  std::string out;
  for (int i = 0; i < characters; ++i) {
    const auto& [lo, hi] = kRanges[static_cast<std::size_t>(rng.uniform_int(0, static_cast<int>(kRanges.size()) - 1))];
    std::uint32_t cp = lo + static_cast<std::uint32_t>(rng.next() % (hi - lo + 1));
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
    test::append_code_point(cp, out);
  }
  return out;
}

}  // namespace

TEST_CASE("byte-level mapping is GPT-2's bytes_to_unicode", "[tokenizer][bpe]") {
  CHECK(detail::byte_level_char(' ') == "\xC4\xA0");   // U+0120 'Ġ'
  CHECK(detail::byte_level_char('\n') == "\xC4\x8A");  // U+010A 'Ċ'
  CHECK(detail::byte_level_char(0) == "\xC4\x80");     // U+0100
  CHECK(detail::byte_level_char(0x7F) == "\xC4\xA1");  // DEL, the 34th unprintable byte: U+0121
  CHECK(detail::byte_level_char(0xAD) == "\xC5\x83");  // soft hyphen, the last one: U+0143
  CHECK(detail::byte_level_char('a') == "a");
  CHECK(detail::byte_level_char(0xE9) == "\xC3\xA9");  // U+00E9 maps to itself
  std::set<std::string_view> distinct;
  for (int b = 0; b < 256; ++b) {
    const std::string_view c = detail::byte_level_char(static_cast<std::uint8_t>(b));
    distinct.insert(c);
    std::string back;
    detail::append_byte_level_decoded(c, back);
    REQUIRE(back == std::string(1, static_cast<char>(b)));
  }
  CHECK(distinct.size() == 256);
}

TEST_CASE("pre-tokenizer patterns split as published", "[tokenizer][bpe]") {
  CHECK(split("gpt2", "Hello world's 123") == Pieces{"Hello", " world", "'s", " 123"});
  CHECK(split("gpt2", "I'M") == Pieces{"I", "'", "M"});  // GPT-2's contractions are case-sensitive
  CHECK(split("llama3", "I'M") == Pieces{"I", "'M"});
  CHECK(split("gpt2", "a  b") == Pieces{"a", " ", " b"});  // \s+(?!\S) leaves one space for the word
  CHECK(split("gpt2", "12345") == Pieces{"12345"});
  CHECK(split("llama3", "12345") == Pieces{"123", "45"});  // \p{N}{1,3}
  CHECK(split("qwen2", "123") == Pieces{"1", "2", "3"});   // \p{N}
  CHECK(split("llama3", "a\n\nb") == Pieces{"a", "\n\n", "b"});
  CHECK(split("llama3", " (x)") == Pieces{" (", "x", ")"});
  CHECK(split("llama3", "\"hello") == Pieces{"\"hello"});  // one non-letter may lead a word
  CHECK(split("gpt2", "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E!") == Pieces{"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", "!"});
  CHECK(split("llama3", "\xD9\xA3\xD9\xA4\xD9\xA5\xD9\xA6") == Pieces{"\xD9\xA3\xD9\xA4\xD9\xA5", "\xD9\xA6"});  // Arabic-Indic digits are \p{N}
  CHECK(split("gpt2", "x\xC2\xA0y") == Pieces{"x", "\xC2\xA0", "y"});  // U+00A0 is \s
  CHECK(split("gpt2", "ab\xFF" "cd") == Pieces{"ab", "\xFF", "cd"});   // invalid UTF-8 ends up between matches
  CHECK(split("default", "") == Pieces{});
  CHECK(split("llama-bpe", "x") == split("llama3", "x"));
  CHECK_THROWS_AS(split("t5", "x"), Error);
}

TEST_CASE("llama.cpp's pre-tokenizer sets: several regexes in turn, empty matches split", "[tokenizer][bpe]") {
  // "default" is llama.cpp's default set, not GPT-2's pattern: punctuation runs first, then
  // GPT-2's pattern, then digit runs cut into threes.
  CHECK(split("default", "a+b=c 12345") == Pieces{"a", "+", "b", "=", "c", " ", "123", "45"});
  CHECK(split("gpt2", "a+b=c 12345") == Pieces{"a", "+", "b", "=", "c", " 12345"});
  CHECK(split("smollm", "x 2024!") == Pieces{"x", " ", "2", "0", "2", "4", "!"});  // \p{N} first
  CHECK(split("falcon", "1234567") == Pieces{"123", "456", "7"});
  CHECK(split("deepseek-coder", "ab\ncd 12") == Pieces{"ab", "\n", "cd", " ", "1", "2"});
  // SuperBPE's lookahead matches nothing, at each place a group of three digits starts.
  CHECK(split("superbpe", "1234567 12") == Pieces{"1", "234", "567", " ", "12"});
  CHECK(split("afmoe", "x1234567") == Pieces{"x", "1", "234", "567"});
  CHECK(split("tiny_aya", "1234567") == Pieces{"1", "234", "567"});
  CHECK(split("tekken", "HelloWorld") == Pieces{"Hello", "World"});
  CHECK(split("qwen35", "e\xCC\x81x") == Pieces{"e\xCC\x81x"});  // combining marks stay in the word
  CHECK(split("qwen2", "e\xCC\x81x") == Pieces{"e", "\xCC\x81x"});
  CHECK(split("poro-chat", "a, b.") == Pieces{"a", ",", " b", "."});
  CHECK(split("kimi-k2", "ab\xE4\xB8\xAD" "cd") == Pieces{"ab", "\xE4\xB8\xAD", "cd"});  // Han apart
  // Later regexes split the pieces of earlier ones too (a Sequence of Splits).
  CHECK(split("chameleon", "<sentinel:12>x") == Pieces{"<", "sentinel", ":", "1", "2", ">", "x"});
  // Every name compiles; aliases share their type's regexes.
  for (const std::string_view name : detail::pre_tokenizer_names()) {
    CAPTURE(name);
    CHECK_NOTHROW(split(name, "Hello, World! 12345 \xE6\x97\xA5\xE6\x9C\xAC  \n\t x"));
  }
  CHECK(split("pixtral", "I'M") == split("llama3", "I'M"));
  CHECK(detail::pre_tokenizer_spec("pixtral", "t").ignore_merges);
  CHECK(detail::pre_tokenizer_spec("tekken", "t").add_bos);
  CHECK_FALSE(detail::pre_tokenizer_spec("dbrx", "t").ignore_merges);  // Llama 3's regex, not its flag
}

TEST_CASE("BPE merges follow rank order, leftmost first on ties", "[tokenizer][bpe]") {
  const TestVocab hello = make_bpe_vocab({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}});
  const BpeTokenizer tokenizer(hello.vocab, "test");
  CHECK(tokenizer.encode("hello", false) == std::vector<std::int32_t>{hello.id("hello")});
  CHECK(tokenizer.encode("hell", false) == std::vector<std::int32_t>{hello.id("hell")});
  CHECK(tokenizer.encode("help", false) == std::vector<std::int32_t>{hello.id("he"), 'l', 'p'});

  // e+l outranks h+e: "hel" -> h, el.
  const TestVocab ranked = make_bpe_vocab({{"e", "l"}, {"h", "e"}});
  CHECK(BpeTokenizer(ranked.vocab, "test").encode("hel", false) == std::vector<std::int32_t>{'h', ranked.id("el")});

  // One rank, overlapping pairs: the leftmost merges first.
  const TestVocab aa = make_bpe_vocab({{"a", "a"}});
  CHECK(BpeTokenizer(aa.vocab, "test").encode("aaa", false) == std::vector<std::int32_t>{aa.id("aa"), 'a'});
  CHECK(BpeTokenizer(aa.vocab, "test").encode("aaaa", false) == std::vector<std::int32_t>{aa.id("aa"), aa.id("aa")});

  // Merges never cross pre-tokens: " a" and "a" differ, and space-led pieces merge with the space.
  const TestVocab spaced = make_bpe_vocab({{" ", "a"}, {"a", "b"}});
  CHECK(BpeTokenizer(spaced.vocab, "test").encode("ab ab", false) ==
        std::vector<std::int32_t>{spaced.id("ab"), spaced.id(" a"), 'b'});
}

TEST_CASE("BPE with ignore_merges emits whole-vocabulary pre-tokens", "[tokenizer][bpe]") {
  // "abc" is a piece, but rank order would give ab + c... only if "abc" were never reached;
  // here the merges make "a" + "bc" first, and ignore_merges takes "abc" whole.
  TestVocab t = make_bpe_vocab({{"b", "c"}, {"a", "b"}, {"ab", "c"}}, "gpt2");
  CHECK(BpeTokenizer(t.vocab, "test").encode("abc", false) == std::vector<std::int32_t>{'a', t.id("bc")});
  t.vocab.ignore_merges = true;
  CHECK(BpeTokenizer(t.vocab, "test").encode("abc", false) == std::vector<std::int32_t>{t.id("abc")});
  t.vocab.ignore_merges = false;
  t.vocab.pre = "llama-bpe";  // Llama 3 turns it on, as llama.cpp does
  CHECK(BpeTokenizer(t.vocab, "test").encode("abc", false) == std::vector<std::int32_t>{t.id("abc")});
}

TEST_CASE("BPE special tokens: single ids with parse_special, text without", "[tokenizer][bpe]") {
  TestVocab t = make_bpe_vocab({{"h", "i"}});
  t.vocab.bos = t.id("<|im_start|>");
  const BpeTokenizer tokenizer(t.vocab, "test");
  const std::int32_t start = t.id("<|im_start|>");
  const std::int32_t end = t.id("<|im_end|>");
  const std::int32_t tag = t.id("<tag>");
  CHECK(tokenizer.encode("<|im_start|>hi<|im_end|>", false, true) == std::vector<std::int32_t>{start, t.id("hi"), end});
  CHECK(tokenizer.encode("hi<tag><tag>", false, true) == std::vector<std::int32_t>{t.id("hi"), tag, tag});
  const auto as_text = tokenizer.encode("<|im_start|>hi", false, false);
  CHECK(std::find(as_text.begin(), as_text.end(), start) == as_text.end());
  CHECK(tokenizer.decode(as_text) == "<|im_start|>hi");
  // A prefix of a special text is plain text.
  CHECK(tokenizer.decode(tokenizer.encode("<|im_sta", false, true)) == "<|im_sta");
  CHECK(tokenizer.encode("x", true, true).front() == start);  // BOS
  // Control tokens print nothing, user-defined ones their text.
  CHECK(tokenizer.token_bytes(start).empty());
  CHECK(tokenizer.token_bytes(tag) == "<tag>");
  CHECK(tokenizer.is_end_of_generation(t.id("<|endoftext|>")));
  CHECK(tokenizer.is_end_of_generation(end));  // ChatML end of turn
  CHECK_FALSE(tokenizer.is_end_of_generation(start));
  CHECK_FALSE(tokenizer.is_end_of_generation(t.id("hi")));
  CHECK_THROWS_AS(tokenizer.token_bytes(t.vocab.size()), Error);
}

TEST_CASE("user-defined tokens match without parse_special, control tokens only with it", "[tokenizer][bpe]") {
  const TestVocab t = make_bpe_vocab({{"h", "i"}});
  const BpeTokenizer tokenizer(t.vocab, "test");
  const std::int32_t tag = t.id("<tag>");
  const std::int32_t end = t.id("<|im_end|>");
  CHECK(tokenizer.encode("hi<tag>", false) == std::vector<std::int32_t>{t.id("hi"), tag});
  const auto plain = tokenizer.encode("<|im_end|><tag>", false);
  CHECK(plain.back() == tag);
  CHECK(std::find(plain.begin(), plain.end(), end) == plain.end());
  CHECK(tokenizer.encode("<|im_end|><tag>", false, true) == std::vector<std::int32_t>{end, tag});
}

TEST_CASE("special tokens: the longest text first, as llama.cpp", "[tokenizer][bpe]") {
  TestVocab t = make_bpe_vocab({});
  for (const std::string special : {"<a>", "<a>b", "b<c>"}) {
    t.vocab.pieces.push_back(special);
    t.vocab.types.push_back(TokenType::kControl);
  }
  const BpeTokenizer tokenizer(t.vocab, "test");
  // "<a>b" and "b<c>" are equally long and overlap: the lower id is taken, then "<c>" is text.
  CHECK(tokenizer.encode("<a>b<c>", false, true) ==
        std::vector<std::int32_t>{t.id("<a>b"), '<', 'c', '>'});
  CHECK(tokenizer.encode("x<a>", false, true) == std::vector<std::int32_t>{'x', t.id("<a>")});
  // "<a>bb<c>"'s longest token is "b<c>", taken before "<a>b" (which would start earlier).
  t.vocab.pieces.push_back("<a>bb");
  t.vocab.types.push_back(TokenType::kControl);
  t.vocab.pieces.push_back("bb<c>x");
  t.vocab.types.push_back(TokenType::kControl);
  const BpeTokenizer longest(t.vocab, "test");
  CHECK(longest.encode("<a>bb<c>x", false, true) == std::vector<std::int32_t>{t.id("<a>"), t.id("bb<c>x")});
}

// The text with each byte that is not part of a well-formed UTF-8 character as U+FFFD.
std::string with_replacements(std::string_view bytes) {
  std::string out;
  for (std::size_t pos = 0; pos < bytes.size();) {
    const detail::Utf8Sequence seq = detail::scan_utf8(bytes.substr(pos));
    const bool ok = seq.status == detail::Utf8Status::kComplete;
    out.append(ok ? bytes.substr(pos, seq.length) : std::string_view("\xEF\xBF\xBD"));
    pos += ok ? seq.length : 1;
  }
  return out;
}

TEST_CASE("BPE decode(encode(x)) == x on random UTF-8; invalid bytes become U+FFFD each", "[tokenizer][bpe]") {
  const TestVocab t = make_bpe_vocab({{" ", "t"}, {"h", "e"}, {" t", "he"}, {"\xE4", "\xB8"}, {"\xF0", "\x9F"},
                                      {"1", "2"}, {"\n", "\n"}, {" ", " "}});
  for (const std::string pre : {"gpt2", "llama3", "qwen2"}) {
    Vocabulary vocab = t.vocab;
    vocab.pre = pre;
    const BpeTokenizer tokenizer(vocab, "test");
    test::Rng rng(0xB9E + pre.size());
    for (int trial = 0; trial < 200; ++trial) {
      const std::string text = random_utf8(rng, rng.uniform_int(0, 40));
      CAPTURE(pre, text);
      const auto ids = tokenizer.encode(text, false);
      REQUIRE(tokenizer.decode(ids) == text);
    }
    for (int trial = 0; trial < 200; ++trial) {
      std::string bytes(static_cast<std::size_t>(rng.uniform_int(0, 40)), '\0');
      for (char& c : bytes) c = static_cast<char>(rng.next() & 0xFF);
      CAPTURE(pre, bytes);
      std::string raw;
      for (const std::int32_t id : tokenizer.encode(bytes, false)) raw += tokenizer.token_bytes(id);
      REQUIRE(raw == with_replacements(bytes));
    }
    // As llama.cpp: one U+FFFD per byte, truncated sequences and overlong forms included.
    CHECK(tokenizer.decode(tokenizer.encode("ab\xFF" "cd", false)) == "ab\xEF\xBF\xBD" "cd");
    CHECK(tokenizer.decode(tokenizer.encode("\xE2\x82" "x", false)) == "\xEF\xBF\xBD\xEF\xBF\xBD" "x");
    CHECK(tokenizer.decode(tokenizer.encode("\xC0\x80", false)) == "\xEF\xBF\xBD\xEF\xBF\xBD");
  }
}

TEST_CASE("BPE rejects inconsistent merges and unknown pre-tokenizers, naming the source", "[tokenizer][bpe]") {
  TestVocab t = make_bpe_vocab({{"a", "b"}});
  Vocabulary missing_result = t.vocab;
  missing_result.merges.push_back("x y");  // "xy" is not a piece
  try {
    BpeTokenizer(missing_result, "model.gguf");
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidModel);
    CHECK_THAT(e.what(), Catch::Contains("model.gguf") && Catch::Contains("merge 1") && Catch::Contains("'xy'"));
  }
  Vocabulary no_space = t.vocab;
  no_space.merges.push_back("ab");
  CHECK_THROWS_WITH(BpeTokenizer(no_space, "m.gguf"), Catch::Contains("two pieces"));
  Vocabulary unknown_pre = t.vocab;
  unknown_pre.pre = "no-such-pre";
  try {
    BpeTokenizer(unknown_pre, "m.gguf");
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kUnsupported);
    CHECK_THAT(e.what(), Catch::Contains("m.gguf") && Catch::Contains("tokenizer.ggml.pre") &&
                             Catch::Contains("no-such-pre") && Catch::Contains("llama-bpe") &&
                             Catch::Contains("deepseek-v3"));
  }

  Vocabulary bad_regex = t.vocab;
  bad_regex.pre_patterns = {"(unclosed"};
  CHECK_THROWS_WITH(BpeTokenizer(bad_regex, "tokenizer.json"), Catch::Contains("tokenizer.json") && Catch::Contains("(unclosed"));
}

TEST_CASE("SentencePiece-style BPE over raw UTF-8 (Gemma 4, Sarvam): U+2581 spaces, <0xNN> fallback", "[tokenizer][bpe]") {
  Vocabulary v;
  v.model = "gpt2";
  for (int b = 0; b < 256; ++b) {
    v.pieces.push_back(fmt::format("<0x{:02X}>", b));
    v.types.push_back(TokenType::kByte);
  }
  const std::string marker = "\xE2\x96\x81";
  for (const std::string& piece : {std::string("a"), std::string("b"), marker, std::string("ab"), marker + "a",
                                  std::string("\n"), std::string("\n\n")}) {
    v.pieces.push_back(piece);
    v.types.push_back(TokenType::kNormal);
  }
  v.merges = {"a b", marker + " a"};
  v.add_bos = false;
  const auto id = [&](std::string_view piece) {
    return static_cast<std::int32_t>(std::find(v.pieces.begin(), v.pieces.end(), piece) - v.pieces.begin());
  };
  v.pre = "sarvam-moe";
  const BpeTokenizer sarvam(v, "test");
  CHECK(sarvam.encode("ab a", false) == std::vector<std::int32_t>{id("ab"), id(marker + "a")});
  CHECK(sarvam.encode("x\xC3\xA9", false) == std::vector<std::int32_t>{'x', 0xC3, 0xA9});  // byte fallback
  CHECK(sarvam.decode(sarvam.encode("ab a x\xC3\xA9\n", false)) == "ab a x\xC3\xA9\n");
  CHECK(sarvam.encode("\n\n", false) == std::vector<std::int32_t>{id("\n"), id("\n")});  // no merge for it
  CHECK_FALSE(sarvam.vocab().add_bos);
  v.pre = "gemma4";
  const BpeTokenizer gemma4(v, "test");
  CHECK(gemma4.encode("\n\n", false) == std::vector<std::int32_t>{id("\n\n")});  // a newline run that is a piece
  CHECK(gemma4.vocab().add_bos);  // llama.cpp forces BOS for Gemma 4
}

TEST_CASE("make_tokenizer picks the implementation from the model name", "[tokenizer]") {
  const TestVocab t = make_bpe_vocab({{"a", "b"}});
  const auto bpe = make_tokenizer(t.vocab, "m.gguf");
  CHECK(dynamic_cast<const BpeTokenizer*>(bpe.get()) != nullptr);
  CHECK(bpe->encode("ab", false) == std::vector<std::int32_t>{t.id("ab")});

  Vocabulary spm;
  spm.model = "llama";
  spm.pieces = {"<unk>", "a", "b", "\xE2\x96\x81" "a", "\xE2\x96\x81" "ab"};
  spm.unk = 0;
  const auto sentencepiece = make_tokenizer(spm, "m.gguf");
  CHECK(sentencepiece->encode("ab", false) == std::vector<std::int32_t>{4});  // dummy prefix, then merges

  Vocabulary other = t.vocab;
  other.model = "t5";
  try {
    make_tokenizer(other, "m.gguf");
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kUnsupported);
    CHECK_THAT(e.what(), Catch::Contains("m.gguf") && Catch::Contains("tokenizer.ggml.model") &&
                             Catch::Contains("'t5'") && Catch::Contains("llama, gpt2"));
  }
}

TEST_CASE("BPE encodes 1 MB with a 262k-entry vocabulary: whole words, exact round trip", "[tokenizer][bpe][speed]") {
  // The time is printed, never checked (benchmarks/bench_tokenizer.cpp measures throughput).
  test::Rng rng(262145);
  const std::vector<std::string> words = test::random_words(rng, 60000);
  const BpeTokenizer tokenizer(test::synthetic_bpe_vocab(words, 262144), "synthetic");
  const std::string text = test::synthetic_text(rng, words, 1 << 20);
  std::vector<std::int32_t> ids;
  const double best_ms = test::best_of_ms(2, [&] { ids = tokenizer.encode(text, false); });
  std::cout << "BPE 262k: " << text.size() << " bytes -> " << ids.size() << " tokens in " << best_ms << " ms\n";
  CHECK(ids.size() < text.size() / 4);
  CHECK(tokenizer.decode(ids) == text);
}
