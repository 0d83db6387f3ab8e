// llama.cpp's own tokenizer test data (tests/test-tokenizer-0 inputs and the ids llama.cpp gives,
// shared/llamacpp-suite/vocab): every case of every vocabulary this runtime supports must give
// exactly llama.cpp's ids, with no BOS and no special-token parsing. SentencePiece ("llama") and
// byte-level BPE ("gpt2") vocabularies are supported; WordPiece ("bert") is not, and the test
// checks that it is refused. Cases without their vocabulary file (too large to bring along) are
// reported and skipped, as is the whole test when the shared folder is absent.
#include "support/skip.hpp"
#include "tokenizer/tokenizer.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace sitsrt;

namespace {

const std::filesystem::path kSuite = std::filesystem::path(SITSRT_SHARED_DIR) / "llamacpp-suite" / "vocab";

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The .inp texts: each one followed by "\n__ggml_vocab_test__\n".
std::vector<std::string> read_inputs(const std::filesystem::path& path) {
  const std::string all = read_file(path);
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  std::size_t start = 0;
  for (std::size_t at = all.find(separator); at != std::string::npos; at = all.find(separator, start)) {
    texts.push_back(all.substr(start, at - start));
    start = at + separator.size();
  }
  return texts;
}

// The .out lines: the ids of each text, separated by spaces.
std::vector<std::vector<std::int32_t>> read_outputs(const std::filesystem::path& path) {
  std::vector<std::vector<std::int32_t>> out;
  std::istringstream lines(read_file(path));
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ids(line);
    out.emplace_back();
    for (std::int32_t id = 0; ids >> id;) out.back().push_back(id);
  }
  return out;
}

}  // namespace

TEST_CASE("llama.cpp's test-tokenizer-0 cases give llama.cpp's ids", "[tokenizer][llamacpp][gated]") {
  if (!std::filesystem::is_directory(kSuite)) {
    SITSRT_SKIP(kSuite.string() << " is absent (llama.cpp's tokenizer test data)");
  }
  int vocabularies = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kSuite)) {
    const std::filesystem::path inputs = entry.path();
    if (inputs.extension() != ".inp") continue;
    const std::filesystem::path vocab = inputs.parent_path() / inputs.stem();  // ggml-vocab-NAME.gguf
    const std::string name = vocab.filename().string();
    if (!std::filesystem::exists(vocab)) {
      WARN("skipped: " << name << " is not in the suite, only its cases");
      continue;
    }
    CAPTURE(name);
    if (name == "ggml-vocab-bert-bge.gguf") {  // WordPiece: not supported, and said so
      CHECK_THROWS_AS(load_tokenizer(vocab.string()), Error);
      continue;
    }
    const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(vocab.string());
    const std::vector<std::string> texts = read_inputs(inputs);
    std::vector<std::vector<std::int32_t>> expected = read_outputs(std::filesystem::path(inputs).replace_extension(".out"));
    REQUIRE(texts.size() == expected.size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
      CAPTURE(i, texts[i]);
      CHECK(tokenizer->encode(texts[i], /*add_bos=*/false, /*parse_special=*/false) == expected[i]);
    }
    ++vocabularies;
  }
  CHECK(vocabularies >= 9);  // deepseek-coder/llm, falcon, gpt-2, llama-spm, mpt, phi-3, refact, starcoder
}
