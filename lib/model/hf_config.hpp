// A Hugging Face model's config.json -> ModelSpec. Supported: LlamaForCausalLM (rope_scaling
// linear / llama3 / yarn), MistralForCausalLM (sliding_window), Qwen2ForCausalLM,
// Qwen3ForCausalLM, Gemma3ForCausalLM and the text part of Gemma3ForConditionalGeneration
// (text_config). Keys the transformers config classes give defaults for may be absent (the
// same defaults apply); the shape keys are required. A missing required key, a key of the
// wrong JSON type or out of range, or an unknown architecture throws sitsrt::Error naming
// config.json and the key (kInvalidModel, or kUnsupported for features this build lacks).
#pragma once

#include "model/model_spec.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt {

// quantization_config of a quantized checkpoint.
struct HfQuantization {
  std::string method;                   // "fp8", "awq", "gptq"
  int bits = 0;                         // awq, gptq: 4
  std::int64_t group_size = 0;          // awq, gptq: input columns per scale (-1: per channel)
  bool desc_act = false;                // gptq act-order: rows carry g_idx
  bool sym = true;                      // gptq
  bool zero_point = true;               // awq
  std::string awq_version;              // awq: "gemm" (the packing supported)
  std::string gptq_format = "gptq";     // gptq checkpoint_format: "gptq" (zeros stored minus 1) or "gptq_v2"
  std::vector<std::int64_t> fp8_block;  // fp8: weight_block_size [128, 128]; empty: per-tensor/channel scales
};

struct HfConfig {
  std::string hf_architecture;  // "LlamaForCausalLM", ...
  ModelSpec spec;               // rope_neox is set: HF checkpoints rotate halves
  std::string torch_dtype;      // "bfloat16", ...; empty when absent
  std::optional<HfQuantization> quantization;
};

// `display_name` (the config.json path) starts every message.
HfConfig parse_hf_config(std::string_view json_text, const std::string& display_name);

// The architectures parse_hf_config accepts, for messages.
std::string_view supported_hf_architectures() noexcept;

}  // namespace sitsrt
