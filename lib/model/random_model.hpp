// Writes deterministic random-weight llama models as GGUF: the project's own default model,
// benchmark models of any shape, and test fixtures. Same options and seed -> same bytes.
#pragma once

#include "core/dtype.hpp"

#include <cstdint>
#include <functional>
#include <string>

namespace sitsrt {

struct RandomModelOptions {
  std::int64_t dim = 256;
  std::int64_t layers = 4;
  std::int64_t heads = 8;
  std::int64_t kv_heads = 4;
  std::int64_t ffn = 704;
  std::int64_t vocab = 2048;    // >= 259: 3 specials + 256 byte tokens + generated ASCII pieces
  std::int64_t context = 2048;
  DType type = DType::kQ8_0;    // 2-D weights; a tensor whose rows are not whole blocks falls back to f16
  bool tied_embeddings = false;  // omit output.weight
  float rope_freq_base = 10000.0f;
  std::uint64_t seed = 1234;
  std::string name = "sitsrt-random";
  int threads = 0;               // for generating and quantizing weights
};

// The synthetic ~0.35B benchmark model of the roadmap: dim 1024, 24 layers, 16 heads, 8 KV
// heads, ffn 2816, vocab 32000, context 4096.
RandomModelOptions benchmark_model_options(DType type);

// Validates the shape (throws kInvalidArgument naming the field) and writes the file.
// progress(done_tensors, total_tensors) is called as tensors are written.
void write_random_llama(const RandomModelOptions& options, const std::string& path,
                        const std::function<void(std::size_t, std::size_t)>& progress = {});

// Parameter count of a model with these options.
std::int64_t random_llama_parameters(const RandomModelOptions& options) noexcept;

}  // namespace sitsrt
