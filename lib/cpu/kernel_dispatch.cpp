// Which kernel table serves which ISA level. CpuContext has already clamped its isa() to what
// the CPU supports; on non-x86 builds only the generic tables exist.
#include "cpu/matmul/matmul_kernels.hpp"
#include "cpu/qdot/qdot_kernels.hpp"
#include "cpu/vec_kernels.hpp"

#include <limits>

#if defined(SITSRT_X86_KERNELS)
#include <cpuid.h>
#endif

namespace sitsrt::cpu::detail {
namespace {

struct IsaTables {
  Isa isa;
  const MatmulKernels& (*matmul)() noexcept;
  const VecKernels& (*vec)() noexcept;
  const QdotKernels& (*qdot)() noexcept;  // int8-activation decode
};

#if defined(SITSRT_X86_KERNELS)
// The AVX2 integer dots, with VPDPBUSD where the CPU has AVX-VNNI (bit-identical either way).
const QdotKernels& qdot_kernels_avx2_level() noexcept {
  return avx_vnni_supported() ? qdot_kernels_avxvnni() : qdot_kernels_avx2();
}
#endif

constexpr IsaTables kIsaTables[] = {
    {Isa::kGeneric, matmul_kernels_generic, vec_kernels_generic, qdot_kernels_generic},
#if defined(SITSRT_X86_KERNELS)
    {Isa::kAvx2, matmul_kernels_avx2, vec_kernels_avx2, qdot_kernels_avx2_level},
    // Plain AVX-512 has no 512-bit vpdpbusd: its integer dots are the AVX2 (or AVX-VNNI) ones.
    {Isa::kAvx512, matmul_kernels_avx512, vec_kernels_avx512, qdot_kernels_avx2_level},
    {Isa::kAvx512Vnni, matmul_kernels_avx512, vec_kernels_avx512, qdot_kernels_avx512vnni},
    // AMX only changes prefill (matmul.cpp sends m > 1 to gemm_amx); the rest is avx512vnni.
    {Isa::kAmx, matmul_kernels_avx512, vec_kernels_avx512, qdot_kernels_avx512vnni},
#endif
};

const IsaTables& tables_for(Isa isa) noexcept {
  for (const IsaTables& entry : kIsaTables) {
    if (entry.isa == isa) return entry;
  }
  return kIsaTables[0];
}

}  // namespace

const MatmulKernels& matmul_kernels_for(Isa isa) noexcept {
  return tables_for(isa).matmul();
}
const VecKernels& vec_kernels_for(Isa isa) noexcept {
  return tables_for(isa).vec();
}
const QdotKernels& qdot_kernels_for(Isa isa) noexcept {
  return tables_for(isa).qdot();
}
QgemmFn qgemm_kernel_for(Isa isa, WeightLayout layout) noexcept {
#if defined(SITSRT_X86_KERNELS)
  if (isa == Isa::kAvx512Vnni || isa == Isa::kAmx) return qgemm_avx512vnni(layout);
  // The plain AVX-512 level decodes with the AVX2 integer kernels (its qdot table above), so the
  // AVX2 GEMM is bit-identical to its m == 1 decode too.
  if (isa == Isa::kAvx2 || isa == Isa::kAvx512)
    return avx_vnni_supported() ? qgemm_avxvnni(layout) : qgemm_avx2(layout);
#endif
  (void)isa;
  (void)layout;
  return nullptr;
}
std::int64_t qgemm_max_m(Isa isa, WeightLayout layout) noexcept {
#if defined(SITSRT_X86_KERNELS)
  if ((isa == Isa::kAvx512Vnni || isa == Isa::kAmx) && qgemm_avx512vnni(layout) != nullptr) {
    return std::numeric_limits<std::int64_t>::max();
  }
#endif
  (void)isa;
  (void)layout;
  return kQgemmPerRowMaxM;
}

#if defined(SITSRT_X86_KERNELS)
namespace {
// CPUID leaf 7 subleaf 0, asked once: decode asks per product, and CPUID traps to the hypervisor
// in a VM (measured: 2% of a Q4_0 decode's samples when it was asked every time).
struct Leaf7 {
  unsigned ecx = 0, edx = 0;
};
const Leaf7& leaf7() noexcept {
  static const Leaf7 leaf = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 ? Leaf7{ecx, edx} : Leaf7{};
  }();
  return leaf;
}
bool avx512_vbmi_supported() noexcept {
  return (leaf7().ecx & (1u << 1)) != 0;  // ECX bit 1: AVX512_VBMI
}
}  // namespace

#endif

bool avx_vnni_supported() noexcept {
#if defined(SITSRT_X86_KERNELS)
  static const bool supported = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 4)) != 0;  // AVX-VNNI
  }();
  return supported;
#else
  return false;
#endif
}

bool avx512_fp16_supported() noexcept {
#if defined(SITSRT_X86_KERNELS)
  return (leaf7().edx & (1u << 23)) != 0 && avx512_vbmi_supported();  // EDX bit 23: AVX512_FP16
#else
  return false;
#endif
}

bool q4_kr_decode_native(Isa isa) noexcept {
#if defined(SITSRT_X86_KERNELS)
  return tables_for(isa).qdot == qdot_kernels_avx512vnni && avx512_vbmi_supported();
#else
  (void)isa;
  return false;
#endif
}

bool fp8r_decode_native(Isa isa) noexcept {
#if defined(SITSRT_X86_KERNELS)
  // Every AVX-512 level uses matmul_kernels_avx512, whose FP8R entry runs the FP16 kernel.
  return tables_for(isa).matmul == matmul_kernels_avx512 && avx512_fp16_supported();
#else
  (void)isa;
  return false;
#endif
}

}  // namespace sitsrt::cpu::detail
