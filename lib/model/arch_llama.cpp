// Llama-family block (Llama 2/3, Mistral, Qwen2, Qwen3): pre-norm attention and SwiGLU FFN,
// each added to the residual stream. The variants differ only in parts the spec switches on
// (Qwen2 q/k/v biases, Qwen3 per-head Q/K norm, Mistral sliding window, rope pairing/scaling).
#include "model/decoder_builder.hpp"

namespace sitsrt::detail {

graph::Graph build_llama_family_graph(DecoderBuilder& b) {
  graph::ValueId x = b.embed();
  for (std::int32_t l = 0; l < b.spec().n_layer; ++l) {
    const std::string p = DecoderBuilder::block(l);
    graph::ValueId h = b.norm(x, p + "attn_norm.weight", p + "attn_norm", l);
    x = b.residual(x, b.attention(h, l), p + "attn_residual", l);
    h = b.norm(x, p + "ffn_norm.weight", p + "ffn_norm", l);
    x = b.residual(x, b.feed_forward(h, l), p + "ffn_residual", l);
  }
  return b.finish(x);
}

}  // namespace sitsrt::detail
