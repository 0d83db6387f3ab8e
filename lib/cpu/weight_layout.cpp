#include "cpu/weight_layout.hpp"

#include "core/check.hpp"
#include "core/repacked_blocks.hpp"
#include "cpu/amx_prefill.hpp"
#include "cpu/matmul_kernels.hpp"
#include "cpu/qdot_kernels.hpp"

#include <atomic>
#include <cstring>

namespace sitsrt::cpu {

// Prefill dequantizes 1024-column chunks from their byte offset in the row: a repack group must
// never straddle one.
static_assert(detail::kGemmBlockK % kRepackGroupElements == 0);
#if defined(SITSRT_X86_KERNELS)
static_assert(detail::kAmxBlockK % kRepackGroupElements == 0);
#endif

namespace {

// Repacks FP8 rows into FP8R; false (dst then to be overwritten) when a row's scales do not
// split exactly (repacked_blocks.hpp), so that FP8R always dequantizes as the stored rows.
bool copy_fp8_repacked(CpuContext& ctx, const WeightMatrix& stored, std::byte* dst, std::size_t dst_stride) {
  const std::size_t bytes = row_bytes(stored.type, stored.cols);
  const std::int64_t nb = stored.cols / kFp8Block;
  std::atomic<bool> exact{true};
  ctx.pool().run([&](int t, int n) {
    const Range r = split_range(stored.rows, t, n, 16);
    for (std::int64_t i = r.begin; i < r.end; ++i) {
      const auto* from = reinterpret_cast<const BlockFP8_E4M3*>(stored.data + static_cast<std::size_t>(i) * stored.row_stride);
      std::byte* row = dst + static_cast<std::size_t>(i) * dst_stride;
      if (!repack_row_fp8(from, row, nb)) exact.store(false, std::memory_order_relaxed);
      std::memset(row + bytes, 0, dst_stride - bytes);
    }
  });
  return exact.load();
}

}  // namespace

DType resident_layout(const CpuContext& ctx, DType stored, bool matmul) noexcept {
  const DType repacked = repacked_format_of(stored);
  // Only where decode reads the repacked layout with its own kernel (integer for Q8_0R/Q4_0R/Q4_KR,
  // AVX512-FP16 for FP8R); everywhere else the stored layout's kernels are at least as fast.
  if (!matmul || repacked == stored) return stored;
  if (repacked == DType::kFP8_E4M3R) return detail::fp8r_decode_native(ctx.isa()) ? repacked : stored;
  if (!ctx.int8_activations()) return stored;
  if (repacked == DType::kQ4_KR) return detail::q4_kr_decode_native(ctx.isa()) ? repacked : stored;
  return detail::qdot_kernels_for(ctx.isa()).matvec[static_cast<int>(repacked)] != nullptr ? repacked : stored;
}

std::size_t resident_row_stride(DType layout, std::int64_t cols) {
  // Rows of 1 KiB or more are padded (by at most 1/16) so each starts on a cache line; shorter
  // ones would pay up to 2x and are few.
  const std::size_t bytes = row_bytes(layout, cols);
  if (layout == stored_format_of(layout) || bytes < 1024) return bytes;
  return (bytes + 63) / 64 * 64;
}

DType copy_to_layout(CpuContext& ctx, const WeightMatrix& stored, DType layout, std::byte* dst, std::size_t dst_stride) {
  const std::size_t bytes = row_bytes(stored.type, stored.cols);
  SITSRT_ASSERT((layout == stored.type || layout == repacked_format_of(stored.type)) && dst_stride >= bytes);
  if (layout == DType::kFP8_E4M3R && !copy_fp8_repacked(ctx, stored, dst, dst_stride)) {
    layout = stored.type;  // some block scale has no exact FP8R split: copy the stored rows
  }
  if (layout == DType::kFP8_E4M3R) return layout;
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
      } else if (layout == DType::kQ4_KR) {
        repack_row_q4_k(reinterpret_cast<const BlockQ4_K*>(from), row, stored.cols / kSuperBlock);
      } else {
        repack_row_q4_0(reinterpret_cast<const BlockQ4_0*>(from), row, nb);
      }
      std::memset(row + bytes, 0, dst_stride - bytes);
    }
  });
  return layout;
}

}  // namespace sitsrt::cpu
