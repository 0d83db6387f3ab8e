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
//
// Channel scales: after centering, K channels still differ widely in magnitude (Gemma 3's heads
// more than SmolLM2's), and the largest set every int4 group's scale even after the Hadamard
// rotation. Each channel is divided by s = (rms of its rope pair / mean rms of the layer)^(1/3)
// and attention multiplies q by s (exact: q.k = (q s).(k / s)). A pair's magnitude is the same
// at every position (rope only turns it), so scales measured on a short text hold for the whole
// context. The cube root evens the channels out part of the way: full equalization (power 1)
// raised int4 KLD on both real models, 1/3 halved Gemma 3's and left SmolLM2's within 5%
// (docs/performance.md, two texts).
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

// Per K channel of a layer (n_head_kv * head_dim): the channel rope pairs it with (itself for
// channels past rope_dims), in the same head.
[[nodiscard]] std::vector<std::int32_t> kv_rope_mates(const ModelSpec& spec, bool neox);

struct KCentering {
  std::vector<float> offsets;  // n_layers x kv_width
  std::vector<float> scales;   // n_layers x kv_width, > 0
};

// Runs `tokens` through the plan's graph into a float KV cache of its own and returns, per
// layer and K channel, the offset: the mean key over positions 1 .. (position 0, usually BOS,
// is an outlier in many models), zero where `mask` forbids centering; and the scale: with r(c)
// the rms of (key - offset) of channel c over those positions and R(c) = sqrt((r(c)^2 +
// r(mate)^2) / 2) its pair's, (max(R(c), 1e-3 m) / m)^(1/3) where m is the layer's mean R. Each
// value is rounded to an f16 one so the results do not hang on the last bits of the run's
// arithmetic. Needs >= 2 tokens within the plan's vocabulary and context, `mates` from
// kv_rope_mates; uses plan.memory.max_tokens tokens per step.
[[nodiscard]] KCentering measure_k_centering(const ExecutionPlan& plan, std::span<const std::int32_t> tokens,
                                             const std::vector<bool>& mask, std::span<const std::int32_t> mates);

}  // namespace sitsrt
