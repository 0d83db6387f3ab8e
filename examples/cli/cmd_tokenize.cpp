// sitsrt tokenize: text to token ids with the tokenizer of a GGUF model or a Hugging Face
// tokenizer.json. The Python parity tests (python/tests/test_tokenizer_parity.py) drive it
// with --batch.
#include "commands.hpp"

#include "tokenizer/tokenizer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <iterator>

namespace sitsrt::cli {
namespace {

nlohmann::json encode_to_json(const Tokenizer& tokenizer, const std::string& text, bool bos, bool special) {
  const std::vector<std::int32_t> ids = tokenizer.encode(text, bos, special);
  return {{"ids", ids}, {"decoded", tokenizer.decode(ids, bos)}};
}

// A --batch element: a JSON string, or {"hex": "..."} for bytes a JSON string cannot hold
// (invalid UTF-8).
std::string batch_text(const nlohmann::json& element) {
  if (element.is_string()) return element.get<std::string>();
  const auto hex = element.is_object() && element.size() == 1 ? element.find("hex") : element.end();
  if (hex == element.end() || !hex->is_string() || hex->get_ref<const std::string&>().size() % 2 != 0) {
    throw UsageError("--batch: standard input is not a JSON array of strings or {\"hex\": \"...\"} objects");
  }
  const std::string& digits = hex->get_ref<const std::string&>();
  const auto value = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw UsageError(fmt::format("--batch: '{}' is not a hex digit", c));
  };
  std::string bytes;
  for (std::size_t i = 0; i < digits.size(); i += 2) bytes.push_back(static_cast<char>(value(digits[i]) * 16 + value(digits[i + 1])));
  return bytes;
}

std::string dump(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

int tokenize_command(int argc, char** argv) {
  Args args("sitsrt tokenize FILE",
            "Print the token ids of a text. FILE is a GGUF model, a tokenizer.json, or a folder holding\n"
            "tokenizer.json (and tokenizer_config.json). The text comes from --text or standard input.",
            {{"text", 0, "TEXT", "the text (default: all of standard input)", ""},
             {"bos", 0, "", "prepend BOS (when the vocabulary has one)", ""},
             {"special", 0, "", "match special/added token texts as single tokens", ""},
             {"json", 0, "", "print {\"ids\": [...], \"decoded\": TEXT}", ""},
             {"batch", 0, "",
              "stdin is a JSON array of strings or {\"hex\": \"...\"} bytes; print an array of --json objects",
              ""}});
  args.parse(argc, argv, 2);
  if (args.has("help")) {
    fmt::print("{}", args.help());
    return 0;
  }
  if (args.positional().size() != 1) throw UsageError("expects one FILE (a GGUF model or a tokenizer.json)");
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(args.positional()[0]);
  const bool bos = args.has("bos");
  const bool special = args.has("special");

  const auto read_stdin = [] { return std::string(std::istreambuf_iterator<char>(std::cin), {}); };
  if (args.has("batch")) {
    nlohmann::json texts;
    try {
      texts = nlohmann::json::parse(read_stdin());
    } catch (const nlohmann::json::parse_error& e) {  // e.g. a raw control character in a string
      throw UsageError(fmt::format("--batch: standard input is not valid JSON: {}", e.what()));
    }
    if (!texts.is_array()) throw UsageError("--batch: standard input is not a JSON array of strings");
    nlohmann::json out = nlohmann::json::array();
    for (const nlohmann::json& text : texts) out.push_back(encode_to_json(*tokenizer, batch_text(text), bos, special));
    fmt::print("{}\n", dump(out));
    return 0;
  }
  const std::string text = args.has("text") ? *args.get("text") : read_stdin();
  if (args.has("json")) {
    fmt::print("{}\n", dump(encode_to_json(*tokenizer, text, bos, special)));
  } else {
    fmt::print("{}\n", fmt::join(tokenizer->encode(text, bos, special), " "));
  }
  return 0;
}

}  // namespace sitsrt::cli
