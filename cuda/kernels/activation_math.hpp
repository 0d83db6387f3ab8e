// The gated activations as the elementwise kernels compute them, shared with the fused matmul
// epilogues (planar_matmul.cu) so a fused step writes the same bits as the unfused one.
#pragma once

namespace sitsrt::cuda {

__device__ inline float swiglu_value(float gate, float up) {
  return gate * up / (1.0f + expf(-gate));
}

__device__ inline float geglu_tanh_value(float gate, float up) {
  constexpr float kTwoSqrt2OverPi = 1.5957691216057308f;
  return gate * up / (1.0f + expf(-kTwoSqrt2OverPi * (gate + 0.044715f * gate * gate * gate)));
}

}  // namespace sitsrt::cuda
