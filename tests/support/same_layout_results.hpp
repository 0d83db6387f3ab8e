// For the repacked-layout tests: a weight and its repacked copy must give the same matmul
// outputs (for the batch sizes given) and the same get_rows rows, bit for bit.
#pragma once

#include "cpu/cpu_context.hpp"
#include "cpu/matmul/matmul.hpp"
#include "cpu/qdot/qdot_kernels.hpp"
#include "cpu/weight_layout.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

namespace sitsrt::test {

inline void check_same_results(cpu::CpuContext& ctx, const cpu::WeightMatrix& stored, const cpu::WeightMatrix& repacked,
                               std::initializer_list<std::int64_t> batch_sizes, Rng& rng) {
  const std::int64_t rows = stored.rows, cols = stored.cols;
  for (const std::int64_t m : batch_sizes) {
    const std::vector<float> x = rng.normals(static_cast<std::size_t>(m * cols));
    ctx.reserve_shared_bytes(std::max(cpu::matmul_shared_bytes(ctx, stored, m), cpu::matmul_shared_bytes(ctx, repacked, m)));
    ctx.reserve_scratch(std::max(cpu::matmul_scratch_floats(stored, m), cpu::matmul_scratch_floats(repacked, m)));
    std::vector<float> want(static_cast<std::size_t>(m * rows)), got(want.size());
    cpu::matmul(ctx, stored, x.data(), cols, m, want.data(), rows);
    cpu::matmul(ctx, repacked, x.data(), cols, m, got.data(), rows);
    CAPTURE(m);
    CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);
  }
  const std::vector<std::int32_t> ids = {0, static_cast<std::int32_t>(rows - 1), static_cast<std::int32_t>(rows / 2)};
  std::vector<float> want(ids.size() * static_cast<std::size_t>(cols)), got(want.size());
  cpu::get_rows(ctx, stored, ids.data(), 3, want.data(), cols);
  cpu::get_rows(ctx, repacked, ids.data(), 3, got.data(), cols);
  CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);
}

// Decode (m = 1) of x by a stored weight and by its copy in `layout`, and x quantized as the
// int8 kernels see it (the portable quantizer; every ISA's is bit-identical), for references.
struct DecodedBothLayouts {
  std::vector<float> stored, repacked;
  std::vector<std::byte> buffer;  // holds q's arrays
  cpu::detail::QuantizedRow q;
};
inline DecodedBothLayouts decode_both_layouts(cpu::CpuContext& ctx, const cpu::WeightMatrix& w,
                                              cpu::WeightLayout layout, const std::vector<float>& x) {
  const std::size_t stride = cpu::resident_row_stride(layout, w.cols);
  std::vector<std::byte> packed(stride * static_cast<std::size_t>(w.rows));
  cpu::copy_to_layout(ctx, w, layout, packed.data(), stride);
  const cpu::WeightMatrix r{layout, packed.data(), w.rows, w.cols, stride};
  ctx.reserve_shared_bytes(std::max(cpu::matmul_shared_bytes(ctx, w, 1), cpu::matmul_shared_bytes(ctx, r, 1)));
  DecodedBothLayouts out;
  out.stored.resize(static_cast<std::size_t>(w.rows));
  out.repacked.resize(static_cast<std::size_t>(w.rows));
  cpu::matmul(ctx, w, x.data(), w.cols, 1, out.stored.data(), w.rows);
  cpu::matmul(ctx, r, x.data(), w.cols, 1, out.repacked.data(), w.rows);
  out.buffer.resize(cpu::detail::quantized_row_bytes(w.cols) + 64);
  auto* aligned = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(out.buffer.data()) + 63) / 64 * 64);
  out.q = cpu::detail::quantize_row_q8_act(x.data(), w.cols, aligned);
  return out;
}

}  // namespace sitsrt::test
