// Internal: how the decode (m == 1) rows of one weight are computed in a context, shared by
// matmul() and the fused products of matvec_group.hpp so both give bit-identical outputs.
#pragma once

#include "cpu/matmul.hpp"
#include "cpu/matmul_kernels.hpp"
#include "cpu/qdot_kernels.hpp"

#include <cstdint>

namespace sitsrt::cpu::detail {

// Decode rows are handed out in multiples of this so each thread streams whole cache lines
// of every format and the split does not depend on the format.
inline constexpr std::int64_t kMatvecGrain = 16;

// Throws kInvalidArgument for negative shapes, partial blocks, a short row_stride or null data.
void check_weight(const WeightMatrix& w, const char* op);

struct DecodeKernel {
  QdotFn qdot = nullptr;      // integer dot on the int8 input row (context quantizes activations)
  MatvecFn matvec = nullptr;  // otherwise: float activations

  static DecodeKernel for_weight(const CpuContext& ctx, DType type) noexcept;

  // y[begin, end) of y = W x; q is x quantized (quantize_row_q8_act) when qdot is set.
  void rows(const WeightMatrix& w, const float* x, const QuantizedRow* q, float* y, std::int64_t begin,
            std::int64_t end) const noexcept {
    if (end <= begin) return;
    const std::byte* first = w.data + static_cast<std::size_t>(begin) * w.row_stride;
    if (qdot != nullptr) {
      qdot(first, w.row_stride, *q, y + begin, end - begin);
    } else {
      matvec(first, w.row_stride, w.cols, x, y + begin, end - begin);
    }
  }
};

}  // namespace sitsrt::cpu::detail
