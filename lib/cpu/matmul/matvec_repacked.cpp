// Portable float-activation decode and dequant of the repacked Q8_0/Q4_0/FP8/Q4_K layouts, through
// dequantize_row one 1024-element group at a time. Compiled for the baseline target (see the ODR
// note in matmul_kernels.hpp) and listed by every ISA table: resident weights are only repacked
// where a dedicated decode kernel reads them (cpu/weight_layout.cpp), so this path serves
// prefill tiles at levels without a dedicated dequant, forced ISA levels and tests.
#include "cpu/matmul/matmul_kernels.hpp"
#include "cpu/repacked_blocks.hpp"

#include <algorithm>

namespace sitsrt::cpu::detail {
namespace {

template <WeightLayout kLayout>
void matvec_repacked(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                     std::int64_t n_rows) {
  const std::size_t group_bytes = row_bytes(kLayout, kRepackGroupElements);  // every layout's groups hold 1024
  float buf[kRepackGroupElements];
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const std::byte* row = w + static_cast<std::size_t>(r) * row_stride;
    float acc[8] = {};
    for (std::int64_t c0 = 0; c0 < cols; c0 += kRepackGroupElements) {
      const std::int64_t n = std::min(kRepackGroupElements, cols - c0);
      dequantize_row(kLayout, row + static_cast<std::size_t>(c0 / kRepackGroupElements) * group_bytes, buf, n);
      for (std::int64_t c = 0; c < n; ++c) acc[c % 8] += buf[c] * x[c0 + c];
    }
    y[r] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  }
}

}  // namespace

void matvec_q8_0r_portable(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                           std::int64_t n_rows) {
  matvec_repacked<WeightLayout::kQ8_0R>(w, row_stride, cols, x, y, n_rows);
}
void matvec_q4_0r_portable(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                           std::int64_t n_rows) {
  matvec_repacked<WeightLayout::kQ4_0R>(w, row_stride, cols, x, y, n_rows);
}
void matvec_fp8r_portable(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                         std::int64_t n_rows) {
  matvec_repacked<WeightLayout::kFP8_E4M3R>(w, row_stride, cols, x, y, n_rows);
}
void matvec_q4_kr_portable(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                           std::int64_t n_rows) {
  matvec_repacked<WeightLayout::kQ4_KR>(w, row_stride, cols, x, y, n_rows);
}
void dequant_q8_0r_portable(const std::byte* src, float* dst, std::int64_t n) {
  dequantize_row(WeightLayout::kQ8_0R, src, dst, n);
}
void dequant_q4_0r_portable(const std::byte* src, float* dst, std::int64_t n) {
  dequantize_row(WeightLayout::kQ4_0R, src, dst, n);
}
void dequant_fp8r_portable(const std::byte* src, float* dst, std::int64_t n) {
  dequantize_row(WeightLayout::kFP8_E4M3R, src, dst, n);
}
void dequant_q4_kr_portable(const std::byte* src, float* dst, std::int64_t n) {
  dequantize_row(WeightLayout::kQ4_KR, src, dst, n);
}

}  // namespace sitsrt::cpu::detail
