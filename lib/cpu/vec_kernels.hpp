// Internal: per-ISA row primitives behind the non-matmul kernels (attention for one
// (query row, kv head) pair, swiglu, f32 -> f16 packing). Defined by vec_{generic,avx2,avx512}.cpp;
// attention.cpp / elementwise.cpp own argument checks, threading and scratch.
// The ODR note of matmul_kernels.hpp applies to the ISA files here too.
#pragma once

#include "cpu/cpu_context.hpp"

#include <array>
#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu::detail {

// Positions one attend call covers at most. attention.cpp cuts every (query row, kv head)
// pair's positions into chunks of this length and folds the chunks' partial results in order,
// so scratch does not grow with the context and a long pair can be split over threads.
inline constexpr std::int64_t kAttendChunk = 256;

// One side (K or V) of an attend chunk. Chunk position p's row starts at rows[p] (pad4(n)
// entries: a last partial block of four repeats row n-1); this kv head's values are elements
// e0 .. e0 + head_dim - 1 of a row of `width` values of `type` (layouts: KvType in
// attention/attention.hpp; int8/int4 scales follow the row's values). attention.cpp resolves
// the block table into `rows`, so the kernels walk blocks of any size at the cost of one
// pointer load per row. For a head-major side (KvLayerView::k_head_major) rows[p] is the head's
// vector itself and e0 is 0.
struct AttendSide {
  const std::byte* const* rows;
  std::int64_t e0;
  std::int64_t width;
};

// One chunk of one (query row, kv head) pair of causal attention: for every query head h of the
// group, max[h] = max_p s[h,p], sum[h] = sum_p exp(s[h,p] - max[h]) and the unnormalised
// o[h] = sum_p exp(s[h,p] - max[h]) * v[p], with s[h,p] = (q[h] * scale) . k[p]; quantized
// rows are dequantized in registers (float(q) * scale, one rounding, as dequantize_span).
struct AttendArgs {
  const float* q;  // group query heads, head h at q + h * head_dim
  AttendSide k;
  AttendSide v;
  std::int64_t group;  // query heads sharing this kv head
  std::int64_t n;      // positions 0 .. n-1, 1 <= n <= kAttendChunk
  std::int64_t head_dim;
  float scale;
  float* o;        // group x pad16(head_dim) floats, 64-byte aligned; padding lanes get 0
  float* max;      // group floats
  float* sum;      // group floats
  float* scratch;  // attend_scratch_floats(group, head_dim) floats, 64-byte aligned
};
using AttendFn = void (*)(const AttendArgs& args);
// [K type][V type], indexed by the KvType values (f32, f16, int8, int4).
using AttendTable = std::array<std::array<AttendFn, 4>, 4>;

// The 16 instantiations A<KRow, VRow>::run with rows R0..R3 standing for f32, f16, int8, int4.
template <template <typename, typename> class A, typename R0, typename R1, typename R2, typename R3>
constexpr AttendTable attend_table() {
  return {{{A<R0, R0>::run, A<R0, R1>::run, A<R0, R2>::run, A<R0, R3>::run},
           {A<R1, R0>::run, A<R1, R1>::run, A<R1, R2>::run, A<R1, R3>::run},
           {A<R2, R0>::run, A<R2, R1>::run, A<R2, R2>::run, A<R2, R3>::run},
           {A<R3, R0>::run, A<R3, R1>::run, A<R3, R2>::run, A<R3, R3>::run}}};
}

// Scratch layout shared by every ISA (floats; p16 = round up to 16): scaled q group*p16(d),
// scores group*kAttendChunk, one widened K/V row p16(d) (used by the generic level).
inline std::size_t attend_scratch_floats(std::int64_t group, std::int64_t head_dim) noexcept {
  const auto p16 = [](std::int64_t v) { return (v + 15) / 16 * 16; };
  return static_cast<std::size_t>(group * p16(head_dim) + group * kAttendChunk + p16(head_dim));
}

struct VecKernels {
  AttendTable attend;  // by K and V cache type
  // out[i] = silu(gate[i]) * up[i] for i < n; out may alias gate or up.
  void (*swiglu_row)(const float* gate, const float* up, float* out, std::int64_t n);
  // out[i] = gelu_tanh(gate[i]) * up[i], computed as g * u / (1 + exp(-2 sqrt(2/pi) (g + 0.044715 g^3)))
  // (0.5 (1 + tanh(z)) = 1 / (1 + exp(-2z))); out may alias gate or up.
  void (*geglu_row)(const float* gate, const float* up, float* out, std::int64_t n);
  // dst[i] = fp16(src[i]), round to nearest even (bit-exact with fp32_to_fp16 except NaN payloads).
  void (*f32_to_f16_row)(const float* src, std::uint16_t* dst, std::int64_t n);
  // Int4 KV groups: x[32 g, 32 g + 32) for g < groups as kv_int4::quantize_group (core/kv_int4.hpp)
  // quantizes them, bit for bit: indices two a byte (low nibble first) at indices + 16 g, the
  // scale code at codes[g]. The SIMD forms search the four candidate scales side by side.
  void (*int4_quantize_groups)(const float* x, std::int64_t groups, std::byte* indices, std::byte* codes);
};

// The table for a (supported) ISA level; see kernel_dispatch.cpp.
const VecKernels& vec_kernels_for(Isa isa) noexcept;

const VecKernels& vec_kernels_generic() noexcept;
#if defined(SITSRT_X86_KERNELS)
const VecKernels& vec_kernels_avx2() noexcept;
const VecKernels& vec_kernels_avx512() noexcept;
#endif

}  // namespace sitsrt::cpu::detail
