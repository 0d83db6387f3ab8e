// Internal: the AVX2 kernels of the K-quant and IQ4_NL formats (matmul_kquant_avx2.cpp,
// explicitly instantiated for every K type and IQ4_NL; int8-activation ones for all of them but
// Q8_K),
// declared here so the AVX2 and both AVX-512 tables can list them: every AVX-512 CPU runs AVX2
// code. Explicit instantiations are not inline, so the ODR note of matmul_kernels.hpp holds.
// (The portable versions live in matmul_generic.cpp / qdot_generic.cpp.)
// Signatures: MatvecFn / DequantFn of matmul_kernels.hpp.
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

// Int8-activation decode (QdotFn of qdot_kernels.hpp), instantiated for every K type but Q8_K
// and for IQ4_NL; listed by the AVX2, AVX-512 and AVX-512 VNNI qdot tables.
struct QuantizedRow;
template <DType kType>
void qdot_kquant_avx2(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                      std::int64_t n_rows);

}  // namespace sitsrt::cpu::detail
