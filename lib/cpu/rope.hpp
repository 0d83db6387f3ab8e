// Rotary position embedding, applied in place.
#pragma once

#include "cpu/cpu_context.hpp"

#include <cstdint>

namespace sitsrt::cpu {

enum class RopeStyle {
  kNormal,  // rotates adjacent pairs (2i, 2i+1): Llama in GGUF / llama2.c
  kNeox,    // rotates (i, i + rot_dims/2): GPT-NeoX, Qwen, Gemma
};

struct RopeParams {
  std::int64_t head_dim = 0;
  std::int64_t rot_dims = 0;   // dims rotated from the start of each head (<= head_dim, even)
  float freq_base = 10000.0f;  // theta_i = pos * freq_scale * base^(-2i/rot_dims)
  float freq_scale = 1.0f;
  const float* freq_factors = nullptr;  // optional per-pair divisor (rot_dims/2 values), e.g. llama3 scaling
  RopeStyle style = RopeStyle::kNormal;
};

// x: `rows` rows (one token each, row stride ldx) of n_heads * head_dim floats.
// positions[i] is the absolute position of row i (any order). Dims rot_dims..head_dim-1 of
// each head are left untouched. Angles and their cos/sin are computed in double and rounded
// to float once, so large positions lose no precision; the rotation itself is float.
// Rows are split across threads when rows > 1. Throws kInvalidArgument for an odd rot_dims,
// rot_dims > head_dim or freq_base <= 0.
void rope(CpuContext& ctx, float* x, std::int64_t ldx, std::int64_t rows, std::int64_t n_heads,
          const std::int32_t* positions, const RopeParams& params);

}  // namespace sitsrt::cpu
