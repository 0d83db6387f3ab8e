// Hyper-parameters of a decoder-only transformer, read from model metadata. The fields are
// format-neutral (what the architecture computes, not how a file spells it): the GGUF reader
// fills them from `<arch>.` keys, a safetensors/config.json reader can fill the same fields.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt::gguf {
class File;
}

namespace sitsrt {

enum class FfnActivation : std::uint8_t {
  kSilu,      // SwiGLU: silu(gate) * up (Llama, Mistral, Qwen)
  kGeluTanh,  // GeGLU: gelu_tanh(gate) * up (Gemma)
};

enum class RopeScalingType : std::uint8_t {
  kNone,
  kLinear,  // positions divided by factor (freq_scale = 1 / factor)
  kYarn,    // YaRN ramp between interpolation and extrapolation + attention temperature
  kLlama3,  // per-dimension factors from factor / low_freq_factor / high_freq_factor
};
std::string_view name(RopeScalingType type) noexcept;

struct RopeScalingSpec {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 1.0f;
  std::int64_t original_context = 0;  // training context before the extension (yarn, llama3)
  float low_freq_factor = 1.0f;       // llama3
  float high_freq_factor = 4.0f;      // llama3
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  float yarn_attn_factor = 1.0f;  // multiplies YaRN's 1 + 0.1 ln(factor)
};

struct ModelSpec {
  std::string architecture;  // "llama", "qwen2", "qwen3", "gemma3"
  std::string name;          // general.name, if present
  std::int64_t n_vocab = 0;
  std::int64_t n_embd = 0;
  std::int64_t n_layer = 0;
  std::int64_t n_head = 0;
  std::int64_t n_head_kv = 0;
  std::int64_t head_dim = 0;  // key/value head width; n_embd / n_head unless the model says otherwise
  std::int64_t n_ff = 0;
  std::int64_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / factor of linear or YaRN scaling, else 1
  std::int64_t rope_dims = 0;
  bool rope_neox = false;
  bool tied_output = false;  // no output.weight: the embedding doubles as the output head

  RopeScalingSpec rope_scaling;       // applies to the full-attention layers
  bool rope_freq_factors = false;     // the model stores per-pair divisors (GGUF: rope_freqs.weight)
  float rope_local_freq_base = 0.0f;  // rope base of sliding-window layers; 0: rope_freq_base
  float attn_scale = 0.0f;            // softmax scale of q.k
  bool qkv_bias = false;              // q, k, v projections have biases (Qwen2)
  bool qk_norm = false;               // per-head RMSNorm of q and k before rope (Qwen3, Gemma 3)
  bool post_norms = false;            // RMSNorm of the attention and FFN outputs before the residual add (Gemma 3)
  float embedding_scale = 1.0f;       // token embeddings multiplied by this (Gemma: sqrt(n_embd))
  FfnActivation ffn_activation = FfnActivation::kSilu;
  float final_logit_softcap = 0.0f;   // > 0: logits = cap * tanh(logits / cap)
  std::int64_t sliding_window = 0;    // > 0: windowed layers attend to this many latest positions
  std::vector<bool> windowed_layers;  // n_layer flags: layer uses the sliding window (and local rope)

  // Per-layer values of keys GGUF may store as one scalar or one value per layer (llama.cpp's
  // "key or array" keys); empty when every layer has the scalar above. When set they hold n_layer
  // values and the scalar holds the largest, so buffers sized from it fit every layer.
  std::vector<std::int64_t> layer_n_head;
  std::vector<std::int64_t> layer_n_ff;

  [[nodiscard]] std::int64_t n_head_at(std::int64_t layer) const noexcept {
    return layer_n_head.empty() ? n_head : layer_n_head[static_cast<std::size_t>(layer)];
  }
  [[nodiscard]] std::int64_t n_ff_at(std::int64_t layer) const noexcept {
    return layer_n_ff.empty() ? n_ff : layer_n_ff[static_cast<std::size_t>(layer)];
  }

  [[nodiscard]] bool layer_is_windowed(std::int64_t layer) const noexcept {
    return sliding_window > 0 && static_cast<std::size_t>(layer) < windowed_layers.size() &&
           windowed_layers[static_cast<std::size_t>(layer)];
  }
};

// The architectures read_model_spec accepts, for messages and `sitsrt info`.
std::string_view supported_architectures() noexcept;

// Reads and validates hyper-parameters from GGUF metadata. Errors name the file and key; an
// unknown architecture is kUnsupported listing the supported ones.
ModelSpec read_model_spec(const gguf::File& file);

}  // namespace sitsrt
