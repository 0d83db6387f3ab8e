// The AVX2 level's integer-dot decode table (qdot_decode_avx2.hpp, VPMADDUBSW + VPMADDWD).
#include "cpu/qdot/qdot_decode_avx2.hpp"

namespace sitsrt::cpu::detail {

const QdotKernels& qdot_kernels_avx2() noexcept {
  return kAvx2Qdot;
}

}  // namespace sitsrt::cpu::detail
