// Writes deterministic random-weight models of every supported architecture as GGUF: the project's own default model,
// benchmark models of any shape, and test fixtures. Same options and seed -> same bytes.
#pragma once

#include "core/dtype.hpp"
#include "core/output_file.hpp"
#include "core/quant_blocks.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace sitsrt {

struct RandomModelOptions {
  // llama, mistral (written as llama + sliding window, as llama.cpp's converter does), qwen2,
  // qwen3, gemma3. The architecture decides which tensors exist (biases, Q/K norms, post norms).
  std::string architecture = "llama";
  std::int64_t head_dim = 0;        // 0: dim / heads; otherwise written as attention.key_length
  std::int64_t sliding_window = 0;  // mistral, gemma3 (0: 4096 for mistral, 512 for gemma3)
  std::string rope_scaling = "none";  // none, linear, yarn, llama3 (llama3: rope_freqs.weight)
  float rope_scaling_factor = 4.0f;
  std::int64_t rope_original_context = 0;  // yarn, llama3 (0: context / rope_scaling_factor)
  float final_logit_softcap = 0.0f;        // > 0: written as <arch>.final_logit_softcapping
  std::int64_t dim = 256;
  std::int64_t layers = 4;
  std::int64_t heads = 8;
  std::int64_t kv_heads = 4;
  std::int64_t ffn = 704;
  std::int64_t vocab = 2048;    // >= 259: 3 specials + 256 byte tokens + generated ASCII pieces
  std::int64_t context = 2048;
  DType type = DType::kQ8_0;    // 2-D weights; a tensor whose rows are not whole blocks falls back to f16
  // llama.cpp's *_K_M mixes: when set, output.weight and attn_v / ffn_down of the layers
  // k_mix_uses_more_bits picks get this type (Q6_K) instead of `type` (set_weight_type sets both).
  std::optional<DType> sensitive_type;
  Fp8Scaling fp8_scaling = Fp8Scaling::kSearchedBlock;  // how kFP8_E4M3 weights are scaled
  bool tied_embeddings = false;  // omit output.weight
  float rope_freq_base = 10000.0f;
  std::uint64_t seed = 1234;
  std::string name = "sitsrt-random";
  int threads = 0;               // for generating and quantizing weights
};

// The architecture names make-model accepts.
inline constexpr const char* kRandomModelArchitectures = "llama, mistral, qwen2, qwen3, gemma3";

// The synthetic ~0.35B benchmark model of the roadmap: dim 1024, 24 layers, 16 heads, 8 KV
// heads, ffn 2816, vocab 32000, context 4096.
RandomModelOptions benchmark_model_options(DType type);

// llama.cpp's layer rule for the *_K_M mixes (its use_more_bits): the first and last eighth of
// the layers and every third one in between, i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2
// (integer division), about half of them.
bool k_mix_uses_more_bits(std::int64_t layer, std::int64_t layers) noexcept;

// Sets options.type (and sensitive_type) from a --type name: any DType name, a --weights
// spelling (fp8, q4g128, q8, q4), or "q4_k_m" / "q5_k_m" (Q4_K / Q5_K with Q6_K as the sensitive
// type). False for an unknown name.
bool set_weight_type(RandomModelOptions& options, std::string_view name);

// The --type name of the options' weight types ("q4_k_m" for the mix, else name(type)).
std::string weight_type_name(const RandomModelOptions& options);

// Validates the shape (throws kInvalidArgument naming the field) and writes the file (see
// gguf::Writer::write for `output`: what may be replaced). progress(done_tensors, total_tensors)
// is called as tensors are written.
void write_random_model(const RandomModelOptions& options, const std::string& path,
                        const std::function<void(std::size_t, std::size_t)>& progress = {},
                        const OutputFileOptions& output = {});

// Parameter count of a model with these options.
std::int64_t random_model_parameters(const RandomModelOptions& options) noexcept;

}  // namespace sitsrt
