// Conversions feeding the tensor-core prefill GEMMs (prefill_gemm.hpp): weight rows of any
// format decoded to BF16 (each value decode_element's float, rounded once to nearest even), float
// activation rows to packed BF16, and float activation rows to E4M3 with a scale per row (the
// FP8 GEMM's per-token scales) or per block of 128 of a row (its 128 x 128 block-scaled weights').
#include "cuda_backend/device_formats.hpp"
#include "cuda_backend/kernels/format_dispatch.hpp"
#include "cuda_backend/kernels/grid_dependency.hpp"
#include "cuda_backend/kernels/launch.hpp"
#include "cuda_backend/kernels/planar_units.hpp"
#include "cuda_backend/planar_weights.hpp"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstring>

namespace sitsrt::cuda {
namespace {

constexpr int kThreads = 256;

// One block per weight row: out row r = row (row0 + r) of the matrix, k values. Planar rows a
// unit a thread (the decode kernels' lane logic: one 16-byte code load per 16 or 32 weights, the
// side data once a unit), 4 weights an 8-byte store; stored rows 8 elements a thread.
template <DType F, bool kPlanar>
__global__ void weights_to_bf16_kernel(const std::uint8_t* __restrict__ data, std::int64_t row_bytes, std::int64_t n,
                                       std::int64_t k, std::int64_t row0, __nv_bfloat16* __restrict__ out) {
  begin_dependent_grid();
  const std::int64_t j = row0 + blockIdx.x;
  __nv_bfloat16* dst = out + static_cast<std::int64_t>(blockIdx.x) * k;
  if constexpr (kPlanar) {
    const PlanarGeometry g = planar_geometry(F, n, k);
    const std::uint8_t* codes = data + j * g.code_row_bytes;
    const std::uint8_t* side = data + g.scales_of(j);
    for (std::int64_t u = threadIdx.x; u < g.units; u += kThreads) {
      uint4 w[1][planar::kLoads<F>];
      planar::Side<F> s[1];
      planar::load_codes<F>(codes, u, w[0]);
      s[0] = planar::load_side<F>(side, u);
      planar::decode_unit<F, 1>(w, s, u, [&](std::int64_t offset, const float (&wf)[1][4]) {
        // offset a multiple of 4, rows k (a multiple of the unit) apart: 8-byte aligned
        const __nv_bfloat162 lo = __floats2bfloat162_rn(wf[0][0], wf[0][1]);
        const __nv_bfloat162 hi = __floats2bfloat162_rn(wf[0][2], wf[0][3]);
        uint2 pair;
        std::memcpy(&pair.x, &lo, sizeof pair.x);  // (not a pointer cast: host builds alias-analyse it)
        std::memcpy(&pair.y, &hi, sizeof pair.y);
        *reinterpret_cast<uint2*>(dst + offset) = pair;
      });
    }
  } else {
    const std::uint8_t* row = data + j * row_bytes;
    const std::int64_t chunks = k / 8;
    for (std::int64_t c = threadIdx.x; c < chunks; c += kThreads) {
      float v[8];
      decode8<F>(row, 8 * c, v);
#pragma unroll
      for (int i = 0; i < 8; ++i) dst[8 * c + i] = __float2bfloat16_rn(v[i]);
    }
    for (std::int64_t e = chunks * 8 + threadIdx.x; e < k; e += kThreads) {
      dst[e] = __float2bfloat16_rn(decode_element<F>(row, e));
    }
  }
}

__global__ void floats_to_bf16_kernel(const float* __restrict__ x, std::int64_t ldx, std::int64_t k,
                                      __nv_bfloat16* __restrict__ out) {
  begin_dependent_grid();
  const float* src = x + static_cast<std::int64_t>(blockIdx.x) * ldx;
  __nv_bfloat16* dst = out + static_cast<std::int64_t>(blockIdx.x) * k;
  for (std::int64_t e = threadIdx.x; e < k; e += kThreads) dst[e] = __float2bfloat16_rn(src[e]);
}

// One block per row: scale = the row's largest |x| / 448 (E4M3's largest finite; 1 for a row of
// zeros), codes = x / scale rounded to the nearest E4M3 (saturating), packed k bytes a row.
__global__ void floats_to_fp8_rows_kernel(const float* __restrict__ x, std::int64_t ldx, std::int64_t k,
                                          std::uint8_t* __restrict__ out, float* __restrict__ scales) {
  begin_dependent_grid();
  __shared__ float partial[kThreads / 32];
  const float* src = x + static_cast<std::int64_t>(blockIdx.x) * ldx;
  std::uint8_t* dst = out + static_cast<std::int64_t>(blockIdx.x) * k;
  float amax = 0.0f;
  for (std::int64_t e = threadIdx.x; e < k; e += kThreads) amax = fmaxf(amax, fabsf(src[e]));
  for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) amax = fmaxf(amax, partial[w]);
  const float scale = amax > 0.0f && isfinite(amax) ? amax / 448.0f : 1.0f;
  for (std::int64_t e = threadIdx.x; e < k; e += kThreads) {
    dst[e] = __nv_cvt_float_to_fp8(src[e] / scale, __NV_SATFINITE, __NV_E4M3);
  }
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
}

// One block per row, a warp per block of 128 values: the block's largest |x| / 448 (1 for a
// block of zeros or one holding an infinity: the rows' rule), each lane 4 values 32 apart.
__global__ void floats_to_fp8_blocks_kernel(const float* __restrict__ x, std::int64_t ldx, std::int64_t k,
                                            std::uint8_t* __restrict__ out, float* __restrict__ scales,
                                            std::int64_t scales_ld) {
  begin_dependent_grid();
  const std::int64_t row = blockIdx.x;
  const float* src = x + row * ldx;
  std::uint8_t* dst = out + row * k;
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (std::int64_t b = threadIdx.x / 32; b < k / 128; b += kThreads / 32) {
    float v[4];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[i] = src[b * 128 + lane + 32 * i];
      amax = fmaxf(amax, fabsf(v[i]));
    }
    for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    const float scale = amax > 0.0f && isfinite(amax) ? amax / 448.0f : 1.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) dst[b * 128 + lane + 32 * i] = __nv_cvt_float_to_fp8(v[i] / scale, __NV_SATFINITE, __NV_E4M3);
    if (lane == 0) scales[b * scales_ld + row] = scale;
  }
}

}  // namespace

void launch_weights_to_bf16(DType format, bool planar, const std::uint8_t* data, std::int64_t row_bytes, std::int64_t n,
                            std::int64_t k, std::int64_t row0, std::int64_t rows, void* out, cudaStream_t stream) {
  if (rows <= 0) return;
  auto* dst = static_cast<__nv_bfloat16*>(out);
  const auto blocks = static_cast<unsigned>(rows);
  if (planar) {
    if (!dispatch_planar_format(format, [&]<DType F>() {
          launch_kernel(weights_to_bf16_kernel<F, true>, blocks, kThreads, 0, stream, data, row_bytes, n, k, row0, dst);
        })) {
      raise_unsupported_format(format, "planar to BF16");
    }
    return;
  }
  if (!dispatch_weight_format(format, [&]<DType F>() {
        launch_kernel(weights_to_bf16_kernel<F, false>, blocks, kThreads, 0, stream, data, row_bytes, n, k, row0, dst);
      })) {
    raise_unsupported_format(format, "weights to BF16");
  }
}

void launch_floats_to_bf16(const float* x, std::int64_t ldx, std::int64_t m, std::int64_t k, void* out,
                           cudaStream_t stream) {
  if (m <= 0) return;
  launch_kernel(floats_to_bf16_kernel, static_cast<unsigned>(m), kThreads, 0, stream, x, ldx, k,
                static_cast<__nv_bfloat16*>(out));
}

void launch_floats_to_fp8_rows(const float* x, std::int64_t ldx, std::int64_t m, std::int64_t k, std::uint8_t* out,
                               float* scales, cudaStream_t stream) {
  if (m <= 0) return;
  launch_kernel(floats_to_fp8_rows_kernel, static_cast<unsigned>(m), kThreads, 0, stream, x, ldx, k, out, scales);
}

void launch_floats_to_fp8_blocks(const float* x, std::int64_t ldx, std::int64_t m, std::int64_t k, std::uint8_t* out,
                                 float* scales, std::int64_t scales_ld, cudaStream_t stream) {
  if (m <= 0) return;
  launch_kernel(floats_to_fp8_blocks_kernel, static_cast<unsigned>(m), kThreads, 0, stream, x, ldx, k, out, scales,
                scales_ld);
}

}  // namespace sitsrt::cuda
