#include "model/decoder_builder.hpp"

#include "core/check.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace sitsrt::detail {

using graph::NodeAttrs;
using graph::OpKind;
using graph::RowSpace;
using graph::ValueId;
using graph::WeightId;

DecoderBuilder::DecoderBuilder(const ModelSpec& spec, const TensorCatalog& tensors, const ModelGraphOptions& options)
    : spec_(spec), tensors_(tensors), options_(options) {
  if (spec.rope_freq_factors) rope_factors_ = weight("rope_freqs.weight", {spec.rope_dims / 2});
}

std::string DecoderBuilder::block(std::int32_t layer) {
  return fmt::format("blk.{}.", layer);
}

WeightId DecoderBuilder::weight(const std::string& name, std::vector<std::int64_t> dims) {
  const CatalogTensor* info = tensors_.find(name);
  if (info == nullptr)
    raise(ErrorCode::kInvalidModel, "{}: missing tensor {} ({})", tensors_.path(), tensors_.describe(name),
          spec_.architecture);
  if (info->dims != dims) {
    raise(ErrorCode::kInvalidModel,
          "{}: tensor {} has shape [{}] (GGUF order), expected [{}] for {} (n_embd {}, n_head {}, n_head_kv {}, "
          "head_dim {}, n_ff {}, n_vocab {})",
          tensors_.path(), tensors_.describe(name), fmt::join(info->dims, ", "), fmt::join(dims, ", "), spec_.architecture, spec_.n_embd,
          spec_.n_head, spec_.n_head_kv, spec_.head_dim, spec_.n_ff, spec_.n_vocab);
  }
  if (dims.size() == 1 && info->type != DType::kF32) {
    raise(ErrorCode::kUnsupported,
          "{}: vector tensor {} is {}, only f32 norm, bias and rope-factor vectors are supported", tensors_.path(),
          tensors_.describe(name),
          sitsrt::name(info->type));
  }
  return graph_.add_weight({name, info->type, info->dims, info->bytes});
}

ValueId DecoderBuilder::embed() {
  embedding_ = weight("token_embd.weight", {spec_.n_embd, spec_.n_vocab});
  ValueId x = graph_.add_node(OpKind::kEmbed, "embed", -1, {}, {embedding_}, {}, spec_.n_embd, RowSpace::kTokens);
  if (spec_.embedding_scale != 1.0f) {
    NodeAttrs scale;
    scale.scalar = spec_.embedding_scale;
    x = graph_.add_node(OpKind::kScale, "embed_scale", -1, {x}, {}, scale, spec_.n_embd, RowSpace::kTokens, true);
  }
  return x;
}

ValueId DecoderBuilder::norm(ValueId x, const std::string& tensor, const std::string& node, std::int32_t layer,
                             bool in_place) {
  NodeAttrs attrs;
  attrs.eps = spec_.rms_eps;
  const WeightId w = weight(tensor, {spec_.n_embd});
  const RowSpace rows = graph_.values()[static_cast<std::size_t>(x)].rows;
  return graph_.add_node(OpKind::kRmsNorm, node, layer, {x}, {w}, attrs, spec_.n_embd, rows, in_place);
}

graph::RopeAttrs DecoderBuilder::rope_for_layer(std::int32_t layer) const {
  graph::RopeAttrs r;
  r.head_dim = spec_.head_dim;
  r.rot_dims = spec_.rope_dims;
  r.neox = options_.rope_neox.value_or(spec_.rope_neox);
  // Local (sliding-window) layers of Gemma 3 use their own base and no context scaling.
  if (spec_.layer_is_windowed(layer) && spec_.rope_local_freq_base > 0.0f) {
    r.freq_base = spec_.rope_local_freq_base;
    return r;
  }
  r.freq_base = spec_.rope_freq_base;
  r.freq_scale = spec_.rope_freq_scale;
  const RopeScalingSpec& s = spec_.rope_scaling;
  r.original_context = static_cast<float>(s.original_context);
  switch (s.type) {
    case RopeScalingType::kNone:
      break;
    case RopeScalingType::kLinear:
      r.scaling = graph::RopeScaling::kLinear;
      break;
    case RopeScalingType::kYarn:
      r.scaling = graph::RopeScaling::kYarn;
      r.yarn_beta_fast = s.yarn_beta_fast;
      r.yarn_beta_slow = s.yarn_beta_slow;
      r.yarn_attn_factor = s.yarn_attn_factor;
      break;
    case RopeScalingType::kLlama3:
      r.scaling = graph::RopeScaling::kLlama3;
      r.llama3_factor = s.factor;
      r.llama3_low_freq_factor = s.low_freq_factor;
      r.llama3_high_freq_factor = s.high_freq_factor;
      break;
  }
  return r;
}

ValueId DecoderBuilder::attention(ValueId h, std::int32_t l) {
  const std::string p = block(l);
  const std::int64_t d = spec_.n_embd;
  const std::int64_t n_head = spec_.n_head_at(l);
  const std::int64_t q_width = n_head * spec_.head_dim;
  const std::int64_t kv_width = spec_.n_head_kv * spec_.head_dim;
  const auto project = [&](const std::string& tensor, const std::string& node, std::int64_t width) {
    ValueId v = graph_.add_node(OpKind::kMatMul, p + node, l, {h}, {weight(p + tensor + ".weight", {d, width})}, {},
                                width, RowSpace::kTokens);
    if (spec_.qkv_bias) {
      const WeightId bias = weight(p + tensor + ".bias", {width});
      v = graph_.add_node(OpKind::kAddBias, p + node + "_bias", l, {v}, {bias}, {}, width, RowSpace::kTokens, true);
    }
    return v;
  };
  ValueId q = project("attn_q", "q", q_width);
  ValueId k = project("attn_k", "k", kv_width);
  const ValueId v = project("attn_v", "v", kv_width);
  if (spec_.qk_norm) {
    NodeAttrs qn;
    qn.eps = spec_.rms_eps;
    qn.n_heads = n_head;
    NodeAttrs kn = qn;
    kn.n_heads = spec_.n_head_kv;
    q = graph_.add_node(OpKind::kHeadRmsNorm, p + "q_norm", l, {q},
                        {weight(p + "attn_q_norm.weight", {spec_.head_dim})}, qn, q_width, RowSpace::kTokens, true);
    k = graph_.add_node(OpKind::kHeadRmsNorm, p + "k_norm", l, {k},
                        {weight(p + "attn_k_norm.weight", {spec_.head_dim})}, kn, kv_width, RowSpace::kTokens, true);
  }
  NodeAttrs rope_q;
  rope_q.rope = rope_for_layer(l);
  rope_q.n_heads = n_head;
  NodeAttrs rope_k = rope_q;
  rope_k.n_heads = spec_.n_head_kv;
  std::vector<WeightId> factors;
  if (rope_factors_ >= 0 && !(spec_.layer_is_windowed(l) && spec_.rope_local_freq_base > 0.0f))
    factors = {rope_factors_};
  q = graph_.add_node(OpKind::kRope, p + "q_rope", l, {q}, factors, rope_q, q_width, RowSpace::kTokens, true);
  k = graph_.add_node(OpKind::kRope, p + "k_rope", l, {k}, factors, rope_k, kv_width, RowSpace::kTokens, true);

  NodeAttrs attn;
  attn.n_heads = n_head;
  attn.n_kv_heads = spec_.n_head_kv;
  attn.head_dim = spec_.head_dim;
  attn.attn_scale = spec_.attn_scale;
  attn.window = spec_.layer_is_windowed(l) ? spec_.sliding_window : 0;
  attn.kv_element_bytes = static_cast<std::uint32_t>(traits(options_.kv_type).block_bytes);
  const ValueId a =
      graph_.add_node(OpKind::kAttention, p + "attention", l, {q, k, v}, {}, attn, q_width, RowSpace::kTokens);
  return graph_.add_node(OpKind::kMatMul, p + "attn_out", l, {a}, {weight(p + "attn_output.weight", {q_width, d})}, {},
                         d, RowSpace::kTokens);
}

ValueId DecoderBuilder::feed_forward(ValueId h, std::int32_t l) {
  const std::string p = block(l);
  const std::int64_t d = spec_.n_embd, ff = spec_.n_ff_at(l);
  const ValueId gate = graph_.add_node(OpKind::kMatMul, p + "ffn_gate", l, {h},
                                       {weight(p + "ffn_gate.weight", {d, ff})}, {}, ff, RowSpace::kTokens);
  const ValueId up = graph_.add_node(OpKind::kMatMul, p + "ffn_up", l, {h}, {weight(p + "ffn_up.weight", {d, ff})}, {},
                                     ff, RowSpace::kTokens);
  const bool gelu = spec_.ffn_activation == FfnActivation::kGeluTanh;
  const ValueId act = graph_.add_node(gelu ? OpKind::kGeGlu : OpKind::kSwiGlu, p + (gelu ? "ffn_geglu" : "ffn_swiglu"),
                                      l, {gate, up}, {}, {}, ff, RowSpace::kTokens, true);
  return graph_.add_node(OpKind::kMatMul, p + "ffn_down", l, {act}, {weight(p + "ffn_down.weight", {ff, d})}, {}, d,
                         RowSpace::kTokens);
}

ValueId DecoderBuilder::residual(ValueId x, ValueId y, const std::string& node, std::int32_t layer) {
  return graph_.add_node(OpKind::kAdd, node, layer, {x, y}, {}, {}, spec_.n_embd, RowSpace::kTokens, true);
}

graph::Graph DecoderBuilder::finish(ValueId x) {
  const std::int64_t d = spec_.n_embd;
  ValueId last = graph_.add_node(OpKind::kGatherRows, "take_outputs", -1, {x}, {}, {}, d, RowSpace::kOutputs);
  ValueId n = norm(last, "output_norm.weight", "output_norm", -1, true);
  const WeightId head = spec_.tied_output ? embedding_ : weight("output.weight", {d, spec_.n_vocab});
  ValueId logits = graph_.add_node(OpKind::kMatMul, "logits", -1, {n}, {head}, {}, spec_.n_vocab, RowSpace::kOutputs);
  if (spec_.final_logit_softcap > 0.0f) {
    NodeAttrs cap;
    cap.scalar = spec_.final_logit_softcap;
    logits = graph_.add_node(OpKind::kSoftCap, "logit_softcap", -1, {logits}, {}, cap, spec_.n_vocab,
                             RowSpace::kOutputs, true);
  }
  graph_.set_output(logits);
  graph_.validate();
  return std::move(graph_);
}

}  // namespace sitsrt::detail
