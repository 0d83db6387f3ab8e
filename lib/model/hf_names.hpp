// Tensor names of Hugging Face checkpoints <-> the GGUF names the graph builders use.
// HF:  model.embed_tokens.weight, model.layers.N.self_attn.{q,k,v,o}_proj.{weight,bias},
//      model.layers.N.self_attn.{q,k}_norm.weight, model.layers.N.input_layernorm.weight,
//      model.layers.N.post_attention_layernorm.weight, model.layers.N.mlp.{gate,up,down}_proj.weight,
//      model.norm.weight, lm_head.weight; Gemma 3 adds pre_/post_feedforward_layernorm, and its
//      post_attention_layernorm is a post-norm (the FFN pre-norm is pre_feedforward_layernorm).
//      Gemma3ForConditionalGeneration prefixes the text model with model.language_model.
//      (transformers >= 4.52) or language_model.model. (older), lm_head with language_model.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sitsrt {

// The GGUF name of an HF tensor, or nullopt for a tensor the text model does not use (vision
// tower, rotary inv_freq buffers, quantization companions such as .qweight or .weight_scale).
std::optional<std::string> gguf_name_for_hf(std::string_view hf_name, bool gemma);

// The HF name of a GGUF tensor under `prefix` ("model." or "model.language_model." ...), for
// messages; empty when the GGUF name has no HF counterpart.
std::string hf_name_for_gguf(std::string_view gguf_name, bool gemma, std::string_view prefix);

// The text-model prefixes tried, in order.
inline constexpr std::string_view kHfTextPrefixes[] = {"model.language_model.", "language_model.model.", "model."};

}  // namespace sitsrt
