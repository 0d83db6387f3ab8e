// Opens a model from a path: a GGUF file, or a Hugging Face directory (config.json +
// safetensors). Everything past this point (graph builders, backends) sees only the spec and
// the tensor catalog.
#pragma once

#include "formats/gguf.hpp"
#include "model/hf_config.hpp"
#include "model/hf_model.hpp"
#include "model/model_spec.hpp"
#include "model/tensor_catalog.hpp"

#include <optional>
#include <string>
#include <vector>

namespace sitsrt {

struct LoadedModel {
  ModelSpec spec;
  TensorCatalog tensors;
  std::optional<gguf::File> gguf;  // set for a GGUF file (metadata, tokenizer)
  std::optional<HfConfig> hf;      // set for an HF directory
  // The files the weights are mapped from, with their identities at mapping time (which inode,
  // in which state, the weights were read from): the GGUF file, or the safetensors shards.
  std::vector<MappedWeightFile> weight_files;
};

// Throws sitsrt::Error naming the path (see gguf::File::open, read_model_spec, open_hf_model).
LoadedModel load_model(const std::string& path);

}  // namespace sitsrt
