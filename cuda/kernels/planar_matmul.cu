// Decode matmul over planar FP8 E4M3 / INT4 g128 weights (planar_weights.hpp). Memory-bound at
// 1-16 rows, so the kernel is built around the weight stream:
//   - a block of 128 threads owns kOutputs consecutive outputs and splits their rows' 16-byte
//     chunks among its threads (split-K inside the block, one reduction at the end), so a
//     4096-wide row keeps 128 loads in flight and short matrices still fill the GPU;
//   - each thread loads one chunk of each of its kOutputs weight rows (16-byte non-allocating
//     loads), so one load of x serves kOutputs rows;
//   - codes become floats without the F2F pipe: FP8 through cvt e4m3x2 -> f16x2 and f16 -> f32
//     adds, INT4 through a byte permute into 2^23 + q and one subtraction of 2^23 + zero;
//   - every decoded weight is d * w rounded once, the value decode_element gives, so each
//     product equals the CPU reference's; only the order of the float sums differs.
// Rows of x are taken 8 at a time (tiles), as in matmul.cu.
#include "cuda_backend/kernels/launch.hpp"
#include "cuda_backend/kernels/row_tiles.hpp"
#include "cuda_backend/planar_weights.hpp"

#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace sitsrt::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kOutputs = 4;  // weight rows per block

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

__device__ inline float dot4(const float w[4], const float4& x, float acc) {
  acc = fmaf(w[0], x.x, acc);
  acc = fmaf(w[1], x.y, acc);
  acc = fmaf(w[2], x.z, acc);
  return fmaf(w[3], x.w, acc);
}

// y[r][j] = sum_e x[r][e] * W[j][e] for the tile's kRows rows and outputs j of this block.
template <DType F, int kRows, bool kVector>
__global__ void __launch_bounds__(kThreads)
    planar_matmul_kernel(const std::uint8_t* __restrict__ data, std::int64_t n, PlanarGeometry g,
                         const float* __restrict__ x, std::int64_t ldx, float* __restrict__ y, std::int64_t ldy) {
  const std::int64_t j0 = static_cast<std::int64_t>(blockIdx.x) * kOutputs;
  const auto* scales = reinterpret_cast<const std::uint32_t*>(data + g.scales_offset);
  const std::int64_t chunks = g.code_row_bytes / 16;
  float acc[kOutputs][kRows];
#pragma unroll
  for (int o = 0; o < kOutputs; ++o) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[o][r] = 0.0f;
  }
  for (std::int64_t c = threadIdx.x; c < chunks; c += kThreads) {
    uint4 w[kOutputs];
    std::uint32_t s[kOutputs];
#pragma unroll
    for (int o = 0; o < kOutputs; ++o) {
      const std::int64_t j = j0 + o < n ? j0 + o : n - 1;  // past n: the last row again, not stored
      w[o] = load_weights(data + j * g.code_row_bytes + 16 * c);
      s[o] = __ldg(scales + j * g.scale_row_words + c / 4);  // 4 chunks per block / group
    }
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      if constexpr (F == DType::kFP8_E4M3) {
        float wf[kOutputs][4];
#pragma unroll
        for (int o = 0; o < kOutputs; ++o) decode_fp8x4(word_of(w[o], t), __uint_as_float(s[o]), wf[o]);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float4 xv = load_x4<kVector>(x + r * ldx + 16 * c + 4 * t);
#pragma unroll
          for (int o = 0; o < kOutputs; ++o) acc[o][r] = dot4(wf[o], xv, acc[o][r]);
        }
      } else {
        float low[kOutputs][4], high[kOutputs][4];
#pragma unroll
        for (int o = 0; o < kOutputs; ++o) {
          const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(s[o] & 0xffffu)));
          const float bias = 8388608.0f + static_cast<float>((s[o] >> 16) & 15u);
          decode_q4x8(word_of(w[o], t), d, bias, low[o], high[o]);
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float* xr = x + r * ldx + 32 * c + 4 * t;
          const float4 xl = load_x4<kVector>(xr), xh = load_x4<kVector>(xr + 16);
#pragma unroll
          for (int o = 0; o < kOutputs; ++o) acc[o][r] = dot4(high[o], xh, dot4(low[o], xl, acc[o][r]));
        }
      }
    }
  }
  __shared__ float partial[kWarps][kOutputs * kRows];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 0; o < kOutputs; ++o) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float v = warp_sum(acc[o][r]);
      if (lane == 0) partial[warp][o * kRows + r] = v;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kOutputs * kRows; i += kThreads) {
    float sum = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) sum += partial[wi][i];
    const std::int64_t j = j0 + i / kRows;
    if (j < n) y[(i % kRows) * ldy + j] = sum;
  }
}

template <DType F>
__global__ void planar_embed_kernel(const std::uint8_t* __restrict__ data, PlanarGeometry g, std::int64_t cols,
                                    const std::int32_t* __restrict__ ids, float* __restrict__ out, std::int64_t ldo) {
  const std::int64_t id = ids[blockIdx.x];
  const std::uint8_t* codes = data + id * g.code_row_bytes;
  const std::uint8_t* scales = data + g.scales_offset + id * g.scale_row_words * 4;
  float* dst = out + static_cast<std::int64_t>(blockIdx.x) * ldo;
  for (std::int64_t e = threadIdx.x; e < cols; e += blockDim.x) dst[e] = planar_element<F>(codes, scales, e);
}

template <DType F, int kRows>
void launch_tile(const std::uint8_t* data, std::int64_t n, const PlanarGeometry& g, const float* x, std::int64_t ldx,
                 float* y, std::int64_t ldy, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((n + kOutputs - 1) / kOutputs);
  const bool vector = reinterpret_cast<std::uintptr_t>(x) % 16 == 0 && ldx % 4 == 0;
  if (vector) {
    planar_matmul_kernel<F, kRows, true><<<blocks, kThreads, 0, stream>>>(data, n, g, x, ldx, y, ldy);
  } else {
    planar_matmul_kernel<F, kRows, false><<<blocks, kThreads, 0, stream>>>(data, n, g, x, ldx, y, ldy);
  }
}

template <DType F>
void launch_format(const std::uint8_t* data, std::int64_t n, std::int64_t k, const float* x, std::int64_t ldx,
                   std::int64_t m, float* y, std::int64_t ldy, cudaStream_t stream) {
  const PlanarGeometry g = planar_geometry(F, n, k);
  for_each_row_tile(m, x, ldx, y, ldy, [&](auto rows, const float* xt, float* yt) {
    launch_tile<F, decltype(rows)::value>(data, n, g, xt, ldx, yt, ldy, stream);
  });
}

}  // namespace

void launch_planar_matmul(DType format, const std::uint8_t* data, std::int64_t n, std::int64_t k, const float* x,
                          std::int64_t ldx, std::int64_t m, float* y, std::int64_t ldy, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return;
  if (format == DType::kFP8_E4M3) {
    launch_format<DType::kFP8_E4M3>(data, n, k, x, ldx, m, y, ldy, stream);
  } else if (format == DType::kQ4_G128) {
    launch_format<DType::kQ4_G128>(data, n, k, x, ldx, m, y, ldy, stream);
  }
}

void launch_planar_embed(DType format, const std::uint8_t* data, std::int64_t n, std::int64_t k,
                         const std::int32_t* ids, std::int64_t rows, float* out, std::int64_t ldo,
                         cudaStream_t stream) {
  if (rows <= 0) return;
  const PlanarGeometry g = planar_geometry(format, n, k);
  const auto blocks = static_cast<unsigned>(rows);
  if (format == DType::kFP8_E4M3) {
    planar_embed_kernel<DType::kFP8_E4M3><<<blocks, 256, 0, stream>>>(data, g, k, ids, out, ldo);
  } else if (format == DType::kQ4_G128) {
    planar_embed_kernel<DType::kQ4_G128><<<blocks, 256, 0, stream>>>(data, g, k, ids, out, ldo);
  }
}

}  // namespace sitsrt::cuda
