#include "ops/ops.hpp"
#include "ops/shape_check.hpp"

namespace sitsrt::ops {

namespace {

// Two same-shaped inputs and an output of that shape.
void expect_pair(OpKernels& k, const char* op, const TensorRef& a, const char* b_name, const TensorRef& b,
                 const TensorRef& out) {
  expect_shape(k, op, "input", a, a.rows, a.cols);
  expect_shape(k, op, b_name, b, a.rows, a.cols);
  expect_shape(k, op, "output", out, a.rows, a.cols);
}

}  // namespace

void swiglu(OpKernels& k, const TensorRef& gate, const TensorRef& up, const TensorRef& out) {
  expect_pair(k, "swiglu", gate, "up", up, out);
  k.swiglu(gate, up, out);
}

void geglu_tanh(OpKernels& k, const TensorRef& gate, const TensorRef& up, const TensorRef& out) {
  expect_pair(k, "geglu_tanh", gate, "up", up, out);
  k.geglu_tanh(gate, up, out);
}

void add(OpKernels& k, const TensorRef& a, const TensorRef& b, const TensorRef& out) {
  expect_pair(k, "add", a, "b", b, out);
  k.add(a, b, out);
}

void add_bias(OpKernels& k, const TensorRef& x, const WeightRef& bias, const TensorRef& out) {
  expect_weight(k, "add_bias", "bias", bias, 1, x.cols, true);
  expect_shape(k, "add_bias", "input", x, x.rows, x.cols);
  expect_shape(k, "add_bias", "output", out, x.rows, x.cols);
  k.add_bias(x, bias, out);
}

void scale(OpKernels& k, const TensorRef& x, float factor, const TensorRef& out) {
  expect_shape(k, "scale", "input", x, x.rows, x.cols);
  expect_shape(k, "scale", "output", out, x.rows, x.cols);
  k.scale(x, factor, out);
}

void soft_cap(OpKernels& k, const TensorRef& x, float cap, const TensorRef& out) {
  expect_shape(k, "soft_cap", "input", x, x.rows, x.cols);
  expect_shape(k, "soft_cap", "output", out, x.rows, x.cols);
  k.soft_cap(x, cap, out);
}

void gather_rows(OpKernels& k, const TensorRef& x, std::span<const std::int32_t> rows, const TensorRef& out) {
  expect_shape(k, "gather_rows", "input", x, x.rows, x.cols);
  expect_shape(k, "gather_rows", "output", out, static_cast<std::int64_t>(rows.size()), x.cols);
  for (std::int32_t r : rows) {
    if (r < 0 || r >= x.rows) raise(ErrorCode::kInternal, "gather_rows: row {} of {}", r, x.rows);
  }
  k.gather_rows(x, rows, out);
}

}  // namespace sitsrt::ops
