#include "cpu/weight_layout.hpp"

#include "core/check.hpp"
#include "core/repacked_blocks.hpp"
#include "cpu/amx_prefill.hpp"
#include "cpu/matmul_kernels.hpp"
#include "cpu/qdot_kernels.hpp"

#include <cstring>

namespace sitsrt::cpu {

// Prefill dequantizes 1024-column chunks from their byte offset in the row: a repack group must
// never straddle one.
static_assert(detail::kGemmBlockK % kRepackGroupElements == 0);
#if defined(SITSRT_X86_KERNELS)
static_assert(detail::kAmxBlockK % kRepackGroupElements == 0);
#endif

DType resident_layout(const CpuContext& ctx, DType stored, bool matmul) noexcept {
  const DType repacked = repacked_format_of(stored);
  // Only where decode reads the repacked layout with its own integer kernel; everywhere else
  // the stored layout's kernels are at least as fast.
  if (!matmul || repacked == stored || !ctx.int8_activations()) return stored;
  return detail::qdot_kernels_for(ctx.isa()).matvec[static_cast<int>(repacked)] != nullptr ? repacked : stored;
}

std::size_t resident_row_stride(DType layout, std::int64_t cols) {
  // Rows of 1 KiB or more are padded (by at most 1/16) so each starts on a cache line; shorter
  // ones would pay up to 2x and are few.
  const std::size_t bytes = row_bytes(layout, cols);
  if (layout == stored_format_of(layout) || bytes < 1024) return bytes;
  return (bytes + 63) / 64 * 64;
}

void copy_to_layout(CpuContext& ctx, const WeightMatrix& stored, DType layout, std::byte* dst, std::size_t dst_stride) {
  const std::size_t bytes = row_bytes(stored.type, stored.cols);
  SITSRT_ASSERT((layout == stored.type || layout == repacked_format_of(stored.type)) && dst_stride >= bytes);
  const std::int64_t nb = stored.cols / kQBlock;
  ctx.pool().run([&](int t, int n) {
    const Range r = split_range(stored.rows, t, n, 16);
    for (std::int64_t i = r.begin; i < r.end; ++i) {
      const std::byte* from = stored.data + static_cast<std::size_t>(i) * stored.row_stride;
      std::byte* row = dst + static_cast<std::size_t>(i) * dst_stride;
      if (layout == stored.type) {
        std::memcpy(row, from, bytes);
      } else if (layout == DType::kQ8_0R) {
        repack_row_q8_0(reinterpret_cast<const BlockQ8_0*>(from), row, nb);
      } else {
        repack_row_q4_0(reinterpret_cast<const BlockQ4_0*>(from), row, nb);
      }
      std::memset(row + bytes, 0, dst_stride - bytes);
    }
  });
}

}  // namespace sitsrt::cpu
