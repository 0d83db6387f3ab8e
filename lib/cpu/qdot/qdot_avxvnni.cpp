// The same decode kernels as qdot_avx2.cpp built with AVX-VNNI (-mavxvnni): each block's int32
// lanes by one VPDPBUSD (byte_dot), bit-identical to the AVX2 table. Reached only at the AVX2 and
// plain AVX-512 levels on CPUs with AVX-VNNI (kernel_dispatch.cpp checks CPUID).
#include "cpu/qdot/qdot_decode_avx2.hpp"

namespace sitsrt::cpu::detail {

const QdotKernels& qdot_kernels_avxvnni() noexcept {
  return kAvx2Qdot;
}

}  // namespace sitsrt::cpu::detail
