// The gated activations as the elementwise kernels compute them, shared with the fused matmul
// epilogues (planar_matmul.cu) so a fused step writes the same bits as the unfused one.
#pragma once

namespace sitsrt::cuda {

// Each operation rounded on its own (no contraction into an fma, which nvcc may choose differently
// where the code is inlined), so both call sites give the same bits.
__device__ inline float swiglu_value(float gate, float up) {
  return __fdiv_rn(__fmul_rn(gate, up), __fadd_rn(1.0f, expf(-gate)));
}

__device__ inline float geglu_tanh_value(float gate, float up) {
  constexpr float kTwoSqrt2OverPi = 1.5957691216057308f;
  const float cube = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, gate), gate), gate);
  const float inner = __fmul_rn(-kTwoSqrt2OverPi, __fadd_rn(gate, cube));
  return __fdiv_rn(__fmul_rn(gate, up), __fadd_rn(1.0f, expf(inner)));
}

}  // namespace sitsrt::cuda
