// sitsrt logits: the model's raw next-token logits for given token ids, as JSON. Used by the
// independent NumPy references (tests/reference/) and for inspecting a model by hand.
#include "commands.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <charconv>

namespace sitsrt::cli {
namespace {

std::vector<std::int32_t> parse_token_ids(const std::string& text) {
  std::vector<std::int32_t> ids;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    std::int32_t id = 0;
    const auto [ptr, ec] = std::from_chars(text.data() + begin, text.data() + end, id);
    if (ec != std::errc() || ptr != text.data() + end || id < 0) {
      throw UsageError(
          fmt::format("--tokens: '{}' is not a comma-separated list of token ids", text.substr(begin, end - begin)));
    }
    ids.push_back(id);
    begin = end + 1;
  }
  return ids;
}

}  // namespace

int logits_command(int argc, char** argv) {
  std::vector<OptionSpec> specs = engine_option_specs();
  specs.push_back({"tokens", 0, "IDS", "comma-separated token ids (e.g. 1,42,7)", ""});
  specs.push_back({"prompt", 'p', "TEXT", "text to tokenize instead of --tokens (with the BOS token)", ""});
  specs.push_back({"all", 0, "", "logits after every token (default: after the last one only)", ""});
  Args args("sitsrt logits",
            "Print the raw next-token logits (before sampling) as JSON: {\"n_vocab\", \"tokens\", \"logits\": "
            "[[...] per position]}.",
            specs);
  args.parse(argc, argv, 2);
  if (args.has("help")) {
    fmt::print("{}", args.help());
    return 0;
  }
  const EngineOptions options = engine_options_from(args);
  const Engine engine(options);
  std::vector<std::int32_t> tokens;
  if (const auto ids = args.get("tokens")) {
    tokens = parse_token_ids(*ids);
  } else if (const auto prompt = args.get("prompt")) {
    tokens = engine.tokenize(*prompt, true);
  } else {
    throw UsageError("pass --tokens IDS or --prompt TEXT");
  }
  const bool all = args.has("all");
  const std::vector<float> logits = engine.logits(tokens, all);
  const std::size_t vocab = static_cast<std::size_t>(engine.model_info().n_vocab);
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t r = 0; r * vocab < logits.size(); ++r) {
    rows.push_back(std::vector<float>(logits.begin() + static_cast<std::ptrdiff_t>(r * vocab),
                                      logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * vocab)));
  }
  const nlohmann::json doc = {{"n_vocab", vocab}, {"tokens", tokens}, {"all_positions", all}, {"logits", rows}};
  fmt::print("{}\n", doc.dump());
  return 0;
}

}  // namespace sitsrt::cli
