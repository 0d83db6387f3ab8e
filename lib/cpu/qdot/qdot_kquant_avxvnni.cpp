// The K-quant and IQ4_NL int8-activation kernels of matmul_kquant_avx2.cpp built with AVX-VNNI
// (-mavxvnni; qdot_kquant_avx2.hpp): bit-identical to them. Listed by the AVX-VNNI decode table
// and GEMM (qdot_avxvnni.cpp, qgemm_avxvnni.cpp), reached as those are.
#include "cpu/matmul/kquant_kernels.hpp"
#include "cpu/qdot/qdot_kquant_avx2.hpp"

namespace sitsrt::cpu::detail {

template <DType kType>
void qdot_kquant_avxvnni(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                         std::int64_t n_rows) {
  qdot_kquant_rows<kType>(w, row_stride, x, y, n_rows);
}

template void qdot_kquant_avxvnni<DType::kQ2_K>(const std::byte*, std::size_t, const QuantizedRow&, float*,
                                                std::int64_t);
template void qdot_kquant_avxvnni<DType::kQ3_K>(const std::byte*, std::size_t, const QuantizedRow&, float*,
                                                std::int64_t);
template void qdot_kquant_avxvnni<DType::kQ4_K>(const std::byte*, std::size_t, const QuantizedRow&, float*,
                                                std::int64_t);
template void qdot_kquant_avxvnni<DType::kQ5_K>(const std::byte*, std::size_t, const QuantizedRow&, float*,
                                                std::int64_t);
template void qdot_kquant_avxvnni<DType::kQ6_K>(const std::byte*, std::size_t, const QuantizedRow&, float*,
                                                std::int64_t);
template void qdot_kquant_avxvnni<DType::kIQ4_NL>(const std::byte*, std::size_t, const QuantizedRow&, float*,
                                                  std::int64_t);

QgemmFn qgemm_kquant_avxvnni(DType type) noexcept {
  return qgemm_kquant_tiles(type);
}

}  // namespace sitsrt::cpu::detail
