// Internal, for vec_avx2.cpp / vec_avx512.cpp only: how an attend chunk walks its K and V rows.
// Everything here has internal linkage (anonymous namespace), so each ISA file compiles its own
// copy under its own -m flags and nothing is shared at link time (see the ODR note in
// matmul_kernels.hpp).
#pragma once

#include "cpu/vec_kernels.hpp"

#include "cpu/simd_intrinsics.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu::detail {
namespace {

// A kv head's rows are n_kv_heads * head_dim elements apart (2 KiB for 8 x 128 f16), so
// consecutive positions often sit on different 4 KiB pages, where hardware prefetchers stop:
// decode at long context waited on every row. Key rows kPrefetchRows ahead are requested.
constexpr std::int64_t kPrefetchRows = 8;

// The four rows of the block at position p: consecutive rows, except that a last partial block
// repeats row n-1 (its extra scores are ignored and its value weights are 0).
struct Block4 {
  const std::byte* r[4];
};
inline Block4 block_rows(const std::byte* base, const AttendArgs& a, std::int64_t p) {
  const std::byte* row = base + static_cast<std::size_t>(p) * a.row_stride;
  if (p + 4 <= a.n) return {{row, row + a.row_stride, row + 2 * a.row_stride, row + 3 * a.row_stride}};
  Block4 b{};
  for (std::int64_t i = 0; i < 4; ++i)
    b.r[i] = base + static_cast<std::size_t>(std::min(p + i, a.n - 1)) * a.row_stride;
  return b;
}

// Requests rows [p, p + 4) of base (those below n) with prefetch hint Hint (_MM_HINT_T0 or
// _MM_HINT_T1). __builtin_prefetch, not _mm_prefetch: GCC's takes an enum _mm_hint and clang's is
// a macro over an int, so neither accepts the other's argument; the hints' values are the
// locality levels (T0 = 3, T1 = 2) in both.
template <int Hint>
inline void prefetch_block(const std::byte* base, const AttendArgs& a, std::int64_t p, std::int64_t row_bytes) {
  const std::int64_t end = std::min(p + 4, a.n);
  for (std::int64_t i = p; i < end; ++i) {
    const auto* row = reinterpret_cast<const char*>(base + static_cast<std::size_t>(i) * a.row_stride);
    for (std::int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(row + b, 0, Hint & 3);
  }
}

}  // namespace
}  // namespace sitsrt::cpu::detail
