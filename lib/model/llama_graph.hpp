// Builds the computation graph of a llama-family decoder from its spec and checks that the
// model file holds every tensor it needs, with the right shapes.
#pragma once

#include "core/dtype.hpp"
#include "graph/graph.hpp"
#include "model/model_spec.hpp"

namespace sitsrt::gguf {
class File;
}

namespace sitsrt {

struct LlamaGraphOptions {
  DType kv_type = DType::kF16;  // cache element type (kF32 or kF16)
  bool rope_neox = false;
};

graph::Graph build_llama_graph(const ModelSpec& spec, const gguf::File& file, const LlamaGraphOptions& options);

}  // namespace sitsrt
