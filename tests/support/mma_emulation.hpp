// mma.sync.m16n8k16 (BF16 in) emulated on the CPU over one warp's fragments, placed as the PTX ISA
// lays them out: A register i of lane 4 g + t holds row g + 8 (i % 2), columns 2t + 8 (i / 2) and
// one more; B register i column g, rows 2t + 8 i and one more; c[i] row g + 8 (i / 2), column
// 2t + i % 2. For the host tests of the tensor-core kernels' lane logic (cuda/kernels/*_units.hpp,
// attention_tiles.hpp).
#pragma once

#include "cuda_backend/kernels/mma_units.hpp"

namespace sitsrt::test {

// c += A B, the products summed in double (Acc double: kept so; float: rounded once per mma, as
// the hardware's float accumulation of exact BF16 products, up to its internal order).
template <typename Acc>
void emulated_mma(const cuda::mma::FragA (&a)[32], const cuda::mma::FragB (&b)[32], Acc (&c)[32][4]) {
  double am[16][16] = {}, bm[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
      am[g + 8 * (i % 2)][2 * t + 8 * (i / 2)] = cuda::mma::bf16_low(a[lane].r[i]);
      am[g + 8 * (i % 2)][2 * t + 8 * (i / 2) + 1] = cuda::mma::bf16_high(a[lane].r[i]);
    }
    for (int i = 0; i < 2; ++i) {
      bm[2 * t + 8 * i][g] = cuda::mma::bf16_low(b[lane].r[i]);
      bm[2 * t + 8 * i + 1][g] = cuda::mma::bf16_high(b[lane].r[i]);
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
      double sum = c[lane][i];
      for (int k = 0; k < 16; ++k) sum += am[g + 8 * (i / 2)][k] * bm[k][2 * t + i % 2];
      c[lane][i] = static_cast<Acc>(sum);
    }
  }
}

}  // namespace sitsrt::test
