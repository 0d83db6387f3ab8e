// Internal, for the qdot_*_avx512{vnni,vbmi}.cpp and qgemm_*_{avx512vnni,amx}.cpp files only:
// the weight prefetch of the decode kernels, a line towards L2, their passes over rows (four at a
// time, then one), and an fp16 field read. Everything here has internal linkage (anonymous
// namespace), so each ISA file compiles its own copy under its own -m flags and nothing is shared
// at link time (see the ODR note in matmul_kernels.hpp).
#pragma once

#include "cpu/decode_prefetch.hpp"
#include "cpu/qdot/qdot_kernels.hpp"
#include "cpu/simd_intrinsics.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sitsrt::cpu::detail {
namespace {

// Prefetches the kStep bytes row_ahead (decode_prefetch.hpp) past byte `at` of each of R rows, one per cache line
// (Q8_0's 4 blocks, 136 bytes: 3; one per iteration left half of the lines to the hardware
// prefetcher and cost ~10% of Q8_0 decode). Past the end of its row, row r's prefetch continues
// into row r of the next group (the rows in between are this group's, already streaming), as
// one row alone would run on.
template <int R, std::size_t kStep>
inline void prefetch_rows(const std::byte* w, std::size_t row_stride, std::size_t at) {
  const DecodePrefetch& policy = prefetch_policy();
  const std::size_t ahead = at + policy.row_ahead;
  const std::size_t wrap = ahead >= row_stride ? static_cast<std::size_t>(R - 1) * row_stride : 0;
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const std::byte* row = w + static_cast<std::size_t>(r) * row_stride + ahead + wrap;
#pragma GCC unroll 5
    for (std::size_t off = 0; off < kStep; off += 64) prefetch_line(row + off, policy.to_l2);
  }
}

// One cache line towards L2. An asm statement: GCC 12 at -O2 deletes a loop whose body is only
// builtin prefetches (attend_rows.hpp's note), as the callers' tile-ahead loops would be.
inline void prefetch_l2(const std::byte* p) {
  asm volatile("prefetcht1 %0" : : "m"(*reinterpret_cast<const char*>(p)));
}

// An unaligned 2-byte field (an fp16 scale) as a 32-bit integer.
inline std::uint32_t load_u16(const void* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Rows 4 at a time (Rows4: 4 rows sharing the activation side), the rest one at a time.
using RowsFn = void (*)(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y);
template <RowsFn Rows4, RowsFn Rows1>
void by_four_rows(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  std::int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) Rows4(w + static_cast<std::size_t>(r) * row_stride, row_stride, x, y + r);
  for (; r < n_rows; ++r) Rows1(w + static_cast<std::size_t>(r) * row_stride, row_stride, x, y + r);
}

}  // namespace
}  // namespace sitsrt::cpu::detail
