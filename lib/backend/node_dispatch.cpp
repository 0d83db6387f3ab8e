#include "backend/node_dispatch.hpp"

#include "backend/kv_cache.hpp"
#include "core/check.hpp"
#include "ops/ops.hpp"

namespace sitsrt {

void run_node_through_kernels(ops::OpKernels& kernels, const graph::Graph& graph, std::size_t index,
                              const StepContext& step, std::vector<ops::AttentionSequenceRef>& attention_sequences) {
  using graph::OpKind;
  const graph::Node& node = graph.nodes()[index];
  const Device device = kernels.device();
  const auto view = [&](graph::ValueId id) {
    const graph::Value& v = graph.values()[static_cast<std::size_t>(id)];
    const std::int64_t rows = v.rows == graph::RowSpace::kTokens ? step.n_tokens : step.n_outputs;
    std::byte* data = step.arena->data() + step.plan->offsets[static_cast<std::size_t>(id)];
    return ops::TensorRef{data, DType::kF32, rows, v.width, v.width, device};
  };
  const auto weight = [&](std::size_t i) {
    const graph::WeightId id = node.weights[i];
    const graph::Weight& w = graph.weights()[static_cast<std::size_t>(id)];
    return ops::WeightRef{static_cast<std::int32_t>(id), w.type, w.dims.size() > 1 ? w.dims[1] : 1, w.dims[0], device};
  };
  const ops::TensorRef out = view(node.output);
  switch (node.op) {
    case OpKind::kEmbed:
      ops::embed(kernels, weight(0), step.token_ids, out);
      return;
    case OpKind::kRmsNorm:
      ops::rms_norm(kernels, view(node.inputs[0]), weight(0), node.attrs.eps, out);
      return;
    case OpKind::kMatMul:
      ops::matmul(kernels, weight(0), view(node.inputs[0]), out);
      return;
    case OpKind::kHeadRmsNorm:
      ops::head_rms_norm(kernels, view(node.inputs[0]), node.attrs.n_heads, weight(0), node.attrs.eps, out);
      return;
    case OpKind::kRope: {
      const ops::WeightRef factors = node.weights.empty() ? ops::WeightRef{} : weight(0);
      ops::rope(kernels, out, node.attrs.n_heads, step.positions, node.attrs.rope,
                node.weights.empty() ? nullptr : &factors);
      return;
    }
    case OpKind::kGeGlu:
      ops::geglu_tanh(kernels, view(node.inputs[0]), view(node.inputs[1]), out);
      return;
    case OpKind::kAddBias:
      ops::add_bias(kernels, view(node.inputs[0]), weight(0), out);
      return;
    case OpKind::kScale:
      ops::scale(kernels, view(node.inputs[0]), node.attrs.scalar, out);
      return;
    case OpKind::kSoftCap:
      ops::soft_cap(kernels, view(node.inputs[0]), node.attrs.scalar, out);
      return;
    case OpKind::kAttention: {
      const ops::AttentionShape shape{node.attrs.n_heads, node.attrs.n_kv_heads, node.attrs.head_dim,
                                      node.attrs.attn_scale, node.attrs.window};
      // Each sequence attends over its own cache with its own rows, all in one call.
      attention_sequences.clear();
      for (const StepSequence& s : step.sequences) {
        attention_sequences.push_back({s.row_begin, s.n_rows, s.pos0, s.kv->layer(node.layer)});
      }
      ops::attention_batch(kernels, view(node.inputs[0]), view(node.inputs[1]), view(node.inputs[2]),
                           attention_sequences, shape, out);
      return;
    }
    case OpKind::kSwiGlu:
      ops::swiglu(kernels, view(node.inputs[0]), view(node.inputs[1]), out);
      return;
    case OpKind::kAdd:
      ops::add(kernels, view(node.inputs[0]), view(node.inputs[1]), out);
      return;
    case OpKind::kGatherRows:
      ops::gather_rows(kernels, view(node.inputs[0]), step.output_rows, out);
      return;
  }
  raise(ErrorCode::kInternal, "backend: unknown op kind {}", static_cast<int>(node.op));
}

}  // namespace sitsrt
