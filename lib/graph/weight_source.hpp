// Where a backend finds the bytes of a graph weight (an mmapped model file, for now).
#pragma once

#include "graph/graph.hpp"

#include <cstddef>
#include <span>

namespace sitsrt::graph {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Bytes of `weight` in its stored format; valid as long as the source lives.
  [[nodiscard]] virtual std::span<const std::byte> data(const Weight& weight) const = 0;
};

}  // namespace sitsrt::graph
