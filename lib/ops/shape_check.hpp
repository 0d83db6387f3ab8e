// Shape checks shared by the op files. A mismatch is a bug in the graph builder or the
// executor, so it is reported as kInternal with both shapes.
#pragma once

#include "core/check.hpp"
#include "core/tensor_view.hpp"

namespace sitsrt::ops {

inline void expect_shape(const char* op, const char* what, const TensorView& t, std::int64_t rows,
                         std::int64_t cols) {
  if (t.data == nullptr || t.rows != rows || t.cols != cols || t.ld < t.cols) {
    raise(ErrorCode::kInternal, "{}: {} is [{} x {}] (ld {}), expected [{} x {}]", op, what, t.rows, t.cols, t.ld,
          rows, cols);
  }
}

}  // namespace sitsrt::ops
