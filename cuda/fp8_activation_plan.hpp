// How the FP8 x FP8 prefill GEMM (prefill_gemm.hpp) quantizes m rows of x (k values each) into
// its buffers: chunks of rows, each one cuBLASLt matmul, and where each chunk's E4M3 codes and
// scales go. CUDA-free, so the CPU test suite checks the plans (tests/unit/cuda_formats_test.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace sitsrt::cuda {

struct Fp8ActivationChunk {
  std::int64_t first = 0;  // rows [first, first + rows) of x and y
  std::int64_t rows = 0;
  std::int64_t codes_offset = 0;   // bytes into the codes buffer: rows x k packed
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
// not. Where m is no multiple of 8 the last chunk starts early enough to end at m, overlapping the
// chunk before by fewer than 8 rows (those rows computed twice: the same codes, their outputs
// written again); a single chunk's rows are split in two halves of whole 8 rows that overlap
// instead (two GEMMs of about m / 2 rows rather than one of m - m % 8 and one of 8, which would
// read the weights once more for 8 rows). Needs m >= 8.
// Otherwise a scale per row (scales[offset + r]), chunks of any size.
// Resident plans keep every row's codes at its own place (codes_offset = first * k: 128-byte
// aligned where k is a multiple of 128) and each chunk's scales after the chunk before's; else
// each chunk goes at the buffers' starts. code_bytes / scale_floats: the buffers' sizes.
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
  const auto whole8 = [](std::int64_t rows) { return (rows + 7) / 8 * 8; };
  if (!blocks || rest % 8 == 0) {
    if (rest > 0) plan.chunks.push_back({first, rest});
  } else if (first > 0) {  // ends at m, reaching back into the chunk before
    plan.chunks.push_back({m - whole8(rest), whole8(rest)});
  } else {  // two halves of whole 8 rows (m < cap, so each fits)
    const std::int64_t half = whole8((m + 1) / 2);
    plan.chunks.push_back({0, half});
    plan.chunks.push_back({m - half, half});
  }
  std::int64_t scales_end = 0;
  for (Fp8ActivationChunk& c : plan.chunks) {
    c.codes_offset = c.first * k;
    c.scales_offset = scales_end;
    scales_end += c.rows * scales_per_row;
  }
  plan.resident = m * k <= code_bytes && scales_end <= scale_floats;
  if (!plan.resident) {  // one chunk at a time at the buffers' starts (rows * k <= code_bytes: cap)
    for (Fp8ActivationChunk& c : plan.chunks) c.codes_offset = c.scales_offset = 0;
  }
  return plan;
}

}  // namespace sitsrt::cuda
