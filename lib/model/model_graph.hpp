// Builds the computation graph of a model from its spec, with one builder per architecture,
// and checks that the model file holds every tensor the graph needs, with the right shapes.
#pragma once

#include "core/dtype.hpp"
#include "graph/graph.hpp"
#include "model/model_spec.hpp"

#include <optional>

namespace sitsrt::gguf {
class File;
}

namespace sitsrt {

struct ModelGraphOptions {
  DType kv_type = DType::kF16;    // cache element type (kF32 or kF16)
  std::optional<bool> rope_neox;  // override the architecture's rope pairing (mislabelled files)
};

// Throws kUnsupported for an architecture without a builder, kInvalidModel for a missing or
// mis-shaped tensor (naming it and the expected shape).
graph::Graph build_model_graph(const ModelSpec& spec, const gguf::File& file, const ModelGraphOptions& options);

}  // namespace sitsrt
