// Internal: matvec / dequant kernels of the K-quant and IQ4_NL formats, declared here so every
// ISA table can list them. The portable ones (defined and explicitly instantiated in
// matmul_generic.cpp for every K-quant type and IQ4_NL) serve each format an ISA file has no
// SIMD kernel for; the AVX2 ones (matmul_kquant_avx2.cpp, instantiated for Q4_K, Q5_K, Q6_K and
// Q8_K; int8-activation ones for Q4_K and Q6_K) also serve the AVX-512 tables, since every
// AVX-512 CPU runs AVX2 code. Explicit
// instantiations are not inline, so the ODR note of matmul_kernels.hpp holds.
// Signatures: MatvecFn / DequantFn of matmul_kernels.hpp.
#pragma once

#include "core/dtype.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu::detail {

template <DType kType>
void matvec_kquant_generic(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                           std::int64_t n_rows);
template <DType kType>
void dequant_kquant_generic(const std::byte* src, float* dst, std::int64_t n);

template <DType kType>
void matvec_kquant_avx2(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                        std::int64_t n_rows);
template <DType kType>
void dequant_kquant_avx2(const std::byte* src, float* dst, std::int64_t n);

// Int8-activation decode (QdotFn of qdot_kernels.hpp), instantiated for Q4_K and Q6_K; listed by
// the AVX2, AVX-512 and AVX-512 VNNI qdot tables.
struct QuantizedRow;
template <DType kType>
void qdot_kquant_avx2(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                      std::int64_t n_rows);

}  // namespace sitsrt::cpu::detail
