// Where a backend finds the bytes of a graph weight (an mmapped model file, for now).
#pragma once

#include "graph/graph.hpp"

#include <cstddef>
#include <span>

namespace sitsrt::graph {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Bytes of `weight` in its stored format; valid as long as the source lives (or until release).
  [[nodiscard]] virtual std::span<const std::byte> data(const Weight& weight) const = 0;
  // The backend has made its own copy of `weight` and will not read it here again: the source
  // may give its memory back (a mapping drops the pages from the process, an owned buffer is
  // freed), so resident weights do not count twice. Later data() calls may then fault the pages
  // in again (mappings) or throw (owned buffers).
  virtual void release(const Weight& weight) const noexcept { (void)weight; }
};

}  // namespace sitsrt::graph
