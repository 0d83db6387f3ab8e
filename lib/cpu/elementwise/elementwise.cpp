#include "cpu/elementwise/elementwise.hpp"

#include "core/check.hpp"
#include "cpu/vec_kernels.hpp"

#include <algorithm>
#include <cmath>

namespace sitsrt::cpu {
namespace {

// Below this many elements one thread is faster than waking the pool (a decode step's rows).
constexpr std::int64_t kParallelElements = 1 << 15;

// Calls fn(row, c0, c1) over rows x n elements, split evenly across the pool in flat
// 64-element units (so a single long row is split too) when the work is large enough.
template <typename Fn>
void for_each_span(CpuContext& ctx, std::int64_t rows, std::int64_t n, const Fn& fn) {
  const std::int64_t total = rows * n;
  if (total < kParallelElements || ctx.threads() == 1) {
    for (std::int64_t i = 0; i < rows; ++i) fn(i, 0, n);
    return;
  }
  ctx.pool().run([&](int t, int threads) {
    const Range r = split_range(total, t, threads, 64);
    for (std::int64_t e = r.begin; e < r.end;) {
      const std::int64_t row = e / n, c0 = e % n;
      const std::int64_t c1 = std::min(n, c0 + (r.end - e));
      fn(row, c0, c1);
      e += c1 - c0;
    }
  });
}

void check_shape(std::int64_t rows, std::int64_t n, const char* op) {
  if (rows < 0 || n < 0) raise(ErrorCode::kInvalidArgument, "{}: bad shape {} x {}", op, rows, n);
}

}  // namespace

void swiglu(CpuContext& ctx, const float* gate, std::int64_t ldg, const float* up, std::int64_t ldu, std::int64_t rows,
            std::int64_t n, float* out, std::int64_t ldo) {
  check_shape(rows, n, "swiglu");
  const auto row_kernel = detail::vec_kernels_for(ctx.isa()).swiglu_row;
  for_each_span(ctx, rows, n, [&](std::int64_t i, std::int64_t c0, std::int64_t c1) {
    row_kernel(gate + i * ldg + c0, up + i * ldu + c0, out + i * ldo + c0, c1 - c0);
  });
}

void add(CpuContext& ctx, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, std::int64_t rows,
         std::int64_t n, float* out, std::int64_t ldo) {
  check_shape(rows, n, "add");
  for_each_span(ctx, rows, n, [&](std::int64_t i, std::int64_t c0, std::int64_t c1) {
    const float* ar = a + i * lda;
    const float* br = b + i * ldb;
    float* o = out + i * ldo;
    for (std::int64_t c = c0; c < c1; ++c) o[c] = ar[c] + br[c];
  });
}

void geglu_tanh(CpuContext& ctx, const float* gate, std::int64_t ldg, const float* up, std::int64_t ldu,
                std::int64_t rows, std::int64_t n, float* out, std::int64_t ldo) {
  check_shape(rows, n, "geglu_tanh");
  const auto row_kernel = detail::vec_kernels_for(ctx.isa()).geglu_row;
  for_each_span(ctx, rows, n, [&](std::int64_t i, std::int64_t c0, std::int64_t c1) {
    row_kernel(gate + i * ldg + c0, up + i * ldu + c0, out + i * ldo + c0, c1 - c0);
  });
}

void add_bias(CpuContext& ctx, const float* x, std::int64_t ldx, const float* bias, std::int64_t rows, std::int64_t n,
              float* out, std::int64_t ldo) {
  check_shape(rows, n, "add_bias");
  for_each_span(ctx, rows, n, [&](std::int64_t i, std::int64_t c0, std::int64_t c1) {
    const float* xr = x + i * ldx;
    float* o = out + i * ldo;
    for (std::int64_t c = c0; c < c1; ++c) o[c] = xr[c] + bias[c];
  });
}

void scale(CpuContext& ctx, const float* x, std::int64_t ldx, float factor, std::int64_t rows, std::int64_t n,
           float* out, std::int64_t ldo) {
  check_shape(rows, n, "scale");
  for_each_span(ctx, rows, n, [&](std::int64_t i, std::int64_t c0, std::int64_t c1) {
    const float* xr = x + i * ldx;
    float* o = out + i * ldo;
    for (std::int64_t c = c0; c < c1; ++c) o[c] = xr[c] * factor;
  });
}

void soft_cap(CpuContext& ctx, const float* x, std::int64_t ldx, float cap, std::int64_t rows, std::int64_t n,
              float* out, std::int64_t ldo) {
  check_shape(rows, n, "soft_cap");
  if (!(cap > 0.0f)) raise(ErrorCode::kInvalidArgument, "soft_cap: cap {} must be > 0", cap);
  for_each_span(ctx, rows, n, [&](std::int64_t i, std::int64_t c0, std::int64_t c1) {
    const float* xr = x + i * ldx;
    float* o = out + i * ldo;
    for (std::int64_t c = c0; c < c1; ++c) o[c] = cap * std::tanh(xr[c] / cap);
  });
}

}  // namespace sitsrt::cpu
