// Loads a model and streams a generation to stdout.
//   sitsrt_stream MODEL.gguf "Once upon a time"
#include <sitsrt/engine.hpp>
#include <sitsrt/error.hpp>

#include <cstdio>
#include <iostream>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: " << argv[0] << " MODEL.gguf [PROMPT]\n";
    return 2;
  }
  try {
    const sitsrt::Engine engine({.model_path = argv[1]});
    sitsrt::GenerationConfig config;
    config.max_new_tokens = 64;
    config.temperature = 0.0f;  // greedy: the same text every run
    const auto result = engine.generate(argc > 2 ? argv[2] : "Once upon a time", config,
                                        [](const sitsrt::TokenEvent& event) {
                                          std::cout << event.text << std::flush;
                                          return true;  // false would stop generation
                                        });
    std::cout << "\n[" << result.tokens.size() << " tokens, " << result.timings.decode_tokens_per_second()
              << " tok/s, finish: " << sitsrt::to_string(result.finish_reason) << "]\n";
    return 0;
  } catch (const sitsrt::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
