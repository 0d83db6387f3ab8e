// AVX2 + FMA + F16C kernels of the K-quant super-block formats and IQ4_NL: float-activation
// decode and dequant here, and the exported int8-activation kernels (qdot/qdot_kquant_avx2.hpp,
// all but Q8_K; also built with AVX-VNNI by qdot/qdot_kquant_avxvnni.cpp). Decode unpacks each
// 32-element sub-block to 8-lane float vectors in registers, dots it with x and scales the partial
// sum by the sub-block scale once; the formats with a min add fl(dmin * m) * sum(x) per sub-block
// separately (as the reference formula d sc q - dmin m splits). Dequant (prefill tiles, get_rows)
// reproduces dequantize_row bit for bit: multiply, then subtract, each rounded (no FMA). Listed
// by the AVX2 and AVX-512 tables.
#include "cpu/matmul/kquant_kernels.hpp"
#include "cpu/qdot/qdot_kquant_avx2.hpp"

namespace sitsrt::cpu::detail {
namespace {

template <typename F>
void matvec_k_avx2(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                   std::int64_t n_rows) {
  const std::int64_t nb = cols / F::kElements;
  constexpr int kScales = F::kElements / F::kSub > 0 ? F::kElements / F::kSub : 1;
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const typename F::Block*>(w + static_cast<std::size_t>(r) * row_stride);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (std::int64_t b = 0; b < nb; ++b) {
      prefetch_ahead(blocks + b);
      alignas(32) float dl[kScales], ml[kScales > 8 ? kScales : 8];
      F::scales(blocks[b], dl, ml);
      const float* xb = x + b * F::kElements;
      __m256 block_sum = _mm256_setzero_ps();  // Q8_K: one scale per block
#pragma GCC unroll 8
      for (int k = 0; k < F::kElements / 32; ++k) {  // unrolled: per-group shifts become immediates
        __m256 q[4];
        F::levels(blocks[b], k, q);
        const float* xk = xb + 32 * k;
        const __m256 x0 = _mm256_loadu_ps(xk), x1 = _mm256_loadu_ps(xk + 8);
        const __m256 x2 = _mm256_loadu_ps(xk + 16), x3 = _mm256_loadu_ps(xk + 24);
        const __m256 p01 = _mm256_fmadd_ps(q[1], x1, _mm256_mul_ps(q[0], x0));
        const __m256 p23 = _mm256_fmadd_ps(q[3], x3, _mm256_mul_ps(q[2], x2));
        if constexpr (F::kSub == 32) {
          acc = _mm256_fmadd_ps(_mm256_add_ps(p01, p23), _mm256_broadcast_ss(dl + k), acc);
          if constexpr (F::kHasMin) {
            const __m256 xs = _mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3));
            accm = _mm256_fmadd_ps(xs, _mm256_broadcast_ss(ml + k), accm);
          }
        } else if constexpr (F::kSub == 16) {
          acc = _mm256_fmadd_ps(p01, _mm256_broadcast_ss(dl + 2 * k), acc);
          acc = _mm256_fmadd_ps(p23, _mm256_broadcast_ss(dl + 2 * k + 1), acc);
          if constexpr (F::kHasMin) {
            accm = _mm256_fmadd_ps(_mm256_add_ps(x0, x1), _mm256_broadcast_ss(ml + 2 * k), accm);
            accm = _mm256_fmadd_ps(_mm256_add_ps(x2, x3), _mm256_broadcast_ss(ml + 2 * k + 1), accm);
          }
        } else {
          block_sum = _mm256_add_ps(block_sum, _mm256_add_ps(p01, p23));
        }
      }
      if constexpr (F::kSub == kSuperBlock) acc = _mm256_fmadd_ps(block_sum, _mm256_broadcast_ss(dl), acc);
    }
    y[r] = F::kHasMin ? hsum(acc) - hsum(accm) : hsum(acc);
  }
}

template <typename F>
void dequant_k_avx2(const std::byte* src, float* dst, std::int64_t n) {
  const auto* blocks = reinterpret_cast<const typename F::Block*>(src);
  constexpr int kScales = F::kElements / F::kSub > 0 ? F::kElements / F::kSub : 1;
  for (std::int64_t b = 0; b < n / F::kElements; ++b) {
    alignas(32) float dl[kScales], ml[kScales > 8 ? kScales : 8];
    F::scales(blocks[b], dl, ml);
#pragma GCC unroll 8
    for (int k = 0; k < F::kElements / 32; ++k) {
      __m256 q[4];
      F::levels(blocks[b], k, q);
      float* out = dst + b * F::kElements + 32 * k;
      for (int i = 0; i < 4; ++i) {
        const int s = (32 * k + 8 * i) / F::kSub;
        __m256 v = _mm256_mul_ps(q[i], _mm256_broadcast_ss(dl + s));
        if constexpr (F::kHasMin) v = _mm256_sub_ps(v, _mm256_broadcast_ss(ml + s));
        _mm256_storeu_ps(out + 8 * i, v);
      }
    }
  }
}

template <DType kType>
struct Avx2Format;
template <>
struct Avx2Format<DType::kQ2_K> : Q2K {};
template <>
struct Avx2Format<DType::kQ3_K> : Q3K {};
template <>
struct Avx2Format<DType::kIQ4_NL> : IQ4NL {};
template <>
struct Avx2Format<DType::kQ4_K> : Q4K {};
template <>
struct Avx2Format<DType::kQ5_K> : Q5K {};
template <>
struct Avx2Format<DType::kQ6_K> : Q6K {};
template <>
struct Avx2Format<DType::kQ8_K> : Q8K {};

}  // namespace

template <DType kType>
void matvec_kquant_avx2(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                        std::int64_t n_rows) {
  matvec_k_avx2<Avx2Format<kType>>(w, row_stride, cols, x, y, n_rows);
}
template <DType kType>
void dequant_kquant_avx2(const std::byte* src, float* dst, std::int64_t n) {
  dequant_k_avx2<Avx2Format<kType>>(src, dst, n);
}

template <DType kType>
void qdot_kquant_avx2(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                      std::int64_t n_rows) {
  qdot_kquant_rows<kType>(w, row_stride, x, y, n_rows);
}

template void qdot_kquant_avx2<DType::kQ2_K>(const std::byte*, std::size_t, const QuantizedRow&, float*, std::int64_t);
template void qdot_kquant_avx2<DType::kQ3_K>(const std::byte*, std::size_t, const QuantizedRow&, float*, std::int64_t);
template void qdot_kquant_avx2<DType::kQ4_K>(const std::byte*, std::size_t, const QuantizedRow&, float*, std::int64_t);
template void qdot_kquant_avx2<DType::kQ5_K>(const std::byte*, std::size_t, const QuantizedRow&, float*, std::int64_t);
template void qdot_kquant_avx2<DType::kQ6_K>(const std::byte*, std::size_t, const QuantizedRow&, float*, std::int64_t);
template void qdot_kquant_avx2<DType::kIQ4_NL>(const std::byte*, std::size_t, const QuantizedRow&, float*,
                                               std::int64_t);

#define SITSRT_INSTANTIATE_KQUANT_AVX2(type)                                                                  \
  template void matvec_kquant_avx2<type>(const std::byte*, std::size_t, std::int64_t, const float*, float*, \
                                         std::int64_t);                                                   \
  template void dequant_kquant_avx2<type>(const std::byte*, float*, std::int64_t)
SITSRT_INSTANTIATE_KQUANT_AVX2(DType::kQ2_K);
SITSRT_INSTANTIATE_KQUANT_AVX2(DType::kQ3_K);
SITSRT_INSTANTIATE_KQUANT_AVX2(DType::kQ4_K);
SITSRT_INSTANTIATE_KQUANT_AVX2(DType::kQ5_K);
SITSRT_INSTANTIATE_KQUANT_AVX2(DType::kQ6_K);
SITSRT_INSTANTIATE_KQUANT_AVX2(DType::kQ8_K);
SITSRT_INSTANTIATE_KQUANT_AVX2(DType::kIQ4_NL);
#undef SITSRT_INSTANTIATE_KQUANT_AVX2

QgemmFn qgemm_kquant_avx2(DType type) noexcept {
  return qgemm_kquant_tiles(type);
}

}  // namespace sitsrt::cpu::detail
