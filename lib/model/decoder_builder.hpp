// Shared pieces of the per-architecture graph builders (arch_*.cpp): tensor lookup with shape
// checks, and the sub-graphs every decoder-only transformer block is made of. Which optional
// parts a block has (biases, Q/K norm, window, rope scaling, activation) comes from the spec,
// so an architecture's builder only says how the pieces are arranged.
#pragma once

#include "graph/graph.hpp"
#include "model/model_graph.hpp"
#include "model/model_spec.hpp"

#include <string>
#include <vector>

namespace sitsrt::detail {

class DecoderBuilder {
 public:
  DecoderBuilder(const ModelSpec& spec, const gguf::File& file, const ModelGraphOptions& options);

  // Adds the tensor `name` after checking its shape (GGUF order). Vectors must be F32.
  graph::WeightId weight(const std::string& name, std::vector<std::int64_t> dims);

  // Token embedding rows, times spec.embedding_scale when it is not 1.
  graph::ValueId embed();
  // RMSNorm of x with the [n_embd] tensor `tensor`; `in_place` overwrites x.
  graph::ValueId norm(graph::ValueId x, const std::string& tensor, const std::string& node, std::int32_t layer,
                      bool in_place = false);
  // Self-attention of block `layer` on the normalised input h: q/k/v projections (+ biases),
  // per-head Q/K norm, rope (per-layer base and scaling), causal or windowed attention, output
  // projection. Returns the projection's output [T x n_embd].
  graph::ValueId attention(graph::ValueId h, std::int32_t layer);
  // Gated feed-forward of block `layer` on h (SwiGLU or GeGLU by spec). Returns [T x n_embd].
  graph::ValueId feed_forward(graph::ValueId h, std::int32_t layer);
  // x += y, in place.
  graph::ValueId residual(graph::ValueId x, graph::ValueId y, const std::string& node, std::int32_t layer);
  // Last output rows, final norm, output head (tied or not), optional logit soft-cap; sets the
  // graph output, validates and hands the graph over.
  graph::Graph finish(graph::ValueId x);

  [[nodiscard]] const ModelSpec& spec() const noexcept { return spec_; }
  static std::string block(std::int32_t layer);  // "blk.<layer>."

 private:
  graph::RopeAttrs rope_for_layer(std::int32_t layer) const;

  const ModelSpec& spec_;
  const gguf::File& file_;
  ModelGraphOptions options_;
  graph::Graph graph_;
  graph::WeightId embedding_ = -1;
  graph::WeightId rope_factors_ = -1;
};

// Arrangements of the blocks, one per architecture family (arch_*.cpp).
graph::Graph build_llama_family_graph(DecoderBuilder& b);  // llama, mistral, qwen2, qwen3
graph::Graph build_gemma3_graph(DecoderBuilder& b);

}  // namespace sitsrt::detail
