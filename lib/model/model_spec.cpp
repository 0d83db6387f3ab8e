#include "model/model_spec.hpp"

#include "core/check.hpp"
#include "formats/gguf.hpp"

#include <array>

namespace sitsrt {
namespace {

constexpr std::array<std::string_view, 1> kSupportedArchitectures = {"llama"};

std::int64_t require_positive(const gguf::File& file, const std::string& key, std::uint64_t limit) {
  const std::uint64_t v = file.require_uint(key);
  if (v == 0 || v > limit) raise(ErrorCode::kInvalidModel, "{}: metadata '{}' = {} is out of range [1, {}]", file.path(), key, v, limit);
  return static_cast<std::int64_t>(v);
}

}  // namespace

ModelSpec read_model_spec(const gguf::File& file) {
  ModelSpec spec;
  spec.architecture = file.require_string("general.architecture");
  bool supported = false;
  for (auto a : kSupportedArchitectures) supported |= spec.architecture == a;
  if (!supported) {
    raise(ErrorCode::kUnsupported, "{}: architecture '{}' is not supported (supported: llama)", file.path(),
          spec.architecture);
  }
  const std::string& arch = spec.architecture;
  spec.name = file.get_string("general.name").value_or("");
  constexpr std::uint64_t kMaxDim = 1u << 20;
  spec.n_embd = require_positive(file, arch + ".embedding_length", kMaxDim);
  spec.n_layer = require_positive(file, arch + ".block_count", 4096);
  spec.n_head = require_positive(file, arch + ".attention.head_count", 4096);
  spec.n_ff = require_positive(file, arch + ".feed_forward_length", kMaxDim * 4);
  spec.n_ctx_train = require_positive(file, arch + ".context_length", 1u << 24);
  spec.n_head_kv = static_cast<std::int64_t>(file.get_uint(arch + ".attention.head_count_kv").value_or(
      static_cast<std::uint64_t>(spec.n_head)));
  if (spec.n_head_kv < 1 || spec.n_head % spec.n_head_kv != 0) {
    raise(ErrorCode::kInvalidModel, "{}: '{}.attention.head_count_kv' = {} does not divide head_count {}", file.path(),
          arch, spec.n_head_kv, spec.n_head);
  }
  if (spec.n_embd % spec.n_head != 0) {
    raise(ErrorCode::kInvalidModel, "{}: embedding_length {} is not a multiple of head_count {}", file.path(),
          spec.n_embd, spec.n_head);
  }
  spec.head_dim = spec.n_embd / spec.n_head;
  const auto key_length = file.get_uint(arch + ".attention.key_length");
  if (key_length && static_cast<std::int64_t>(*key_length) != spec.head_dim) {
    raise(ErrorCode::kUnsupported, "{}: '{}.attention.key_length' = {} differs from embedding_length/head_count = {}",
          file.path(), arch, *key_length, spec.head_dim);
  }
  const auto eps = file.get_float(arch + ".attention.layer_norm_rms_epsilon");
  if (!eps) raise(ErrorCode::kInvalidModel, "{}: missing required metadata key '{}.attention.layer_norm_rms_epsilon'", file.path(), arch);
  if (!(*eps > 0.0 && *eps < 1.0)) raise(ErrorCode::kInvalidModel, "{}: '{}.attention.layer_norm_rms_epsilon' = {} is out of range", file.path(), arch, *eps);
  spec.rms_eps = static_cast<float>(*eps);
  spec.rope_freq_base = static_cast<float>(file.get_float(arch + ".rope.freq_base").value_or(10000.0));
  if (!(spec.rope_freq_base > 1.0f)) raise(ErrorCode::kInvalidModel, "{}: '{}.rope.freq_base' = {} must be > 1", file.path(), arch, spec.rope_freq_base);
  const auto scale_linear = file.get_float(arch + ".rope.scale_linear");
  if (scale_linear) {
    if (!(*scale_linear > 0.0)) raise(ErrorCode::kInvalidModel, "{}: '{}.rope.scale_linear' must be > 0", file.path(), arch);
    spec.rope_freq_scale = static_cast<float>(1.0 / *scale_linear);
  }
  spec.rope_dims = static_cast<std::int64_t>(file.get_uint(arch + ".rope.dimension_count").value_or(
      static_cast<std::uint64_t>(spec.head_dim)));
  if (spec.rope_dims < 2 || spec.rope_dims > spec.head_dim || spec.rope_dims % 2 != 0) {
    raise(ErrorCode::kInvalidModel, "{}: '{}.rope.dimension_count' = {} must be even and in [2, head_dim {}]",
          file.path(), arch, spec.rope_dims, spec.head_dim);
  }
  spec.rope_neox = false;  // GGUF llama checkpoints are permuted for adjacent-pair rotation
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
