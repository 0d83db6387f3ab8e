// A non-owning view of a row-major float32 matrix: `rows` rows of `cols` values, `ld` floats
// between the starts of consecutive rows. Activations move between ops as these views.
#pragma once

#include <cstdint>

namespace sitsrt {

struct TensorView {
  float* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t ld = 0;

  [[nodiscard]] float* row(std::int64_t r) const noexcept { return data + r * ld; }
  [[nodiscard]] TensorView last_rows(std::int64_t n) const noexcept { return {row(rows - n), n, cols, ld}; }
};

}  // namespace sitsrt
