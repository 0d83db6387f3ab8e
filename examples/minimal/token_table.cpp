// Prints the per-token record of a generation as a table: the raw material of an audit trail.
//   sitsrt_token_table MODEL.gguf "Lily went to the park" [TOKENS]
#include <sitsrt/engine.hpp>
#include <sitsrt/error.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

// Control characters shown escaped so the table stays one line per token.
std::string printable(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [PROMPT] [TOKENS]\n", argv[0]);
    return 2;
  }
  try {
    const sitsrt::Engine engine({.model_path = argv[1]});
    sitsrt::GenerationConfig config;
    config.max_new_tokens = argc > 3 ? std::atoi(argv[3]) : 24;
    config.temperature = 0.8f;
    config.seed = 42;
    config.top_logprobs = 3;
    std::printf("%4s %6s %-14s %8s %6s %8s  %s\n", "step", "id", "text", "p", "H", "ms", "alternatives (id:p)");
    engine.generate(argc > 2 ? argv[2] : "Lily went to the park", config, [&](const sitsrt::TokenEvent& e) {
      std::string alternatives;
      for (const auto& alt : e.top) {
        char buf[48];
        std::snprintf(buf, sizeof buf, "%d:%.3f ", alt.id, std::exp(alt.logprob));
        alternatives += buf;
      }
      std::printf("%4lld %6d %-14s %8.4f %6.3f %8.2f  %s\n", static_cast<long long>(e.index), e.token_id,
                  ("'" + printable(e.text) + "'").c_str(), std::exp(e.logprob), e.entropy,
                  e.seconds_since_start * 1e3, alternatives.c_str());
      return true;
    });
    return 0;
  } catch (const sitsrt::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
