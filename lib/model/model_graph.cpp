#include "model/model_graph.hpp"

#include "core/check.hpp"
#include "formats/gguf.hpp"
#include "model/decoder_builder.hpp"

#include <array>

namespace sitsrt {
namespace {

// Adding an architecture: its traits in model_spec.cpp, a block arrangement in arch_<name>.cpp
// (from DecoderBuilder's pieces; a new op goes through graph.hpp, ops/ and cpu/), a row here.
struct ArchitectureBuilder {
  std::string_view architecture;
  graph::Graph (*build)(detail::DecoderBuilder&);
};

constexpr std::array<ArchitectureBuilder, 4> kBuilders = {{
    {"llama", detail::build_llama_family_graph},
    {"qwen2", detail::build_llama_family_graph},
    {"qwen3", detail::build_llama_family_graph},
    {"gemma3", detail::build_gemma3_graph},
}};

}  // namespace

graph::Graph build_model_graph(const ModelSpec& spec, const gguf::File& file, const ModelGraphOptions& options) {
  for (const auto& entry : kBuilders) {
    if (entry.architecture != spec.architecture) continue;
    detail::DecoderBuilder builder(spec, file, options);
    return entry.build(builder);
  }
  raise(ErrorCode::kUnsupported, "{}: no graph builder for architecture '{}' (supported: {})", file.path(),
        spec.architecture, supported_architectures());
}

}  // namespace sitsrt
