// The device's logit summaries (kernels/logit_summary.cu) as they cross to the host: per row a
// fixed header and then k (id, logit) pairs, best first; and the order key the top-k selection
// ranks by. Shared by the kernel and CudaBackend, and host-testable (cuda_formats_test).
#pragma once

#include "core/host_device.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cuda {

// Most best ids a row's device summary holds (BackendInfo::logit_summary_k of the CUDA backend):
// the sampler's top_k + 1 up to 255, top_logprobs up to 64 (generation.hpp).
inline constexpr std::int64_t kMaxSummaryBest = 256;

struct SummaryHeader {
  double exp_sum;       // LogitSummary::exp_sum
  double exp_weighted;  // LogitSummary::exp_weighted
  float max;            // largest non-NaN logit (-inf when there is none)
  std::int32_t argmax;  // its first id, -1 when every logit is NaN
  std::int32_t count;   // pairs that follow: min(k, numbers in the row, or in the chunk of a chunk record)
  std::int32_t pad;
};
static_assert(sizeof(SummaryHeader) == 32);

struct SummaryPair {
  std::int32_t id;
  float logit;
};

// Bytes of one row's record with room for k pairs (8-byte aligned, for the next header).
SITSRT_HOST_DEVICE std::size_t summary_record_bytes(std::int64_t k) {
  return sizeof(SummaryHeader) + static_cast<std::size_t>(k) * sizeof(SummaryPair);
}

// A key whose ascending order is the logits' descending order, -0 and +0 one key (the CPU's
// ranking: cpu::top_k_logits); NaN has none (callers skip it). Positive floats: the bits with the
// sign bit set, inverted; negative ones: their bits (larger magnitude, larger key).
SITSRT_HOST_DEVICE std::uint32_t descending_key(float logit) {
  const std::uint32_t bits = hd::float_to_bits(logit == 0.0f ? 0.0f : logit);
  return (bits & 0x80000000u) != 0 ? bits : ~(bits | 0x80000000u);
}

}  // namespace sitsrt::cuda
