#include "model/model_loader.hpp"

#include "model/hf_model.hpp"

namespace sitsrt {

LoadedModel load_model(const std::string& path) {
  if (is_hf_model_directory(path)) {
    HfModel hf = open_hf_model(path);
    return {hf.config.spec, std::move(hf.tensors), std::nullopt, std::move(hf.config), std::move(hf.weight_files)};
  }
  gguf::File file = gguf::File::open(path);
  ModelSpec spec = read_model_spec(file);
  TensorCatalog tensors = TensorCatalog::from_gguf(file);
  std::vector<MappedWeightFile> weight_files{{path, file.mapping()->identity()}};
  return {std::move(spec), std::move(tensors), std::move(file), std::nullopt, std::move(weight_files)};
}

}  // namespace sitsrt
