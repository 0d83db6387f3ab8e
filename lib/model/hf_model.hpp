// Loads a Hugging Face model directory (config.json + model.safetensors or a sharded set with
// model.safetensors.index.json) as a ModelSpec and a TensorCatalog under GGUF tensor names.
//
// Weights: HF stores a linear layer as [out, in] row-major, which is GGUF dims [in, out] with
// the same bytes, so F32/F16/BF16 matrices are served in place from the mmapped shards. Vectors
// (norms, biases) become owned F32 copies when stored as F16/BF16 (the graph wants F32 vectors),
// and Gemma 3 norm weights become 1 + w (HF applies (1 + w); GGUF files store 1 + w). Q/K are
// not permuted: HF checkpoints rotate halves, so the spec selects neox rope. The linear layers of
// FP8 / AWQ / GPTQ checkpoints are repacked exactly into owned FP8 E4M3 / INT4 g128 tensors.
#pragma once

#include "core/file_io.hpp"
#include "model/hf_config.hpp"
#include "model/tensor_catalog.hpp"

#include <string>
#include <vector>

namespace sitsrt {

// A file the weights are read from: its path and its identity when it was mapped.
struct MappedWeightFile {
  std::string path;
  FileIdentity identity;
};

struct HfModel {
  HfConfig config;
  TensorCatalog tensors;
  std::string prefix;  // the text model's tensor-name prefix ("model.", "model.language_model.", ...)
  std::vector<MappedWeightFile> weight_files;  // the safetensors shards, as mapped
};

// True when `path` is a directory holding config.json.
bool is_hf_model_directory(const std::string& path);

// Throws sitsrt::Error naming the directory, file, key or tensor (kIo, kInvalidModel;
// kUnsupported for an architecture, dtype or quantization method this build cannot run, and for
// quantized layouts without an exact internal format: see pack_q4_g128 / pack_fp8_e4m3).
HfModel open_hf_model(const std::string& directory);

}  // namespace sitsrt
