#include "cpu/weight_layout.hpp"

#include "core/check.hpp"
#include "cpu/matmul/amx_prefill.hpp"
#include "cpu/matmul/matmul.hpp"
#include "cpu/matmul/matmul_kernels.hpp"
#include "cpu/qdot/qdot_kernels.hpp"
#include "cpu/repacked_blocks.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <vector>

namespace sitsrt::cpu {

// Prefill dequantizes 1024-column chunks from their byte offset in the row: a repack group must
// never straddle one.
static_assert(detail::kGemmBlockK % kRepackGroupElements == 0);
#if defined(SITSRT_X86_KERNELS)
static_assert(detail::kAmxBlockK % kRepackGroupElements == 0);
#endif

DType stored_type(WeightLayout layout) noexcept {
  switch (layout) {
    case WeightLayout::kQ8_0R:
    case WeightLayout::kQ8_0P:
      return DType::kQ8_0;
    case WeightLayout::kQ4_0R: return DType::kQ4_0;
    case WeightLayout::kFP8_E4M3R: return DType::kFP8_E4M3;
    case WeightLayout::kQ4_KR: return DType::kQ4_K;
    default: return static_cast<DType>(layout);
  }
}

WeightLayout repacked_layout(DType type) noexcept {
  switch (type) {
    case DType::kQ8_0: return WeightLayout::kQ8_0R;
    case DType::kQ4_0: return WeightLayout::kQ4_0R;
    case DType::kFP8_E4M3: return WeightLayout::kFP8_E4M3R;
    case DType::kQ4_K: return WeightLayout::kQ4_KR;
    default: return stored_layout(type);
  }
}

std::string_view name(WeightLayout layout) noexcept {
  switch (layout) {
    case WeightLayout::kQ8_0R: return "q8_0r";
    case WeightLayout::kQ4_0R: return "q4_0r";
    case WeightLayout::kFP8_E4M3R: return "fp8_e4m3r";
    case WeightLayout::kQ4_KR: return "q4_kr";
    case WeightLayout::kQ8_0P:
      return "q8_0p";
    default: return sitsrt::name(stored_type(layout));
  }
}

std::optional<WeightLayout> weight_layout_from_name(std::string_view name) noexcept {
  if (const std::optional<DType> type = dtype_from_name(name)) return stored_layout(*type);
  for (int i = kDTypeCount; i < kWeightLayoutCount; ++i) {
    const auto layout = static_cast<WeightLayout>(i);
    const std::string_view candidate = cpu::name(layout);
    const auto same = [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; };
    if (std::equal(name.begin(), name.end(), candidate.begin(), candidate.end(), same)) return layout;
  }
  return std::nullopt;
}

bool fits_blocks(WeightLayout layout, std::int64_t n) noexcept {
  return sitsrt::fits_blocks(stored_type(layout), n);
}

std::size_t row_bytes(WeightLayout layout, std::int64_t n) {
  if (!fits_blocks(layout, n)) {
    raise(ErrorCode::kInvalidArgument, "{} elements are not a whole number of {}-element {} blocks", n,
          traits(stored_type(layout)).block_size, name(layout));
  }
  return sitsrt::row_bytes(stored_type(layout), n);
}

namespace {

// Repacks FP8 rows into FP8R; false (dst then to be overwritten) when a row's scales do not
// split exactly (repacked_blocks.hpp), so that FP8R always dequantizes as the stored rows.
bool copy_fp8_repacked(CpuContext& ctx, const WeightMatrix& stored, std::byte* dst, std::size_t dst_stride) {
  const std::size_t bytes = row_bytes(stored.layout, stored.cols);
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

// Whole 16-row tiles (split over the threads by tiles), then the rows past them as Q8_0R rows.
void copy_q8_0p(CpuContext& ctx, const WeightMatrix& stored, std::byte* dst, std::size_t dst_stride) {
  const std::size_t bytes = row_bytes(stored.layout, stored.cols);
  const std::int64_t nb = stored.cols / kQBlock;
  const std::int64_t tiles = stored.rows / kTileRows;
  const std::size_t tile_stride = static_cast<std::size_t>(kTileRows) * dst_stride;
  ctx.pool().run([&](int t, int n) {
    const Range r = split_range(tiles + 1, t, n);  // unit `tiles`: the rows past the whole tiles
    for (std::int64_t k = r.begin; k < r.end; ++k) {
      const std::size_t from_row = static_cast<std::size_t>(k * kTileRows);
      if (k < tiles) {
        std::byte* tile = dst + static_cast<std::size_t>(k) * tile_stride;
        repack_tile_q8_0p(stored.data + from_row * stored.row_stride, stored.row_stride, tile, nb);
        std::memset(tile + kTileRows * bytes, 0, tile_stride - kTileRows * bytes);
        continue;
      }
      for (std::int64_t i = tiles * kTileRows; i < stored.rows; ++i) {
        std::byte* row = dst + static_cast<std::size_t>(i) * dst_stride;
        repack_row_q8_0(
            reinterpret_cast<const BlockQ8_0*>(stored.data + static_cast<std::size_t>(i) * stored.row_stride), row, nb);
        std::memset(row + bytes, 0, dst_stride - bytes);
      }
    }
  });
}

}  // namespace

WeightLayout resident_layout(const CpuContext& ctx, DType stored, bool matmul) noexcept {
  const WeightLayout repacked = repacked_layout(stored);
  // Only where decode reads the repacked layout with its own kernel (integer for Q8_0R/Q4_0R/Q4_KR,
  // AVX512-FP16 for FP8R); everywhere else the stored layout's kernels are at least as fast.
  if (!matmul || !is_repacked(repacked)) return stored_layout(stored);
  if (repacked == WeightLayout::kFP8_E4M3R) {
    return detail::fp8r_decode_native(ctx.isa()) ? repacked : stored_layout(stored);
  }
  if (!ctx.int8_activations()) return stored_layout(stored);
  // Q8_0 tiles where the VNNI block-sum kernels read them, which transposed every 16-row tile per
  // product otherwise (~30% of a 16-row GEMM; docs/performance.md): the AVX-512 VNNI level, and
  // the amx level, whose tiles take a Q8_0P block as their B operand as it lies.
  if (stored == DType::kQ8_0 && (ctx.isa() == Isa::kAvx512Vnni || ctx.isa() == Isa::kAmx) &&
      detail::qdot_kernels_for(ctx.isa()).matvec[static_cast<int>(WeightLayout::kQ8_0P)] != nullptr) {
    return WeightLayout::kQ8_0P;
  }
  if (repacked == WeightLayout::kQ4_KR) {
    return detail::q4_kr_decode_native(ctx.isa()) ? repacked : stored_layout(stored);
  }
  return detail::qdot_kernels_for(ctx.isa()).matvec[static_cast<int>(repacked)] != nullptr ? repacked
                                                                                           : stored_layout(stored);
}

std::size_t resident_row_stride(WeightLayout layout, std::int64_t cols) {
  // Rows of 1 KiB or more are padded (by at most 1/16) so each starts on a cache line; shorter
  // ones would pay up to 2x and are few.
  const std::size_t bytes = row_bytes(layout, cols);
  if (!is_repacked(layout) || bytes < 1024) return bytes;
  return (bytes + 63) / 64 * 64;
}

WeightLayout copy_to_layout(CpuContext& ctx, const WeightMatrix& stored, WeightLayout layout, std::byte* dst,
                            std::size_t dst_stride) {
  const std::size_t bytes = row_bytes(stored.layout, stored.cols);
  SITSRT_ASSERT((layout == stored.layout || layout == repacked_layout(stored_type(stored.layout)) ||
                 (layout == WeightLayout::kQ8_0P && stored.layout == WeightLayout::kQ8_0)) &&
                dst_stride >= bytes);
  if (layout == WeightLayout::kQ8_0P) {
    copy_q8_0p(ctx, stored, dst, dst_stride);
    return layout;
  }
  if (layout == WeightLayout::kFP8_E4M3R && !copy_fp8_repacked(ctx, stored, dst, dst_stride)) {
    layout = stored.layout;  // some block scale has no exact FP8R split: copy the stored rows
  }
  if (layout == WeightLayout::kFP8_E4M3R) return layout;
  const std::int64_t nb = stored.cols / kQBlock;
  ctx.pool().run([&](int t, int n) {
    const Range r = split_range(stored.rows, t, n, 16);
    for (std::int64_t i = r.begin; i < r.end; ++i) {
      const std::byte* from = stored.data + static_cast<std::size_t>(i) * stored.row_stride;
      std::byte* row = dst + static_cast<std::size_t>(i) * dst_stride;
      if (layout == stored.layout) {
        std::memcpy(row, from, bytes);
      } else if (layout == WeightLayout::kQ8_0R) {
        repack_row_q8_0(reinterpret_cast<const BlockQ8_0*>(from), row, nb);
      } else if (layout == WeightLayout::kQ4_KR) {
        repack_row_q4_k(reinterpret_cast<const BlockQ4_K*>(from), row, stored.cols / kSuperBlock);
      } else {
        repack_row_q4_0(reinterpret_cast<const BlockQ4_0*>(from), row, nb);
      }
      std::memset(row + bytes, 0, dst_stride - bytes);
    }
  });
  return layout;
}

void dequantize_matrix_row(const WeightMatrix& w, std::int64_t r, float* dst) {
  if (r < 0 || r >= w.rows) raise(ErrorCode::kInvalidArgument, "row {} is outside the weight's {} rows", r, w.rows);
  const std::byte* row = w.data + static_cast<std::size_t>(r) * w.row_stride;
  if (!is_tiled(w.layout)) return dequantize_row(w.layout, row, dst, w.cols);
  if (r >= w.rows / kTileRows * kTileRows) return dequantize_row(WeightLayout::kQ8_0R, row, dst, w.cols);
  const std::int64_t nb = w.cols / kQBlock;
  std::vector<BlockQ8_0> blocks(static_cast<std::size_t>(nb));
  unpack_tile_row_q8_0p(w.data + static_cast<std::size_t>(r / kTileRows * kTileRows) * w.row_stride,
                        static_cast<int>(r % kTileRows), blocks.data(), nb);
  sitsrt::dequantize_row(DType::kQ8_0, blocks.data(), dst, w.cols);
}

}  // namespace sitsrt::cpu
