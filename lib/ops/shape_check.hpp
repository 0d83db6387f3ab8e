// Checks shared by the op files. A mismatch is a bug in the graph builder or the executor, so
// it is reported as kInternal with both shapes.
#pragma once

#include "core/check.hpp"
#include "ops/op_kernels.hpp"

namespace sitsrt::ops {

// An f32 activation of [rows x cols] on the kernels' device.
inline void expect_shape(const OpKernels& k, const char* op, const char* what, const TensorRef& t, std::int64_t rows,
                         std::int64_t cols) {
  if (t.data == nullptr || t.rows != rows || t.cols != cols || t.ld < t.cols) {
    raise(ErrorCode::kInternal, "{}: {} is [{} x {}] (ld {}), expected [{} x {}]", op, what, t.rows, t.cols, t.ld,
          rows, cols);
  }
  if (t.type != DType::kF32) raise(ErrorCode::kInternal, "{}: {} is {}, expected f32", op, what, name(t.type));
  if (t.device != k.device()) {
    raise(ErrorCode::kInternal, "{}: {} is in {}'s memory, the kernels run on {}", op, what, device_name(t.device),
          device_name(k.device()));
  }
}

// A weight of [rows x cols] bound on the kernels' device; f32_only for norm and bias vectors.
inline void expect_weight(const OpKernels& k, const char* op, const char* what, const WeightRef& w, std::int64_t rows,
                          std::int64_t cols, bool f32_only = false) {
  if (w.id < 0 || w.rows != rows || w.cols != cols) {
    raise(ErrorCode::kInternal, "{}: weight {} (#{}) is [{} x {}], expected [{} x {}]", op, what, w.id, w.rows, w.cols,
          rows, cols);
  }
  if (f32_only && w.format != DType::kF32) {
    raise(ErrorCode::kInternal, "{}: weight {} is {}, expected f32", op, what, name(w.format));
  }
  if (w.device != k.device()) {
    raise(ErrorCode::kInternal, "{}: weight {} is bound on {}, the kernels run on {}", op, what, device_name(w.device),
          device_name(k.device()));
  }
}

}  // namespace sitsrt::ops
