#include "cpu/cpu_context.hpp"

#if defined(SITSRT_X86_KERNELS)
#include <cpuid.h>
#endif
#if defined(SITSRT_X86_KERNELS) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "core/check.hpp"
#include "cpu/decode_prefetch.hpp"

#include <string>

namespace sitsrt::cpu {

std::string_view name(Isa isa) noexcept {
  switch (isa) {
    case Isa::kGeneric:
      return "generic";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Vnni:
      return "avx512vnni";
    case Isa::kAmx:
      return "amx";
  }
  return "unknown";
}

#if defined(SITSRT_X86_KERNELS)
namespace {
// clang's __builtin_cpu_supports does not know "f16c"; read CPUID leaf 1, ECX bit 29.
bool has_f16c() noexcept {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}

// AMX-TILE + AMX-BF16 (CPUID 7.0 EDX bits 24, 22) and AVX512-BF16 (7.1 EAX bit 5), which
// gemm_amx.cpp is compiled for, and the tile data state granted to this process: Linux enables
// it only on request (arch_prctl ARCH_REQ_XCOMP_PERM, once per process, for all its threads) and
// refuses where the kernel or hypervisor does not support it. Checked once.
bool amx_usable() noexcept {
#if defined(__linux__)
  static const bool usable = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    if ((edx & (1u << 24)) == 0 || (edx & (1u << 22)) == 0) return false;
    if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) == 0 || (eax & (1u << 5)) == 0) return false;
    constexpr int kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
    unsigned long permitted = 0;
    return syscall(SYS_arch_prctl, kArchGetXcompPerm, &permitted) == 0 && (permitted & (1ul << kXfeatureXtiledata)) != 0;
  }();
  return usable;
#else
  return false;  // other systems: no way to request the tile state here
#endif
}
}  // namespace
#endif

Isa detect_isa() noexcept {
#if defined(SITSRT_X86_KERNELS)
  // The *_avx512.cpp files are compiled with exactly F/BW/VL/DQ (+AVX2/FMA/F16C), so that is
  // what must be present; *_avx512vnni.cpp files add VNNI.
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx2") &&
                      __builtin_cpu_supports("fma") && has_f16c();
  if (avx512 && __builtin_cpu_supports("avx512vnni")) return amx_usable() ? Isa::kAmx : Isa::kAvx512Vnni;
  if (avx512) return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c()) {
    return Isa::kAvx2;
  }
#endif
  return Isa::kGeneric;
}

bool isa_supported(Isa isa) noexcept {
  return static_cast<int>(isa) <= static_cast<int>(detect_isa());
}

CpuContext::CpuContext(int threads, Isa isa, bool int8_activations)
    : pool_(std::make_unique<ThreadPool>(threads)),
      isa_(isa_supported(isa) ? isa : detect_isa()),
      int8_activations_(int8_activations) {
  check_decode_prefetch_setting();
  scratch_.resize(static_cast<std::size_t>(pool_->size()));
}

void CpuContext::reserve_scratch(std::size_t floats) {
  if (floats <= scratch_floats_) return;
  // Round up to whole cache lines so kernels may read a full vector at the end of scratch.
  const std::size_t rounded = (floats + 15) / 16 * 16;
  for (std::size_t t = 0; t < scratch_.size(); ++t) {
    scratch_[t] = AlignedBuffer(rounded * sizeof(float), "cpu kernel scratch");
  }
  scratch_floats_ = rounded;
}

float* CpuContext::scratch(int thread_index, std::size_t floats) {
  if (thread_index < 0 || static_cast<std::size_t>(thread_index) >= scratch_.size()) {
    raise(ErrorCode::kInternal, "cpu scratch: thread index {} outside the {}-thread pool", thread_index,
          scratch_.size());
  }
  if (floats > scratch_floats_) {
    raise(ErrorCode::kInternal, "cpu scratch: {} floats requested but only {} reserved (reserve_scratch)", floats,
          scratch_floats_);
  }
  return scratch_[static_cast<std::size_t>(thread_index)].as<float>();
}

void CpuContext::reserve_shared_bytes(std::size_t bytes) {
  if (bytes <= shared_bytes_) return;
  const std::size_t rounded = (bytes + 63) / 64 * 64;
  shared_ = AlignedBuffer(rounded, "cpu kernel shared scratch");
  shared_bytes_ = rounded;
}

std::byte* CpuContext::shared(std::size_t bytes) {
  if (bytes > shared_bytes_) {
    raise(ErrorCode::kInternal, "cpu shared scratch: {} bytes requested but only {} reserved (reserve_shared_bytes)",
          bytes, shared_bytes_);
  }
  return shared_.data();
}

}  // namespace sitsrt::cpu
