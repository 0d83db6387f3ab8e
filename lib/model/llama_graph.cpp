#include "model/llama_graph.hpp"

#include "core/check.hpp"
#include "formats/gguf.hpp"

#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>

namespace sitsrt {
namespace {

using graph::NodeAttrs;
using graph::OpKind;
using graph::RowSpace;
using graph::ValueId;
using graph::WeightId;

class Builder {
 public:
  Builder(const ModelSpec& spec, const gguf::File& file) : spec_(spec), file_(file) {}

  // Adds the tensor `name` after checking its shape (GGUF order). Norm vectors must be F32.
  WeightId weight(const std::string& name, std::vector<std::int64_t> dims) {
    const gguf::TensorInfo* info = file_.find_tensor(name);
    if (info == nullptr) raise(ErrorCode::kInvalidModel, "{}: missing tensor '{}'", file_.path(), name);
    if (info->dims != dims) {
      raise(ErrorCode::kInvalidModel,
            "{}: tensor '{}' has shape [{}], expected [{}] for {} (n_embd {}, n_head {}, n_head_kv {}, n_ff {}, "
            "n_vocab {})",
            file_.path(), name, fmt::join(info->dims, ", "), fmt::join(dims, ", "), spec_.architecture,
            spec_.n_embd, spec_.n_head, spec_.n_head_kv, spec_.n_ff, spec_.n_vocab);
    }
    if (dims.size() == 1 && info->type != DType::kF32) {
      raise(ErrorCode::kUnsupported, "{}: norm tensor '{}' is {}, only f32 norm weights are supported",
            file_.path(), name, sitsrt::name(info->type));
    }
    return graph_.add_weight({name, info->type, info->dims, info->bytes});
  }

  graph::Graph take() { return std::move(graph_); }
  graph::Graph& graph() { return graph_; }

 private:
  const ModelSpec& spec_;
  const gguf::File& file_;
  graph::Graph graph_;
};

}  // namespace

graph::Graph build_llama_graph(const ModelSpec& spec, const gguf::File& file, const LlamaGraphOptions& options) {
  Builder b(spec, file);
  graph::Graph& g = b.graph();
  const std::int64_t d = spec.n_embd;
  const std::int64_t q_width = spec.n_head * spec.head_dim;
  const std::int64_t kv_width = spec.n_head_kv * spec.head_dim;

  const WeightId embedding = b.weight("token_embd.weight", {d, spec.n_vocab});
  ValueId x = g.add_node(OpKind::kEmbed, "embed", -1, {}, {embedding}, {}, d, RowSpace::kTokens);

  NodeAttrs norm;
  norm.eps = spec.rms_eps;
  NodeAttrs rope;
  rope.rope = {spec.head_dim, spec.rope_dims, spec.rope_freq_base, spec.rope_freq_scale, options.rope_neox};
  NodeAttrs attention;
  attention.n_heads = spec.n_head;
  attention.n_kv_heads = spec.n_head_kv;
  attention.head_dim = spec.head_dim;
  attention.attn_scale = 1.0f / std::sqrt(static_cast<float>(spec.head_dim));
  attention.kv_element_bytes = static_cast<std::uint32_t>(traits(options.kv_type).block_bytes);

  for (std::int32_t l = 0; l < spec.n_layer; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    const WeightId attn_norm = b.weight(p + "attn_norm.weight", {d});
    const WeightId wq = b.weight(p + "attn_q.weight", {d, q_width});
    const WeightId wk = b.weight(p + "attn_k.weight", {d, kv_width});
    const WeightId wv = b.weight(p + "attn_v.weight", {d, kv_width});
    const WeightId wo = b.weight(p + "attn_output.weight", {q_width, d});
    const WeightId ffn_norm = b.weight(p + "ffn_norm.weight", {d});
    const WeightId w_gate = b.weight(p + "ffn_gate.weight", {d, spec.n_ff});
    const WeightId w_up = b.weight(p + "ffn_up.weight", {d, spec.n_ff});
    const WeightId w_down = b.weight(p + "ffn_down.weight", {spec.n_ff, d});

    ValueId h = g.add_node(OpKind::kRmsNorm, p + "attn_norm", l, {x}, {attn_norm}, norm, d, RowSpace::kTokens);
    ValueId q = g.add_node(OpKind::kMatMul, p + "q", l, {h}, {wq}, {}, q_width, RowSpace::kTokens);
    ValueId k = g.add_node(OpKind::kMatMul, p + "k", l, {h}, {wk}, {}, kv_width, RowSpace::kTokens);
    ValueId v = g.add_node(OpKind::kMatMul, p + "v", l, {h}, {wv}, {}, kv_width, RowSpace::kTokens);
    NodeAttrs rope_q = rope;
    rope_q.n_heads = spec.n_head;
    NodeAttrs rope_k = rope;
    rope_k.n_heads = spec.n_head_kv;
    q = g.add_node(OpKind::kRope, p + "q_rope", l, {q}, {}, rope_q, q_width, RowSpace::kTokens, true);
    k = g.add_node(OpKind::kRope, p + "k_rope", l, {k}, {}, rope_k, kv_width, RowSpace::kTokens, true);
    ValueId a = g.add_node(OpKind::kAttention, p + "attention", l, {q, k, v}, {}, attention, q_width,
                           RowSpace::kTokens);
    ValueId o = g.add_node(OpKind::kMatMul, p + "attn_out", l, {a}, {wo}, {}, d, RowSpace::kTokens);
    x = g.add_node(OpKind::kAdd, p + "attn_residual", l, {x, o}, {}, {}, d, RowSpace::kTokens, true);

    h = g.add_node(OpKind::kRmsNorm, p + "ffn_norm", l, {x}, {ffn_norm}, norm, d, RowSpace::kTokens);
    ValueId gate = g.add_node(OpKind::kMatMul, p + "ffn_gate", l, {h}, {w_gate}, {}, spec.n_ff, RowSpace::kTokens);
    ValueId up = g.add_node(OpKind::kMatMul, p + "ffn_up", l, {h}, {w_up}, {}, spec.n_ff, RowSpace::kTokens);
    ValueId act = g.add_node(OpKind::kSwiGlu, p + "ffn_swiglu", l, {gate, up}, {}, {}, spec.n_ff,
                             RowSpace::kTokens, true);
    ValueId down = g.add_node(OpKind::kMatMul, p + "ffn_down", l, {act}, {w_down}, {}, d, RowSpace::kTokens);
    x = g.add_node(OpKind::kAdd, p + "ffn_residual", l, {x, down}, {}, {}, d, RowSpace::kTokens, true);
  }

  const WeightId out_norm = b.weight("output_norm.weight", {d});
  const WeightId head = spec.tied_output ? embedding : b.weight("output.weight", {d, spec.n_vocab});
  ValueId last = g.add_node(OpKind::kTakeLast, "take_outputs", -1, {x}, {}, {}, d, RowSpace::kOutputs);
  ValueId n = g.add_node(OpKind::kRmsNorm, "output_norm", -1, {last}, {out_norm}, norm, d, RowSpace::kOutputs,
                         true);
  ValueId logits = g.add_node(OpKind::kMatMul, "logits", -1, {n}, {head}, {}, spec.n_vocab, RowSpace::kOutputs);
  g.set_output(logits);
  g.validate();
  return b.take();
}

}  // namespace sitsrt
