#include "model/model_spec.hpp"

#include "core/check.hpp"
#include "formats/gguf.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

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

// A key llama.cpp reads as "scalar or per-layer array" (its get_key_or_arr): a scalar applies to
// every layer, an array holds one unsigned integer per layer. nullopt when the key is absent.
std::optional<std::vector<std::int64_t>> per_layer_counts(const gguf::File& file, const std::string& key,
                                                          std::int64_t n_layer, std::uint64_t limit) {
  const gguf::Value* value = file.find(key);
  if (value == nullptr) return std::nullopt;
  const auto in_range = [&](std::uint64_t v, std::string_view where) {
    if (v == 0 || v > limit)
      raise(ErrorCode::kInvalidModel, "{}: metadata '{}'{} = {} is out of range [1, {}]", file.path(), key, where, v,
            limit);
    return static_cast<std::int64_t>(v);
  };
  if (value->type != gguf::ValueType::kArray) {
    return std::vector<std::int64_t>(static_cast<std::size_t>(n_layer), in_range(file.require_uint(key), ""));
  }
  const gguf::Array& array = std::get<gguf::Array>(value->data);
  if (array.items.size() != static_cast<std::size_t>(n_layer)) {
    raise(ErrorCode::kInvalidModel, "{}: metadata '{}' holds {} values, expected a scalar or one per layer ({})",
          file.path(), key, array.items.size(), n_layer);
  }
  std::vector<std::int64_t> out;
  out.reserve(array.items.size());
  for (std::size_t l = 0; l < array.items.size(); ++l) {
    const gguf::Value& item = array.items[l];
    const std::string where = fmt::format("[{}]", l);
    if (const auto* u = std::get_if<std::uint64_t>(&item.data)) {
      out.push_back(in_range(*u, where));
    } else if (const auto* i = std::get_if<std::int64_t>(&item.data); i != nullptr && *i >= 0) {
      out.push_back(in_range(static_cast<std::uint64_t>(*i), where));
    } else {
      raise(ErrorCode::kInvalidModel, "{}: metadata '{}' must be an unsigned integer or an array of them, got an array "
            "of {}", file.path(), key, gguf::name(array.element_type));
    }
  }
  return out;
}

// The largest value, and the per-layer list only when the layers differ (ModelSpec::layer_*).
std::int64_t split_per_layer(const std::vector<std::int64_t>& values, std::vector<std::int64_t>& per_layer) {
  const auto [low, high] = std::minmax_element(values.begin(), values.end());
  if (*low != *high) per_layer = values;
  return *high;
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
  const std::string window_key = arch + ".attention.sliding_window";
  const std::optional<std::uint64_t> window = file.get_uint(window_key);
  spec.sliding_window = static_cast<std::int64_t>(window.value_or(0));
  spec.windowed_layers.assign(static_cast<std::size_t>(spec.n_layer), spec.sliding_window > 0);
  if (spec.sliding_window == 0) {  // no window (llama, mistral); Gemma 3 windows 5 of every 6 layers
    if (traits.gemma && !window) raise(ErrorCode::kInvalidModel, "{}: missing '{}'", file.path(), window_key);
    if (traits.gemma) {
      raise(ErrorCode::kInvalidModel, "{}: '{}' = 0: Gemma 3 needs a sliding window of at least 1 token",
            file.path(), window_key);
    }
    return;
  }
  // The layer pattern: a bool per layer (true = windowed), a period n (every n-th layer is
  // global), or for Gemma 3 its fixed period of 6; otherwise every layer is windowed (Mistral).
  const std::string pattern_key = arch + ".attention.sliding_window_pattern";
  std::uint64_t period = traits.gemma ? kGemma3SlidingWindowPeriod : 0;
  // llama.cpp reads this key as "scalar or array": either form is accepted.
  const gguf::Value* pattern = file.find(pattern_key);
  if (pattern != nullptr && pattern->type == gguf::ValueType::kArray) {
    const gguf::Array& flags = std::get<gguf::Array>(pattern->data);
    if (flags.items.size() != static_cast<std::size_t>(spec.n_layer) || flags.element_type != gguf::ValueType::kBool) {
      raise(ErrorCode::kInvalidModel, "{}: '{}' must be a period or hold {} booleans (one per layer)", file.path(),
            pattern_key, spec.n_layer);
    }
    for (std::size_t l = 0; l < flags.items.size(); ++l) spec.windowed_layers[l] = std::get<bool>(flags.items[l].data);
    return;
  }
  if (pattern != nullptr) {
    period = file.require_uint(pattern_key);  // names the key when it is neither an integer nor an array
    if (period > static_cast<std::uint64_t>(spec.n_layer) + 1) {
      raise(ErrorCode::kInvalidModel, "{}: '{}' = {} is out of range [0, {}] (a period of layers)", file.path(),
            pattern_key, period, spec.n_layer + 1);
    }
  }
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
  // Head counts and the FFN width may be one value or one per layer (as llama.cpp reads them).
  const std::string heads_key = arch + ".attention.head_count";
  const std::string kv_heads_key = arch + ".attention.head_count_kv";
  const std::string ff_key = arch + ".feed_forward_length";
  const auto heads = per_layer_counts(file, heads_key, spec.n_layer, 4096);
  if (!heads) raise(ErrorCode::kInvalidModel, "{}: missing required metadata key '{}'", file.path(), heads_key);
  spec.n_head = split_per_layer(*heads, spec.layer_n_head);
  const auto ff = per_layer_counts(file, ff_key, spec.n_layer, kMaxDim * 4);
  if (!ff) raise(ErrorCode::kInvalidModel, "{}: missing required metadata key '{}'", file.path(), ff_key);
  spec.n_ff = split_per_layer(*ff, spec.layer_n_ff);
  spec.n_ctx_train = require_positive(file, arch + ".context_length", 1u << 24);
  const std::vector<std::int64_t> kv_heads = per_layer_counts(file, kv_heads_key, spec.n_layer, 4096).value_or(*heads);
  for (std::size_t l = 0; l < kv_heads.size(); ++l) {
    if (kv_heads[l] != kv_heads.front()) {
      raise(ErrorCode::kUnsupported,
            "{}: '{}' differs between layers (layer 0: {}, layer {}: {}); this version's KV cache holds one width for "
            "every layer",
            file.path(), kv_heads_key, kv_heads.front(), l, kv_heads[l]);
    }
    if ((*heads)[l] % kv_heads[l] != 0) {
      raise(ErrorCode::kInvalidModel, "{}: '{}' = {} does not divide head_count {} (layer {})", file.path(),
            kv_heads_key, kv_heads[l], (*heads)[l], l);
    }
  }
  spec.n_head_kv = kv_heads.front();
  // The head width is explicit in Qwen3 and Gemma 3 (q width n_head * head_dim != n_embd).
  const auto key_length = file.get_uint(arch + ".attention.key_length");
  const auto value_length = file.get_uint(arch + ".attention.value_length");
  if (key_length) {
    if (*key_length < 2 || *key_length > 4096)
      raise(ErrorCode::kInvalidModel, "{}: '{}.attention.key_length' = {} is out of range", file.path(), arch,
            *key_length);
    spec.head_dim = static_cast<std::int64_t>(*key_length);
  } else {
    // As llama.cpp: the first layer's head count decides the width when no key gives it.
    const std::int64_t first_heads = heads->front();
    if (spec.n_embd % first_heads != 0) {
      raise(ErrorCode::kInvalidModel, "{}: embedding_length {} is not a multiple of head_count {}", file.path(),
            spec.n_embd, first_heads);
    }
    spec.head_dim = spec.n_embd / first_heads;
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
