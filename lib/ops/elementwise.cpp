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
