// K centering: per layer, a constant vector subtracted from every key before it is quantized.
// K projections carry large per-channel means (a few channels far from zero for every token);
// an int8/int4 scale sized for them wastes its levels on the other channels. Subtracting a
// constant c from every key changes each score q.k of a query by the same q.c, which softmax
// cancels, so attention needs no correction and the stored values cost nothing extra.
//
// RoPE rotates a key's channel pairs by position-dependent angles, so a pre-rope mean m shows up
// after rope as R(p)m: a constant offset only fits pairs that hardly turn over the context. A
// pair with frequency theta is centered only when theta * (context_length - 1) <= pi/3: then
// |R(p)m - m| <= |m| at every position, so centering never makes a key larger than leaving it
// (channels past rope_dims do not rotate and are always centered). The scaling of long-context
// rope variants (linear, YaRN, llama3, frequency factors) only slows rotation, so the unscaled
// frequency is the cautious one to test.
#pragma once

#include "model/model_spec.hpp"
#include "runtime/executor.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace sitsrt {

// The English text whose keys the offsets are measured on (ordinary prose, ~165 tokens with
// SmolLM2's or Gemma 3's tokenizer), and how many of its tokens the engine runs: the large
// channel means are the same in every token, so 128 positions estimate them as well as 320 did
// (int4 K+V KLD, docs/performance.md) at 40% of the load-time prefill.
[[nodiscard]] std::string_view kv_centering_text() noexcept;
inline constexpr std::size_t kKvCenteringTokens = 128;

// Per layer and K channel (n_layer x n_head_kv * head_dim, head-major as K rows): whether that
// channel may be centered for a context of `context_length` positions (see above). `neox`: the
// rope pairs are (i, i + rope_dims / 2) rather than (2i, 2i + 1).
[[nodiscard]] std::vector<bool> kv_centering_mask(const ModelSpec& spec, bool neox, std::int64_t context_length);

// Runs `tokens` through the plan's graph into a float KV cache of its own and returns, per
// layer and K channel, the mean key over positions 1 .. (position 0, usually BOS, is an outlier
// in many models), zero where `mask` forbids centering, each rounded to an f16 value so the
// offsets do not hang on the last bits of the run's arithmetic. Needs >= 2 tokens within the
// plan's vocabulary and context; uses plan.memory.max_tokens tokens per step.
[[nodiscard]] std::vector<float> measure_k_offsets(const ExecutionPlan& plan, std::span<const std::int32_t> tokens,
                                                   const std::vector<bool>& mask);

}  // namespace sitsrt
