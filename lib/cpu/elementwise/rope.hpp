// Rotary position embedding, applied in place, with the context-extension schemes that change
// its per-dimension frequencies: linear interpolation, llama3 per-dimension factors and YaRN.
#pragma once

#include "cpu/cpu_context.hpp"

#include <cstdint>

namespace sitsrt::cpu {

enum class RopeStyle {
  kNormal,  // rotates adjacent pairs (2i, 2i+1): Llama in GGUF / llama2.c
  kNeox,    // rotates (i, i + rot_dims/2): GPT-NeoX, Qwen, Gemma
};

// YaRN (Peng et al. 2023, "YaRN: Efficient Context Window Extension"): pair j's angle blends the
// interpolated (pos * freq_scale * inv_freq_j) and the original (pos * inv_freq_j) angle with a
// ramp over the pair index: pairs that turn more than beta_fast times over original_context
// keep their frequency, pairs that turn fewer than beta_slow times are interpolated. cos and
// sin are multiplied by mscale = attn_factor * (1 + 0.1 ln(1/freq_scale)) (the paper's
// attention temperature sqrt(1/t), applied to both q and k).
struct YarnParams {
  bool enabled = false;
  double original_context = 0;  // training context before extension
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attn_factor = 1.0;
};

// llama3-style frequency scaling from its configuration parameters (the GGUF converter stores
// the same thing precomputed as per-pair factors, `freq_factors` below): pairs with a
// wavelength below original_context / high_freq_factor keep their frequency, those above
// original_context / low_freq_factor are divided by `factor`, the band between is blended.
struct Llama3Params {
  bool enabled = false;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_context = 8192.0;
};

struct RopeParams {
  std::int64_t head_dim = 0;
  std::int64_t rot_dims = 0;            // dims rotated from the start of each head (<= head_dim, even)
  float freq_base = 10000.0f;           // theta_i = pos * freq_scale * base^(-2i/rot_dims)
  float freq_scale = 1.0f;              // linear interpolation: 1 / factor
  const float* freq_factors = nullptr;  // optional per-pair divisor (rot_dims/2 values), e.g. llama3 scaling
  RopeStyle style = RopeStyle::kNormal;
  YarnParams yarn;      // with enabled, freq_scale is the interpolation ratio 1 / factor
  Llama3Params llama3;  // computes divisors like freq_factors (use one or the other)
};

// The per-pair inverse frequencies (rot_dims/2 values, radians per position) and the cos/sin
// multiplier the parameters describe; used by the kernel and exposed for tests.
void rope_inverse_frequencies(const RopeParams& params, double* inv_freq, double* mscale);

// x: `rows` rows (one token each, row stride ldx) of n_heads * head_dim floats.
// positions[i] is the absolute position of row i (any order). Dims rot_dims..head_dim-1 of
// each head are left untouched. Angles and their cos/sin are computed in double and rounded
// to float once, so large positions lose no precision; the rotation itself is float.
// Rows are split across threads when rows > 1. Throws kInvalidArgument for an odd rot_dims,
// rot_dims > head_dim or freq_base <= 0.
void rope(CpuContext& ctx, float* x, std::int64_t ldx, std::int64_t rows, std::int64_t n_heads,
          const std::int32_t* positions, const RopeParams& params);

}  // namespace sitsrt::cpu
