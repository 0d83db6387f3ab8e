// Graph weights served straight from an mmapped GGUF file.
#pragma once

#include "core/check.hpp"
#include "formats/gguf.hpp"
#include "graph/weight_source.hpp"

namespace sitsrt {

class GgufWeightSource final : public graph::WeightSource {
 public:
  explicit GgufWeightSource(const gguf::File& file) : file_(file) {}

  [[nodiscard]] std::span<const std::byte> data(const graph::Weight& weight) const override {
    const gguf::TensorInfo* info = file_.find_tensor(weight.name);
    if (info == nullptr) raise(ErrorCode::kInvalidModel, "{}: missing tensor '{}'", file_.path(), weight.name);
    return file_.tensor_data(*info);
  }

 private:
  const gguf::File& file_;
};

}  // namespace sitsrt
