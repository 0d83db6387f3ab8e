// The int8 GEMM of qgemm_avx2.cpp built with AVX-VNNI (-mavxvnni, VPDPBUSD lanes): bit-identical
// to it and to the AVX-VNNI decode table (qdot_avxvnni.cpp). Reached as that table is.
#include "cpu/qdot/qgemm_tiles_avx2.hpp"

namespace sitsrt::cpu::detail {

QgemmFn qgemm_avxvnni(WeightLayout layout) noexcept {
  return qgemm_avx2_tiles(layout);
}

}  // namespace sitsrt::cpu::detail
