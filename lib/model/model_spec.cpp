#include "model/model_spec.hpp"

#include "core/check.hpp"
#include "formats/gguf.hpp"

#include <array>
#include <cmath>

namespace sitsrt {
namespace {

// What each architecture computes beyond the llama block, as its published definition and the
// llama.cpp converter's GGUF layout describe it. Mistral checkpoints are written as `llama`
// with `llama.attention.sliding_window`.
struct ArchitectureTraits {
  std::string_view name;
  bool rope_neox;  // GGUF llama q/k are permuted for adjacent pairs; the others rotate halves
  bool qkv_bias;
  bool qk_norm;
  bool gemma;  // scaled embedding, post norms, GeGLU, interleaved local/global layers
};

constexpr std::array<ArchitectureTraits, 4> kArchitectures = {{
    {"llama", false, false, false, false},
    {"qwen2", true, true, false, false},
    {"qwen3", true, false, true, false},
    {"gemma3", true, false, true, true},
}};

// Gemma 3: five local (sliding-window) layers, then one global layer.
constexpr std::uint64_t kGemma3SlidingWindowPeriod = 6;
constexpr float kGemma3LocalRopeBase = 10000.0f;

std::int64_t require_positive(const gguf::File& file, const std::string& key, std::uint64_t limit) {
  const std::uint64_t v = file.require_uint(key);
  if (v == 0 || v > limit)
    raise(ErrorCode::kInvalidModel, "{}: metadata '{}' = {} is out of range [1, {}]", file.path(), key, v, limit);
  return static_cast<std::int64_t>(v);
}

float positive_float(const gguf::File& file, const std::string& key, double fallback) {
  const double v = file.get_float(key).value_or(fallback);
  if (!(v > 0.0) || !std::isfinite(v))
    raise(ErrorCode::kInvalidModel, "{}: '{}' = {} must be > 0", file.path(), key, v);
  return static_cast<float>(v);
}

void read_rope_scaling(const gguf::File& file, const std::string& arch, ModelSpec& spec) {
  RopeScalingSpec& s = spec.rope_scaling;
  const std::string type = file.get_string(arch + ".rope.scaling.type").value_or("");
  const auto legacy_linear = file.get_float(arch + ".rope.scale_linear");
  if (type.empty() || type == "none") {
    if (legacy_linear) {
      s.type = RopeScalingType::kLinear;
      s.factor = positive_float(file, arch + ".rope.scale_linear", 1.0);
    }
  } else if (type == "linear") {
    s.type = RopeScalingType::kLinear;
    s.factor = positive_float(file, arch + ".rope.scaling.factor", legacy_linear.value_or(1.0));
  } else if (type == "yarn") {
    s.type = RopeScalingType::kYarn;
    s.factor = positive_float(file, arch + ".rope.scaling.factor", 1.0);
    s.original_context = static_cast<std::int64_t>(file.get_uint(arch + ".rope.scaling.original_context_length")
                                                       .value_or(static_cast<std::uint64_t>(spec.n_ctx_train)));
    s.yarn_beta_fast = positive_float(file, arch + ".rope.scaling.yarn_beta_fast", 32.0);
    s.yarn_beta_slow = positive_float(file, arch + ".rope.scaling.yarn_beta_slow", 1.0);
    const std::string attn_key = file.find(arch + ".rope.scaling.yarn_attn_factor") != nullptr
                                     ? arch + ".rope.scaling.yarn_attn_factor"
                                     : arch + ".rope.scaling.attn_factor";
    s.yarn_attn_factor = positive_float(file, attn_key, 1.0);
    if (s.original_context < 1)
      raise(ErrorCode::kInvalidModel, "{}: YaRN needs '{}.rope.scaling.original_context_length'", file.path(), arch);
  } else {
    raise(ErrorCode::kUnsupported, "{}: '{}.rope.scaling.type' = '{}' is not supported (none, linear, yarn)",
          file.path(), arch, type);
  }
  if (s.type == RopeScalingType::kLinear || s.type == RopeScalingType::kYarn) spec.rope_freq_scale = 1.0f / s.factor;

  // llama3-style scaling: the converter stores the per-pair divisors it computed from the
  // config (factor, low/high_freq_factor, original context) as rope_freqs.weight.
  if (const gguf::TensorInfo* factors = file.find_tensor("rope_freqs.weight")) {
    if (factors->dims.size() != 1 || factors->dims[0] != spec.rope_dims / 2 || factors->type != DType::kF32) {
      raise(ErrorCode::kInvalidModel, "{}: tensor 'rope_freqs.weight' must be f32 [{}] (rope dims / 2)", file.path(),
            spec.rope_dims / 2);
    }
    spec.rope_freq_factors = true;
  }
}

void read_sliding_window(const gguf::File& file, const std::string& arch, const ArchitectureTraits& traits,
                         ModelSpec& spec) {
  spec.sliding_window = static_cast<std::int64_t>(file.get_uint(arch + ".attention.sliding_window").value_or(0));
  spec.windowed_layers.assign(static_cast<std::size_t>(spec.n_layer), spec.sliding_window > 0);
  if (spec.sliding_window == 0) {
    if (traits.gemma) raise(ErrorCode::kInvalidModel, "{}: missing '{}.attention.sliding_window'", file.path(), arch);
    return;
  }
  // The layer pattern: a bool per layer (true = windowed), a period n (every n-th layer is
  // global), or for Gemma 3 its fixed period of 6; otherwise every layer is windowed (Mistral).
  const std::string pattern_key = arch + ".attention.sliding_window_pattern";
  std::uint64_t period = traits.gemma ? kGemma3SlidingWindowPeriod : 0;
  if (const gguf::Array* flags = file.get_array(pattern_key)) {
    if (flags->items.size() != static_cast<std::size_t>(spec.n_layer) ||
        flags->element_type != gguf::ValueType::kBool) {
      raise(ErrorCode::kInvalidModel, "{}: '{}' must hold {} booleans", file.path(), pattern_key, spec.n_layer);
    }
    for (std::size_t l = 0; l < flags->items.size(); ++l)
      spec.windowed_layers[l] = std::get<bool>(flags->items[l].data);
    return;
  }
  if (const auto p = file.get_uint(pattern_key)) period = *p;
  if (period > 0) {
    for (std::size_t l = 0; l < spec.windowed_layers.size(); ++l) spec.windowed_layers[l] = (l + 1) % period != 0;
  }
}

}  // namespace

std::string_view name(RopeScalingType type) noexcept {
  switch (type) {
    case RopeScalingType::kNone:
      return "none";
    case RopeScalingType::kLinear:
      return "linear";
    case RopeScalingType::kYarn:
      return "yarn";
    case RopeScalingType::kLlama3:
      return "llama3";
  }
  return "unknown";
}

std::string_view supported_architectures() noexcept {
  return "llama (incl. Mistral sliding window), qwen2, qwen3, gemma3";
}

ModelSpec read_model_spec(const gguf::File& file) {
  ModelSpec spec;
  spec.architecture = file.require_string("general.architecture");
  const ArchitectureTraits* traits = nullptr;
  for (const auto& a : kArchitectures) {
    if (spec.architecture == a.name) traits = &a;
  }
  if (traits == nullptr) {
    raise(ErrorCode::kUnsupported, "{}: architecture '{}' is not supported (supported: {})", file.path(),
          spec.architecture, supported_architectures());
  }
  const std::string& arch = spec.architecture;
  spec.name = file.get_string("general.name").value_or("");
  constexpr std::uint64_t kMaxDim = 1u << 20;
  spec.n_embd = require_positive(file, arch + ".embedding_length", kMaxDim);
  spec.n_layer = require_positive(file, arch + ".block_count", 4096);
  spec.n_head = require_positive(file, arch + ".attention.head_count", 4096);
  spec.n_ff = require_positive(file, arch + ".feed_forward_length", kMaxDim * 4);
  spec.n_ctx_train = require_positive(file, arch + ".context_length", 1u << 24);
  spec.n_head_kv = static_cast<std::int64_t>(
      file.get_uint(arch + ".attention.head_count_kv").value_or(static_cast<std::uint64_t>(spec.n_head)));
  if (spec.n_head_kv < 1 || spec.n_head % spec.n_head_kv != 0) {
    raise(ErrorCode::kInvalidModel, "{}: '{}.attention.head_count_kv' = {} does not divide head_count {}", file.path(),
          arch, spec.n_head_kv, spec.n_head);
  }
  // The head width is explicit in Qwen3 and Gemma 3 (q width n_head * head_dim != n_embd).
  const auto key_length = file.get_uint(arch + ".attention.key_length");
  const auto value_length = file.get_uint(arch + ".attention.value_length");
  if (key_length) {
    if (*key_length < 2 || *key_length > 4096)
      raise(ErrorCode::kInvalidModel, "{}: '{}.attention.key_length' = {} is out of range", file.path(), arch,
            *key_length);
    spec.head_dim = static_cast<std::int64_t>(*key_length);
  } else {
    if (spec.n_embd % spec.n_head != 0) {
      raise(ErrorCode::kInvalidModel, "{}: embedding_length {} is not a multiple of head_count {}", file.path(),
            spec.n_embd, spec.n_head);
    }
    spec.head_dim = spec.n_embd / spec.n_head;
  }
  if (value_length && static_cast<std::int64_t>(*value_length) != spec.head_dim) {
    raise(ErrorCode::kUnsupported, "{}: '{}.attention.value_length' = {} differs from the key length {}", file.path(),
          arch, *value_length, spec.head_dim);
  }
  const auto eps = file.get_float(arch + ".attention.layer_norm_rms_epsilon");
  if (!eps)
    raise(ErrorCode::kInvalidModel, "{}: missing required metadata key '{}.attention.layer_norm_rms_epsilon'",
          file.path(), arch);
  if (!(*eps > 0.0 && *eps < 1.0))
    raise(ErrorCode::kInvalidModel, "{}: '{}.attention.layer_norm_rms_epsilon' = {} is out of range", file.path(), arch,
          *eps);
  spec.rms_eps = static_cast<float>(*eps);
  spec.rope_freq_base = static_cast<float>(file.get_float(arch + ".rope.freq_base").value_or(10000.0));
  if (!(spec.rope_freq_base > 1.0f))
    raise(ErrorCode::kInvalidModel, "{}: '{}.rope.freq_base' = {} must be > 1", file.path(), arch, spec.rope_freq_base);
  spec.rope_dims = static_cast<std::int64_t>(
      file.get_uint(arch + ".rope.dimension_count").value_or(static_cast<std::uint64_t>(spec.head_dim)));
  if (spec.rope_dims < 2 || spec.rope_dims > spec.head_dim || spec.rope_dims % 2 != 0) {
    raise(ErrorCode::kInvalidModel, "{}: '{}.rope.dimension_count' = {} must be even and in [2, head_dim {}]",
          file.path(), arch, spec.rope_dims, spec.head_dim);
  }
  spec.rope_neox = traits->rope_neox;
  read_rope_scaling(file, arch, spec);
  read_sliding_window(file, arch, *traits, spec);

  spec.qkv_bias = traits->qkv_bias;
  spec.qk_norm = traits->qk_norm;
  // Softmax scale: an explicit `attention.scale`, else 1/sqrt(head_dim). (Gemma 3 scales by
  // query_pre_attn_scalar^-0.5, which equals head_dim for the 1B/4B/12B models; GGUF has no key
  // for it, so a 27B file, where it is n_embd/n_head, needs `gemma3.attention.scale`.)
  spec.attn_scale = file.get_float(arch + ".attention.scale")
                        ? positive_float(file, arch + ".attention.scale", 1.0)
                        : static_cast<float>(1.0 / std::sqrt(static_cast<double>(spec.head_dim)));
  if (file.find(arch + ".final_logit_softcapping") != nullptr) {
    spec.final_logit_softcap = positive_float(file, arch + ".final_logit_softcapping", 1.0);
  }
  if (traits->gemma) {
    // Gemma's RMSNorm multiplies by (1 + w); llama.cpp's converter stores 1 + w, so GGUF norm
    // weights are used as they are (a safetensors reader must add the 1 itself).
    spec.post_norms = true;
    spec.embedding_scale = static_cast<float>(std::sqrt(static_cast<double>(spec.n_embd)));
    spec.ffn_activation = FfnActivation::kGeluTanh;
    spec.rope_local_freq_base = positive_float(file, arch + ".rope.freq_base_swa", kGemma3LocalRopeBase);
  } else if (file.find(arch + ".rope.freq_base_swa") != nullptr) {
    spec.rope_local_freq_base = positive_float(file, arch + ".rope.freq_base_swa", spec.rope_freq_base);
  }

  const gguf::Array* tokens = file.get_array("tokenizer.ggml.tokens");
  const auto vocab_key = file.get_uint(arch + ".vocab_size");
  if (tokens != nullptr) {
    spec.n_vocab = static_cast<std::int64_t>(tokens->items.size());
  } else if (vocab_key) {
    spec.n_vocab = static_cast<std::int64_t>(*vocab_key);
  } else {
    raise(ErrorCode::kInvalidModel, "{}: missing required metadata key 'tokenizer.ggml.tokens'", file.path());
  }
  if (spec.n_vocab < 1) raise(ErrorCode::kInvalidModel, "{}: empty vocabulary", file.path());
  spec.tied_output = file.find_tensor("output.weight") == nullptr;
  return spec;
}

}  // namespace sitsrt
