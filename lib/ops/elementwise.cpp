#include "cpu/elementwise.hpp"
#include "ops/ops.hpp"
#include "ops/shape_check.hpp"

#include <cstring>

namespace sitsrt::ops {

void swiglu(cpu::CpuContext& ctx, TensorView gate, TensorView up, TensorView out) {
  expect_shape("swiglu", "up", up, gate.rows, gate.cols);
  expect_shape("swiglu", "output", out, gate.rows, gate.cols);
  cpu::swiglu(ctx, gate.data, gate.ld, up.data, up.ld, gate.rows, gate.cols, out.data, out.ld);
}

void geglu_tanh(cpu::CpuContext& ctx, TensorView gate, TensorView up, TensorView out) {
  expect_shape("geglu_tanh", "up", up, gate.rows, gate.cols);
  expect_shape("geglu_tanh", "output", out, gate.rows, gate.cols);
  cpu::geglu_tanh(ctx, gate.data, gate.ld, up.data, up.ld, gate.rows, gate.cols, out.data, out.ld);
}

void add_bias(cpu::CpuContext& ctx, TensorView x, std::span<const float> bias, TensorView out) {
  if (static_cast<std::int64_t>(bias.size()) != x.cols) {
    raise(ErrorCode::kInternal, "add_bias: bias has {} values for rows of {}", bias.size(), x.cols);
  }
  expect_shape("add_bias", "output", out, x.rows, x.cols);
  cpu::add_bias(ctx, x.data, x.ld, bias.data(), x.rows, x.cols, out.data, out.ld);
}

void scale(cpu::CpuContext& ctx, TensorView x, float factor, TensorView out) {
  expect_shape("scale", "output", out, x.rows, x.cols);
  cpu::scale(ctx, x.data, x.ld, factor, x.rows, x.cols, out.data, out.ld);
}

void soft_cap(cpu::CpuContext& ctx, TensorView x, float cap, TensorView out) {
  expect_shape("soft_cap", "output", out, x.rows, x.cols);
  cpu::soft_cap(ctx, x.data, x.ld, cap, x.rows, x.cols, out.data, out.ld);
}

void add(cpu::CpuContext& ctx, TensorView a, TensorView b, TensorView out) {
  expect_shape("add", "b", b, a.rows, a.cols);
  expect_shape("add", "output", out, a.rows, a.cols);
  cpu::add(ctx, a.data, a.ld, b.data, b.ld, a.rows, a.cols, out.data, out.ld);
}

void take_last(TensorView x, TensorView out) {
  expect_shape("take_last", "output", out, out.rows, x.cols);
  if (out.rows > x.rows) raise(ErrorCode::kInternal, "take_last: {} rows from {}", out.rows, x.rows);
  const TensorView src = x.last_rows(out.rows);
  for (std::int64_t r = 0; r < out.rows; ++r) {
    if (out.row(r) != src.row(r)) std::memcpy(out.row(r), src.row(r), static_cast<std::size_t>(x.cols) * sizeof(float));
  }
}

}  // namespace sitsrt::ops
