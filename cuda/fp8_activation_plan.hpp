// How the FP8 x FP8 prefill GEMM (prefill_gemm.hpp) quantizes m rows of x (k values each) into
// its buffers: chunks of rows, each one cuBLASLt matmul, and where each chunk's E4M3 codes and
// scales go. CUDA-free, so the CPU test suite checks the plans (tests/unit/cuda_formats_test.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace sitsrt::cuda {

// cuBLASLt assumes 256-byte aligned operands unless told otherwise: every chunk's codes start so
// (the codes buffer itself 256-byte aligned).
inline constexpr std::int64_t kFp8CodesAlignment = 256;

struct Fp8ActivationChunk {
  std::int64_t first = 0;  // rows [first, first + rows) of x and y
  std::int64_t rows = 0;
  std::int64_t codes_offset = 0;   // bytes into the codes buffer (rows x k packed), 256-byte aligned
  std::int64_t scales_offset = 0;  // floats into the scales buffer
};

struct Fp8ActivationPlan {
  std::vector<Fp8ActivationChunk> chunks;  // empty: no plan fits (the BF16 GEMM runs)
  // Every chunk's codes and scales in the buffers at once, at offsets fixed by (blocks, m, k): the
  // next GEMM over the same x may use them as they are.
  bool resident = false;
};

// blocks: a scale per block of 128 of a row (k a multiple of 128), laid a column of the chunk's
// grid per row (scales[offset + b * rows + r]), in chunks of whole 8 rows: cuBLASLt's 128-element
// block scaling of B takes a multiple of 8 columns (NVIDIA Transformer Engine refuses others),
// and at 8-row multiples the grid's column stride is the same whether a library pads it to 4 or
// not. Rows past the last whole 8 are covered by a window of the last 8 rows, which recomputes
// up to 7 rows of the chunk before (the same codes; their outputs written again). Needs m >= 8.
// Otherwise a scale per row (scales[offset + r]), chunks of any size.
// code_bytes / scale_floats: the buffers' sizes.
inline Fp8ActivationPlan plan_fp8_activations(bool blocks, std::int64_t m, std::int64_t k, std::int64_t code_bytes,
                                              std::int64_t scale_floats) {
  Fp8ActivationPlan plan;
  if (m <= 0 || k <= 0 || (blocks && (k % 128 != 0 || m < 8))) return plan;
  const std::int64_t scales_per_row = blocks ? k / 128 : 1;
  std::int64_t cap = std::min(code_bytes / k, scale_floats / scales_per_row);  // rows a chunk may have
  if (blocks) cap = cap / 8 * 8;
  if (cap < 1) return plan;
  std::int64_t first = 0;
  for (; m - first >= cap; first += cap) plan.chunks.push_back({first, cap});
  const std::int64_t rest = m - first;
  if (!blocks && rest > 0) plan.chunks.push_back({first, rest});
  if (blocks && rest >= 8) plan.chunks.push_back({first, rest / 8 * 8});
  const bool window = blocks && rest % 8 != 0;
  if (window) plan.chunks.push_back({m - 8, 8});
  // Resident: a chunk's codes at its rows' own place (chunks start at multiples of 8 rows of a
  // multiple of 128 bytes: 1024-byte aligned), a window's after every row at the next 256 bytes
  // (its rows' own place, m - 8 rows in, may be 128-byte aligned only); each chunk's scales after
  // the chunk before's. A single chunk is resident at the buffers' starts; else where all fit.
  std::int64_t codes_end = 0, scales_end = 0;
  for (std::size_t i = 0; i < plan.chunks.size(); ++i) {
    Fp8ActivationChunk& c = plan.chunks[i];
    const bool last_window = window && i + 1 == plan.chunks.size();
    c.codes_offset =
        last_window ? (m * k + kFp8CodesAlignment - 1) / kFp8CodesAlignment * kFp8CodesAlignment : c.first * k;
    c.scales_offset = scales_end;
    codes_end = std::max(codes_end, c.codes_offset + c.rows * k);
    scales_end += c.rows * scales_per_row;
  }
  plan.resident = codes_end <= code_bytes && scales_end <= scale_floats;
  if (!plan.resident) {  // one chunk at a time at the buffers' starts (rows * k <= code_bytes: cap)
    for (Fp8ActivationChunk& c : plan.chunks) c.codes_offset = c.scales_offset = 0;
  }
  return plan;
}

}  // namespace sitsrt::cuda
