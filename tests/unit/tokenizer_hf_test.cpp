// Hugging Face tokenizer.json / tokenizer_config.json reading: the two merge forms, added
// tokens, pre-tokenizer variants, post-processor BOS, config overrides, and strict errors that
// name the file and the key.
#include "tokenizer/bpe_tokenizer.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/hf_tokenizer.hpp"
#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/tokenizer.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>

#include <unistd.h>

using namespace sitsrt;
using Json = nlohmann::json;

namespace {

// A byte-level tokenizer.json: 256 byte pieces, merges h+e, l+l, he+ll, hell+o, and the
// Llama 3 pre-tokenizer layout (Split + ByteLevel without regex).
Json small_tokenizer_json() {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[std::string(detail::byte_level_char(static_cast<std::uint8_t>(b)))] = b;
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["hello"] = 259;
  return {
      {"version", "1.0"},
      {"added_tokens",
       Json::array({{{"id", 260}, {"content", "<|begin_of_text|>"}, {"special", true}},
                    {{"id", 261}, {"content", "<|end_of_text|>"}, {"special", true}},
                    {{"id", 262}, {"content", "<tag>"}, {"special", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         Json::array({{{"type", "Split"},
                       {"pattern", {{"Regex", "\\p{N}{1,3}|\\s+|[^\\s\\p{N}]+"}}},
                       {"behavior", "Isolated"},
                       {"invert", false}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", Json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", Json::array({"h e", "l l", "he ll", "hell o"})}}},
  };
}

Vocabulary parse(const Json& tokenizer, const Json& config = nullptr) {
  return parse_hf_tokenizer(tokenizer.dump(), "tokenizer.json", config.is_null() ? "" : config.dump(),
                            "tokenizer_config.json");
}

// Expects `edit` applied to the small tokenizer to be rejected with `code` and a message
// naming `file` and every part.
void expect_rejected(const std::function<void(Json&)>& edit, ErrorCode code, std::vector<std::string> parts) {
  Json tokenizer = small_tokenizer_json();
  edit(tokenizer);
  try {
    parse(tokenizer);
    FAIL("accepted");
  } catch (const Error& e) {
    CAPTURE(e.what());
    CHECK(e.code() == code);
    CHECK(std::string(e.what()).starts_with("tokenizer.json: "));
    for (const std::string& part : parts) CHECK_THAT(e.what(), Catch::Contains(part));
  }
}

}  // namespace

TEST_CASE("tokenizer.json: vocabulary, added tokens, merges, BOS from the post-processor", "[tokenizer][hf]") {
  const Vocabulary vocab = parse(small_tokenizer_json());
  CHECK(vocab.model == "gpt2");
  REQUIRE(vocab.size() == 263);
  CHECK(vocab.pieces[259] == "hello");
  CHECK(vocab.types[259] == TokenType::kNormal);
  CHECK(vocab.types[260] == TokenType::kControl);
  CHECK(vocab.types[262] == TokenType::kUserDefined);
  CHECK(vocab.merges == std::vector<std::string>{"h e", "l l", "he ll", "hell o"});
  CHECK(vocab.bos == 260);
  CHECK(vocab.add_bos);
  CHECK(vocab.pre_patterns.size() == 1);

  const BpeTokenizer tokenizer(vocab, "tokenizer.json");
  CHECK(tokenizer.encode("hello 12345", true) == std::vector<std::int32_t>{260, 259, ' ', '1', '2', '3', '4', '5'});
  CHECK(tokenizer.encode("<tag>hello", false, true) == std::vector<std::int32_t>{262, 259});

  // The pair form of merges reads the same.
  Json pairs = small_tokenizer_json();
  pairs["model"]["merges"] = Json::array({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}});
  CHECK(parse(pairs).merges == vocab.merges);

  // ByteLevel with use_regex gives GPT-2's pattern.
  Json gpt2 = small_tokenizer_json();
  gpt2["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  CHECK(parse(gpt2).pre_patterns == std::vector<std::string>{std::string(detail::gpt2_pattern())});
  // A String split pattern is quoted.
  Json literal = small_tokenizer_json();
  literal["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", "a.b"}};
  CHECK(parse(literal).pre_patterns == std::vector<std::string>{"a\\.b"});
}

TEST_CASE("tokenizer_config.json overrides specials and keeps the chat template", "[tokenizer][hf]") {
  const Json config = {{"add_bos_token", false},
                       {"bos_token", "<|begin_of_text|>"},
                       {"eos_token", {{"content", "<|end_of_text|>"}, {"lstrip", false}}},
                       {"pad_token", nullptr},
                       {"chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}"}};
  const Vocabulary vocab = parse(small_tokenizer_json(), config);
  CHECK_FALSE(vocab.add_bos);
  CHECK(vocab.bos == 260);
  CHECK(vocab.eos == 261);
  CHECK(vocab.pad == -1);
  CHECK(vocab.chat_template == "{% for m in messages %}{{ m.content }}{% endfor %}");
  const Json named = {{"chat_template", Json::array({{{"name", "tool_use"}, {"template", "T"}},
                                                     {{"name", "default"}, {"template", "D"}}})}};
  CHECK(parse(small_tokenizer_json(), named).chat_template == "D");

  try {
    parse(small_tokenizer_json(), Json{{"eos_token", "<missing>"}});
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("tokenizer_config.json: eos_token") && Catch::Contains("<missing>"));
  }
  CHECK_THROWS_WITH(parse_hf_tokenizer(small_tokenizer_json().dump(), "tokenizer.json", "{", "tokenizer_config.json"),
                    Catch::StartsWith("tokenizer_config.json: malformed JSON"));
}

TEST_CASE("tokenizer.json: strict errors name the file and the key", "[tokenizer][hf]") {
  CHECK_THROWS_WITH(parse_hf_tokenizer("{\"model\": ", "tokenizer.json"), Catch::StartsWith("tokenizer.json: malformed JSON"));
  CHECK_THROWS_WITH(parse_hf_tokenizer("[]", "tokenizer.json"), Catch::Contains("not a JSON object"));
  expect_rejected([](Json& j) { j.erase("model"); }, ErrorCode::kInvalidModel, {"model is missing"});
  expect_rejected([](Json& j) { j["model"].erase("vocab"); }, ErrorCode::kInvalidModel, {"model.vocab is missing"});
  expect_rejected([](Json& j) { j["model"].erase("merges"); }, ErrorCode::kInvalidModel, {"model.merges is missing"});
  expect_rejected([](Json& j) { j["model"]["merges"][2] = 7; }, ErrorCode::kInvalidModel, {"model.merges[2]"});
  expect_rejected([](Json& j) { j["model"]["merges"][1] = Json::array({"l"}); }, ErrorCode::kInvalidModel,
                  {"model.merges[1]", "pair"});
  expect_rejected([](Json& j) { j["model"]["vocab"]["he"] = -3; }, ErrorCode::kInvalidModel, {"model.vocab[\"he\"]"});
  expect_rejected([](Json& j) { j["model"]["vocab"]["dup"] = 256; }, ErrorCode::kInvalidModel, {"model.vocab", "256"});
  expect_rejected([](Json& j) { j["model"]["type"] = "WordPiece"; }, ErrorCode::kUnsupported,
                  {"model.type", "WordPiece", "BPE"});
  expect_rejected([](Json& j) { j["model"]["byte_fallback"] = true; }, ErrorCode::kUnsupported, {"model.byte_fallback"});
  expect_rejected([](Json& j) { j["model"]["dropout"] = 0.1; }, ErrorCode::kUnsupported, {"model.dropout"});
  expect_rejected([](Json& j) { j["added_tokens"][0].erase("content"); }, ErrorCode::kInvalidModel,
                  {"added_tokens[0].content is missing"});
  expect_rejected([](Json& j) { j["added_tokens"][1]["rstrip"] = true; }, ErrorCode::kUnsupported,
                  {"added_tokens[1].rstrip"});
  expect_rejected([](Json& j) { j["added_tokens"][2]["id"] = 256; }, ErrorCode::kInvalidModel, {"added_tokens[2]", "256"});
  expect_rejected([](Json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }, ErrorCode::kUnsupported,
                  {"normalizer.type", "Lowercase"});
  expect_rejected([](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; },
                  ErrorCode::kUnsupported, {"pre_tokenizer.pretokenizers[0].behavior", "Removed"});
  expect_rejected([](Json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; },
                  ErrorCode::kUnsupported, {"pre_tokenizer.pretokenizers[1].add_prefix_space"});
  expect_rejected([](Json& j) { j["pre_tokenizer"] = {{"type", "Punctuation"}}; }, ErrorCode::kUnsupported,
                  {"pre_tokenizer.type", "Punctuation"});
  expect_rejected([](Json& j) { j["pre_tokenizer"] = nullptr; }, ErrorCode::kUnsupported, {"ByteLevel"});
  expect_rejected([](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = Json::object(); },
                  ErrorCode::kInvalidModel, {"pre_tokenizer.pretokenizers[0].pattern"});
  expect_rejected([](Json& j) { j.erase("decoder"); }, ErrorCode::kInvalidModel, {"decoder is missing"});
  expect_rejected([](Json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, ErrorCode::kUnsupported, {"decoder.type"});
  expect_rejected([](Json& j) { j["post_processor"]["single"][0]["SpecialToken"]["id"] = "<nope>"; },
                  ErrorCode::kInvalidModel, {"post_processor", "<nope>"});
}

TEST_CASE("read_hf_tokenizer reads tokenizer_config.json beside the file", "[tokenizer][hf]") {
  const auto folder = std::filesystem::temp_directory_path() / ("sitsrt_hf_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(folder);
  std::ofstream(folder / "tokenizer.json") << small_tokenizer_json().dump();
  std::ofstream(folder / "tokenizer_config.json") << Json{{"eos_token", "<|end_of_text|>"}}.dump();
  const Vocabulary vocab = read_hf_tokenizer((folder / "tokenizer.json").string());
  CHECK(vocab.eos == 261);
  const auto tokenizer = load_tokenizer(folder.string());  // a folder means its tokenizer.json
  CHECK(tokenizer->vocab().eos == 261);
  CHECK(tokenizer->is_end_of_generation(261));
  std::filesystem::remove_all(folder);
  CHECK_THROWS_WITH(read_hf_tokenizer((folder / "tokenizer.json").string()), Catch::Contains("cannot open"));
}

TEST_CASE("tokenizer.json: SentencePiece-style BPE (byte_fallback) becomes a SentencePiece vocabulary",
          "[tokenizer][hf]") {
  // Llama 2's layout: Prepend + Replace normalizers, no pre-tokenizer, <0xNN> byte tokens.
  const std::string marker = "\xE2\x96\x81";
  Json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
  const std::vector<std::string> pieces = {marker, "h", "e", "l", "o", "he", "ll", marker + "he", marker + "hell",
                                           marker + "hello"};
  for (std::size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = 259 + static_cast<int>(i);
  Json tokenizer = {
      {"added_tokens", Json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                    {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                    {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers", Json::array({{{"type", "Prepend"}, {"prepend", marker}},
                                     {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", marker}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", Json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", Json::array({{{"type", "Replace"}, {"pattern", {{"String", marker}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", Json::array({"h e", "l l", marker + " he", marker + "he ll", marker + "hell o"})}}},
  };
  const Vocabulary spm = parse(tokenizer);
  CHECK(spm.model == "llama");
  CHECK(spm.add_space_prefix);
  CHECK(spm.merges.empty());
  CHECK(spm.types[3 + 'A'] == TokenType::kByte);
  CHECK(spm.scores[259 + 5] == 0.0f);    // "he": rank 0
  CHECK(spm.scores[259 + 9] == -4.0f);   // "_hello": rank 4
  CHECK(spm.bos == 1);
  const auto t = make_tokenizer(spm, "tokenizer.json");
  const std::int32_t hello = 259 + 9;
  CHECK(t->encode("hello", true) == std::vector<std::int32_t>{1, hello});
  // "hello hello!": the second word gets U+2581 from the space; '!' falls back to its byte.
  CHECK(t->encode("hello hello!", false) == std::vector<std::int32_t>{hello, hello, 3 + '!'});
  CHECK(t->decode(t->encode("hello hello!", true), true) == "hello hello!");

  // Gemma's layout: Replace only (no dummy prefix).
  Json no_prefix = tokenizer;
  no_prefix["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", marker}};
  CHECK_FALSE(parse(no_prefix).add_space_prefix);
  // Newer files: Metaspace pre-tokenizer instead of the normalizers.
  Json metaspace = tokenizer;
  metaspace["normalizer"] = nullptr;
  metaspace["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", marker}, {"prepend_scheme", "first"}, {"split", false}};
  CHECK(parse(metaspace).add_space_prefix);

  Json bad_merge = tokenizer;
  bad_merge["model"]["merges"].push_back("o o");
  CHECK_THROWS_WITH(parse(bad_merge), Catch::Contains("model.merges[5]"));
  Json no_marker = tokenizer;
  no_marker["normalizer"] = nullptr;
  CHECK_THROWS_WITH(parse(no_marker), Catch::Contains("U+2581"));
}
