// Float helpers that behave the same in host C++ and CUDA device code: every function is
// __host__ __device__ under nvcc and plain inline C++ otherwise. Products, sums and quotients
// are rounded on their own: nvcc contracts a * b + c into an fma by default, and code that must
// give the same bits on both sides (cuda/device_formats.hpp, core/kv_int4.hpp) uses these. On the
// host they are plain operators, which stay apart only because the files using them are built
// for the baseline target, without FMA: GCC's C++ default is -ffp-contract=fast (only ISO C modes
// turn it off), so a file built with -mfma may fuse them (the SIMD int4 quantizer keeps its
// products apart with an empty asm, cpu/kv_int4_candidates.hpp).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SITSRT_HOST_DEVICE __host__ __device__ inline
#else
#define SITSRT_HOST_DEVICE inline
#endif

namespace sitsrt::hd {

SITSRT_HOST_DEVICE float bits_to_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
SITSRT_HOST_DEVICE std::uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
SITSRT_HOST_DEVICE float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
SITSRT_HOST_DEVICE float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
SITSRT_HOST_DEVICE float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
SITSRT_HOST_DEVICE float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace sitsrt::hd
