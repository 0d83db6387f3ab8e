// Internal, for the qdot_*_avx512vnni.cpp files only: the weight prefetch of the decode kernels.
// Everything here has internal linkage (anonymous namespace), so each ISA file compiles its own
// copy under its own -m flags and nothing is shared at link time (see the ODR note in
// matmul_kernels.hpp).
#pragma once

#include "cpu/simd_intrinsics.hpp"

#include <cstddef>

namespace sitsrt::cpu::detail {
namespace {

constexpr int kPrefetchBytes = 1536;  // as in matmul_avx512.cpp

// Prefetches the kStep bytes kPrefetchBytes past byte `at` of each of R rows, one per cache line
// (Q8_0's 4 blocks, 136 bytes: 3; one per iteration left half of the lines to the hardware
// prefetcher and cost ~10% of Q8_0 decode). Past the end of its row, row r's prefetch continues
// into row r of the next group (the rows in between are this group's, already streaming), as
// one row alone would run on.
template <int R, std::size_t kStep>
inline void prefetch_rows(const std::byte* w, std::size_t row_stride, std::size_t at) {
  const std::size_t ahead = at + kPrefetchBytes;
  const std::size_t wrap = ahead >= row_stride ? static_cast<std::size_t>(R - 1) * row_stride : 0;
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const std::byte* row = w + static_cast<std::size_t>(r) * row_stride + ahead + wrap;
#pragma GCC unroll 5
    for (std::size_t off = 0; off < kStep; off += 64) _mm_prefetch(reinterpret_cast<const char*>(row + off), _MM_HINT_T0);
  }
}

}  // namespace
}  // namespace sitsrt::cpu::detail
