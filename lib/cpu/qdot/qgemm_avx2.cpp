// The AVX2 level's int8 GEMM (qgemm_tiles_avx2.hpp, VPMADDUBSW + VPMADDWD).
#include "cpu/qdot/qgemm_tiles_avx2.hpp"

namespace sitsrt::cpu::detail {

QgemmFn qgemm_avx2(WeightLayout layout) noexcept {
  return qgemm_avx2_tiles(layout);
}

}  // namespace sitsrt::cpu::detail
