// Internal: the AVX2 kernels of the K-quant and IQ4_NL formats (matmul_kquant_avx2.cpp): float
// matvec and dequant for every K type and IQ4_NL, int8-activation decode for all but Q8_K (and
// that again built with AVX-VNNI, qdot/qdot_kquant_avxvnni.cpp).
// Declared here so the AVX2 and both AVX-512 tables can list them (every AVX-512 CPU runs AVX2
// code); explicit instantiations are not inline, so the ODR note of matmul_kernels.hpp holds.
// The portable versions live in matmul_generic.cpp / qdot_generic.cpp.
#pragma once

#include "core/dtype.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu::detail {

template <DType kType>
void matvec_kquant_avx2(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                        std::int64_t n_rows);
template <DType kType>
void dequant_kquant_avx2(const std::byte* src, float* dst, std::int64_t n);

// Int8-activation decode (QdotFn of qdot_kernels.hpp).
struct QuantizedRow;
template <DType kType>
void qdot_kquant_avx2(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                      std::int64_t n_rows);
// Their int8 GEMM (m > 1 rows, QgemmFn of qdot_kernels.hpp) for Q4_K, Q5_K and Q6_K, else nullptr;
// qgemm_avx2 lists it.
using QgemmFn = void (*)(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, std::int64_t m, float* y,
                         std::int64_t ldy, std::int64_t n_rows);
QgemmFn qgemm_kquant_avx2(DType type) noexcept;
// The same two built with AVX-VNNI (qdot/qdot_kquant_avxvnni.cpp): bit-identical; only where
// avx_vnni_supported() (qdot_kernels.hpp).
template <DType kType>
void qdot_kquant_avxvnni(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                         std::int64_t n_rows);
QgemmFn qgemm_kquant_avxvnni(DType type) noexcept;

}  // namespace sitsrt::cpu::detail
