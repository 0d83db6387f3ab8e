// Gemma 3 block (Gemma Team 2025, "Gemma 3 Technical Report"; HF Gemma3DecoderLayer): the
// embedding is scaled by sqrt(n_embd); attention and FFN are each wrapped in a pre-norm and a
// post-norm ("sandwich") before the residual add; Q/K are RMS-normalised per head; the FFN is
// GeGLU with tanh GELU; five sliding-window layers with a local rope base alternate with one
// global layer (the spec's windowed_layers). RMSNorm weights are GGUF's stored 1 + w.
#include "model/decoder_builder.hpp"

namespace sitsrt::detail {

graph::Graph build_gemma3_graph(DecoderBuilder& b) {
  graph::ValueId x = b.embed();
  for (std::int32_t l = 0; l < b.spec().n_layer; ++l) {
    const std::string p = DecoderBuilder::block(l);
    graph::ValueId h = b.norm(x, p + "attn_norm.weight", p + "attn_norm", l);
    graph::ValueId o = b.norm(b.attention(h, l), p + "post_attention_norm.weight", p + "post_attention_norm", l, true);
    x = b.residual(x, o, p + "attn_residual", l);
    h = b.norm(x, p + "ffn_norm.weight", p + "ffn_norm", l);
    o = b.norm(b.feed_forward(h, l), p + "post_ffw_norm.weight", p + "post_ffw_norm", l, true);
    x = b.residual(x, o, p + "ffn_residual", l);
  }
  return b.finish(x);
}

}  // namespace sitsrt::detail
