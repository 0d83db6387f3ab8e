// Decode matmul over planar FP8 E4M3 / INT4 g128 / Q8_0 / Q4_0 weights (planar_weights.hpp). Memory-bound at
// 1-16 rows, so the kernel is built around the weight stream:
//   - a block of 128 threads owns kOutputs consecutive outputs and splits their rows' 16-byte
//     chunks among its threads (split-K inside the block, one reduction at the end), so a
//     4096-wide row keeps 128 loads in flight and short matrices still fill the GPU;
//   - each thread loads one chunk of each of its kOutputs weight rows (16-byte non-allocating
//     loads), so one load of x serves kOutputs rows;
//   - codes become floats without the F2F pipe: FP8 through cvt e4m3x2 -> f16x2 and f16 -> f32
//     adds, INT4 / Q4_0 / Q8_0 through a byte permute into 2^23 + q (+ 128 for int8) and one
//     subtraction of 2^23 + zero (8 for Q4_0, 128 for int8);
//   - every decoded weight is d * w rounded once, the value decode_element gives, so each
//     product equals the CPU reference's; only the order of the float sums differs.
// Rows of x are taken 8 at a time (tiles), as in matmul.cu. One launch may also run several
// matrices that read the same x (Q, K, V: the decode fusions of backend/decode_fusion.hpp), the
// residual add after a matmul, or gate and up with their SwiGLU (4 rows per tile there): the same
// accumulation code, so every output has the bits of the matrix's own launch.
#include "cuda_backend/kernels/activation_math.hpp"
#include "cuda_backend/kernels/format_dispatch.hpp"
#include "cuda_backend/kernels/launch.hpp"
#include "cuda_backend/kernels/row_tiles.hpp"
#include "cuda_backend/planar_weights.hpp"

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <utility>

namespace sitsrt::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kOutputs = 4;  // weight rows per block
constexpr int kMaxSwiGluTileRows = 4;  // two matrices' accumulators per thread

__device__ inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// 16 bytes of weights, read once: bypass L1 (x lives there), no coherence needed (read-only).
__device__ inline uint4 load_weights(const std::uint8_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

template <bool kVector>
__device__ inline float4 load_x4(const float* p) {
  if constexpr (kVector) {
    return __ldg(reinterpret_cast<const float4*>(p));
  } else {
    return make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
  }
}

__device__ inline std::uint32_t word_of(const uint4& v, int t) {
  return t == 0 ? v.x : t == 1 ? v.y : t == 2 ? v.z : v.w;
}

// Four E4M3 codes (little-endian in w) times the block scale d, each product rounded once.
__device__ inline void decode_fp8x4(std::uint32_t w, float d, float out[4]) {
  const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xffffu), __NV_E4M3);
  const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> 16), __NV_E4M3);
  const float2 a = __half22float2(__half2(lo));
  const float2 b = __half22float2(__half2(hi));
  out[0] = __fmul_rn(d, a.x);
  out[1] = __fmul_rn(d, a.y);
  out[2] = __fmul_rn(d, b.x);
  out[3] = __fmul_rn(d, b.y);
}

// Eight nibbles of a sub-block word (bytes 4t..4t+3): low nibbles are elements 4t + i, high
// nibbles elements 16 + 4t + i. bias = 2^23 + zero; out = d * (q - zero).
__device__ inline void decode_q4x8(std::uint32_t w, float d, float bias, float low[4], float high[4]) {
  const std::uint32_t l = w & 0x0f0f0f0fu, h = (w >> 4) & 0x0f0f0f0fu;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // byte i of l / h under the exponent byte 0x4b: the float 2^23 + q, exactly
    const auto selector = static_cast<std::uint32_t>(0x7440 | i);
    low[i] = __fmul_rn(d, __fsub_rn(__uint_as_float(__byte_perm(l, 0x4b000000u, selector)), bias));
    high[i] = __fmul_rn(d, __fsub_rn(__uint_as_float(__byte_perm(h, 0x4b000000u, selector)), bias));
  }
}

// Four int8 codes times the block scale d: byte ^ 0x80 = q + 128 under the exponent byte 0x4b is
// the float 2^23 + 128 + q, exactly; minus 2^23 + 128 gives q.
__device__ inline void decode_q8x4(std::uint32_t w, float d, float out[4]) {
  const std::uint32_t biased = w ^ 0x80808080u;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const auto selector = static_cast<std::uint32_t>(0x7440 | i);
    out[i] = __fmul_rn(d, __fsub_rn(__uint_as_float(__byte_perm(biased, 0x4b000000u, selector)), 8388736.0f));
  }
}

__device__ inline float half_bits_to_float(std::uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xffffu)));
}

// Nibble formats take 32 elements per chunk (bytes i: elements i and i + 16), byte formats 16.
template <DType F>
inline constexpr bool kNibbles = F == DType::kQ4_G128 || F == DType::kQ4_0;

// The scale word of chunk c from a row of the scale plane (planar_weights.hpp).
template <DType F>
__device__ inline std::uint32_t load_scale(const std::uint8_t* row_scales, std::int64_t c) {
  if constexpr (F == DType::kFP8_E4M3 || F == DType::kQ4_G128) {
    return __ldg(reinterpret_cast<const std::uint32_t*>(row_scales) + c / 4);  // 4 chunks per block / group
  } else if constexpr (F == DType::kQ8_0) {
    return __ldg(reinterpret_cast<const unsigned short*>(row_scales) + c / 2);  // 2 chunks per block
  } else {
    return __ldg(reinterpret_cast<const unsigned short*>(row_scales) + c);  // a block per chunk
  }
}

__device__ inline float dot4(const float w[4], const float4& x, float acc) {
  acc = fmaf(w[0], x.x, acc);
  acc = fmaf(w[1], x.y, acc);
  acc = fmaf(w[2], x.z, acc);
  return fmaf(w[3], x.w, acc);
}

// A launch: up to kMaxPlanarTargets matrices (same format and k) reading the same rows of x,
// their blocks of outputs numbered one after the other, and what the epilogue writes.
struct GroupArgs {
  struct Target {
    const std::uint8_t* data;
    std::int64_t n;
    PlanarGeometry g;
    float* y;
    std::int64_t ldy;
  } t[kMaxPlanarTargets];
  unsigned first_block[kMaxPlanarTargets + 1];
  int count;
  const float* x;
  std::int64_t ldx;
  PlanarEpilogue kind;
  const float* residual;
  std::int64_t ld_residual;
  float* out;
  std::int64_t ld_out;
};

// The block's kOutputs outputs from j0 of each of kMats matrices (targets[m]), over the tile's
// kRows rows of x, summed over the block into totals[(m * kOutputs + o) * kRows + r]. One order
// of float sums per output whatever the launch (grouped, fused or alone): the same bits.
template <DType F, int kRows, bool kVector, int kMats>
__device__ void accumulate_outputs(const GroupArgs& a, const int (&targets)[kMats], std::int64_t j0, float* totals) {
  const std::int64_t chunks = a.t[targets[0]].g.code_row_bytes / 16;
  float acc[kMats][kOutputs][kRows];
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
#pragma unroll
    for (int o = 0; o < kOutputs; ++o) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[m][o][r] = 0.0f;
    }
  }
  for (std::int64_t c = threadIdx.x; c < chunks; c += kThreads) {
    uint4 w[kMats][kOutputs];
    std::uint32_t s[kMats][kOutputs];
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      const GroupArgs::Target& tg = a.t[targets[m]];
#pragma unroll
      for (int o = 0; o < kOutputs; ++o) {
        const std::int64_t j = j0 + o < tg.n ? j0 + o : tg.n - 1;  // past n: the last row again, not stored
        w[m][o] = load_weights(tg.data + j * tg.g.code_row_bytes + 16 * c);
        s[m][o] = load_scale<F>(tg.data + tg.g.scales_of(j), c);
      }
    }
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        if constexpr (!kNibbles<F>) {
          float wf[kOutputs][4];
#pragma unroll
          for (int o = 0; o < kOutputs; ++o) {
            if constexpr (F == DType::kFP8_E4M3) {
              decode_fp8x4(word_of(w[m][o], t), __uint_as_float(s[m][o]), wf[o]);
            } else {
              decode_q8x4(word_of(w[m][o], t), half_bits_to_float(s[m][o]), wf[o]);
            }
          }
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            const float4 xv = load_x4<kVector>(a.x + r * a.ldx + 16 * c + 4 * t);
#pragma unroll
            for (int o = 0; o < kOutputs; ++o) acc[m][o][r] = dot4(wf[o], xv, acc[m][o][r]);
          }
        } else {
          float low[kOutputs][4], high[kOutputs][4];
#pragma unroll
          for (int o = 0; o < kOutputs; ++o) {
            // INT4 g128: the zero nibble in bits 16-19; Q4_0: zero 8
            const float zero = F == DType::kQ4_G128 ? static_cast<float>((s[m][o] >> 16) & 15u) : 8.0f;
            decode_q4x8(word_of(w[m][o], t), half_bits_to_float(s[m][o]), 8388608.0f + zero, low[o], high[o]);
          }
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            const float* xr = a.x + r * a.ldx + 32 * c + 4 * t;
            const float4 xl = load_x4<kVector>(xr), xh = load_x4<kVector>(xr + 16);
#pragma unroll
            for (int o = 0; o < kOutputs; ++o) acc[m][o][r] = dot4(high[o], xh, dot4(low[o], xl, acc[m][o][r]));
          }
        }
      }
    }
  }
  constexpr int kTotals = kMats * kOutputs * kRows;
  __shared__ float partial[kWarps][kTotals];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
#pragma unroll
    for (int o = 0; o < kOutputs; ++o) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float v = warp_sum(acc[m][o][r]);
        if (lane == 0) partial[warp][(m * kOutputs + o) * kRows + r] = v;
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kTotals; i += kThreads) {
    float sum = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) sum += partial[wi][i];
    totals[i] = sum;
  }
  __syncthreads();
}

// Plain and grouped matmuls, and kAdd (one target: out = y + residual as well).
template <DType F, int kRows, bool kVector>
__global__ void __launch_bounds__(kThreads) planar_group_kernel(const GroupArgs a) {
  int target = 0;
  while (target + 1 < a.count && blockIdx.x >= a.first_block[target + 1]) ++target;
  const GroupArgs::Target& tg = a.t[target];
  const std::int64_t j0 = static_cast<std::int64_t>(blockIdx.x - a.first_block[target]) * kOutputs;
  __shared__ float totals[kOutputs * kRows];
  const int targets[1] = {target};
  accumulate_outputs<F, kRows, kVector, 1>(a, targets, j0, totals);
  for (int i = threadIdx.x; i < kOutputs * kRows; i += kThreads) {
    const std::int64_t j = j0 + i / kRows;
    const int r = i % kRows;
    if (j >= tg.n) continue;
    const float y = totals[i];
    tg.y[r * tg.ldy + j] = y;
    if (a.kind == PlanarEpilogue::kAdd) a.out[r * a.ld_out + j] = y + a.residual[r * a.ld_residual + j];
  }
}

// Gate (target 0) and up (target 1) outputs j0.. together: both written, then swiglu(gate, up).
template <DType F, int kRows, bool kVector>
__global__ void __launch_bounds__(kThreads) planar_swiglu_kernel(const GroupArgs a) {
  const std::int64_t j0 = static_cast<std::int64_t>(blockIdx.x) * kOutputs;
  __shared__ float totals[2 * kOutputs * kRows];
  const int targets[2] = {0, 1};
  accumulate_outputs<F, kRows, kVector, 2>(a, targets, j0, totals);
  for (int i = threadIdx.x; i < kOutputs * kRows; i += kThreads) {
    const std::int64_t j = j0 + i / kRows;
    const int r = i % kRows;
    if (j >= a.t[0].n) continue;
    const float gate = totals[i], up = totals[kOutputs * kRows + i];
    a.t[0].y[r * a.t[0].ldy + j] = gate;
    a.t[1].y[r * a.t[1].ldy + j] = up;
    a.out[r * a.ld_out + j] = swiglu_value(gate, up);  // last: out may be the gate's buffer
  }
}

template <DType F>
__global__ void planar_embed_kernel(const std::uint8_t* __restrict__ data, PlanarGeometry g, std::int64_t cols,
                                    const std::int32_t* __restrict__ ids, float* __restrict__ out, std::int64_t ldo) {
  const std::int64_t id = ids[blockIdx.x];
  const std::uint8_t* codes = data + id * g.code_row_bytes;
  const std::uint8_t* scales = data + g.scales_of(id);
  float* dst = out + static_cast<std::int64_t>(blockIdx.x) * ldo;
  for (std::int64_t e = threadIdx.x; e < cols; e += blockDim.x) dst[e] = planar_element<F>(codes, scales, e);
}

template <DType F, int kRows>
void launch_tile(const GroupArgs& a, unsigned blocks, cudaStream_t stream) {
  const bool vector = reinterpret_cast<std::uintptr_t>(a.x) % 16 == 0 && a.ldx % 4 == 0;
  if (a.kind == PlanarEpilogue::kSwiGlu) {
    if constexpr (kRows <= kMaxSwiGluTileRows) {
      if (vector) {
        planar_swiglu_kernel<F, kRows, true><<<blocks, kThreads, 0, stream>>>(a);
      } else {
        planar_swiglu_kernel<F, kRows, false><<<blocks, kThreads, 0, stream>>>(a);
      }
    }
  } else if (vector) {
    planar_group_kernel<F, kRows, true><<<blocks, kThreads, 0, stream>>>(a);
  } else {
    planar_group_kernel<F, kRows, false><<<blocks, kThreads, 0, stream>>>(a);
  }
}

// Tiles of rows: every row pointer of the launch moved to the tile's first row.
template <DType F>
void launch_format(GroupArgs a, std::int64_t m, cudaStream_t stream) {
  const int max_rows = a.kind == PlanarEpilogue::kSwiGlu ? kMaxSwiGluTileRows : kMaxTileRows;
  const unsigned blocks = a.kind == PlanarEpilogue::kSwiGlu ? a.first_block[1] : a.first_block[a.count];
  const GroupArgs base = a;
  for (std::int64_t r0 = 0; r0 < m; r0 += max_rows) {
    const int rows = static_cast<int>(std::min<std::int64_t>(max_rows, m - r0));
    a.x = base.x + r0 * base.ldx;
    for (int t = 0; t < a.count; ++t) a.t[t].y = base.t[t].y + r0 * base.t[t].ldy;
    if (base.residual != nullptr) a.residual = base.residual + r0 * base.ld_residual;
    if (base.out != nullptr) a.out = base.out + r0 * base.ld_out;
    [&]<int... kR>(std::integer_sequence<int, kR...>) {
      static_cast<void>(((rows == kR + 1 ? (launch_tile<F, kR + 1>(a, blocks, stream), true) : false) || ...));
    }(std::make_integer_sequence<int, kMaxTileRows>{});
  }
}

}  // namespace

void launch_planar_group(DType format, std::span<const PlanarTarget> targets, std::int64_t k, const float* x,
                         std::int64_t ldx, std::int64_t m, const PlanarEpilogueArgs& epilogue, cudaStream_t stream) {
  if (m <= 0 || targets.empty()) return;
  GroupArgs a{};
  a.count = static_cast<int>(std::min<std::size_t>(targets.size(), kMaxPlanarTargets));
  unsigned blocks = 0;
  for (int t = 0; t < a.count; ++t) {
    const PlanarTarget& in = targets[static_cast<std::size_t>(t)];
    a.t[t] = {in.data, in.n, planar_geometry(format, in.n, k), in.y, in.ldy};
    a.first_block[t] = blocks;
    blocks += static_cast<unsigned>((in.n + kOutputs - 1) / kOutputs);
  }
  a.first_block[a.count] = blocks;
  a.x = x;
  a.ldx = ldx;
  a.kind = epilogue.kind;
  a.residual = epilogue.residual;
  a.ld_residual = epilogue.ld_residual;
  a.out = epilogue.out;
  a.ld_out = epilogue.ld_out;
  dispatch_planar_format(format, [&]<DType F>() { launch_format<F>(a, m, stream); });
}

void launch_planar_matmul(DType format, const std::uint8_t* data, std::int64_t n, std::int64_t k, const float* x,
                          std::int64_t ldx, std::int64_t m, float* y, std::int64_t ldy, cudaStream_t stream) {
  if (n <= 0) return;
  const PlanarTarget target{data, n, y, ldy};
  launch_planar_group(format, {&target, 1}, k, x, ldx, m, {}, stream);
}

void launch_planar_embed(DType format, const std::uint8_t* data, std::int64_t n, std::int64_t k,
                         const std::int32_t* ids, std::int64_t rows, float* out, std::int64_t ldo,
                         cudaStream_t stream) {
  if (rows <= 0) return;
  const PlanarGeometry g = planar_geometry(format, n, k);
  const auto blocks = static_cast<unsigned>(rows);
  dispatch_planar_format(format, [&]<DType F>() {
    planar_embed_kernel<F><<<blocks, 256, 0, stream>>>(data, g, k, ids, out, ldo);
  });
}

}  // namespace sitsrt::cuda
