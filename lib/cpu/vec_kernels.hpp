// Internal: per-ISA row primitives behind the non-matmul kernels (attention for one
// (query row, kv head) pair, swiglu, f32 -> f16 packing). Defined by vec_{generic,avx2,avx512}.cpp;
// attention.cpp / elementwise.cpp own argument checks, threading and scratch.
// The ODR note of matmul_kernels.hpp applies to the ISA files here too.
#pragma once

#include "cpu/cpu_context.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu::detail {

// One (query row, kv head) pair of causal attention.
struct AttendArgs {
  const float* q;          // group query heads, head h at q + h * head_dim
  const std::byte* k;      // key of position p (this kv head) at k + p * row_stride
  const std::byte* v;      // value of position p at v + p * row_stride
  std::size_t row_stride;  // bytes between positions
  std::int64_t group;      // query heads sharing this kv head
  std::int64_t n;          // positions attended: 0 .. n-1 (n >= 1)
  std::int64_t head_dim;
  float scale;
  float* out;      // group heads, head h at out + h * head_dim
  float* scratch;  // attend_scratch_floats(n, group, head_dim) floats, 64-byte aligned
};
using AttendFn = void (*)(const AttendArgs& args);

// Scratch layout shared by every ISA (floats; p16 = round up to 16): scaled q group*p16(d),
// scores group*p16(n), 4 converted K/V rows 4*p16(d), output accumulators group*p16(d),
// 1/sum per head p16(group).
inline std::size_t attend_scratch_floats(std::int64_t n, std::int64_t group, std::int64_t head_dim) noexcept {
  const auto p16 = [](std::int64_t v) { return (v + 15) / 16 * 16; };
  return static_cast<std::size_t>(group * p16(head_dim) * 2 + group * p16(n) + 4 * p16(head_dim) + p16(group));
}

struct VecKernels {
  AttendFn attend_f32;  // F32 cache
  AttendFn attend_f16;  // F16 cache
  // out[i] = silu(gate[i]) * up[i] for i < n; out may alias gate or up.
  void (*swiglu_row)(const float* gate, const float* up, float* out, std::int64_t n);
  // dst[i] = fp16(src[i]), round to nearest even (bit-exact with fp32_to_fp16 except NaN payloads).
  void (*f32_to_f16_row)(const float* src, std::uint16_t* dst, std::int64_t n);
};

// The table for a (supported) ISA level; see kernel_dispatch.cpp.
const VecKernels& vec_kernels_for(Isa isa) noexcept;

const VecKernels& vec_kernels_generic() noexcept;
#if defined(SITSRT_X86_KERNELS)
const VecKernels& vec_kernels_avx2() noexcept;
const VecKernels& vec_kernels_avx512() noexcept;
#endif

}  // namespace sitsrt::cpu::detail
