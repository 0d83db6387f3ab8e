// How the CPU kernels find a weight's values in memory (WeightLayout), and which layout the CPU
// backend keeps its resident copy of the weights in (EngineOptions::mmap_weights = false): the
// stored layout, or for the formats whose decode kernels read a repacked one faster, that one
// (cpu/repacked_blocks.hpp). The repacked layouts belong to the CPU kernels alone: files, the
// graph and the model layer know only the stored DTypes. A repacked weight dequantizes bit for
// bit as its stored format; Q8_0R/Q4_0R also decode bit-identically, FP8R's AVX512-FP16 decode
// rounds differently from stored FP8's BF16 kernel (both within their tested bounds), and Q8_0P
// (16-row tiles) decodes one row with the block-sum numerics of batches, which stored Q8_0 uses
// for one row only in batch-invariant mode.
#pragma once

#include "core/dtype.hpp"
#include "cpu/cpu_context.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sitsrt::cpu {

// One value per stored DType, holding its blocks as they are in the file (same order and value
// as DType, so the ISA tables index both alike), then the repacked layouts, each holding the
// blocks of one stored format regrouped (same block size and row bytes).
enum class WeightLayout : std::uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kFP8_E4M3,
  kQ4_G128,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ8_K,
  kIQ4_NL,
  // repacked (cpu/repacked_blocks.hpp): resident matmul weights only
  kQ8_0R,
  kQ4_0R,
  kFP8_E4M3R,
  kQ4_KR,
  // 16-row tiles (cpu/repacked_blocks.hpp): resident Q8_0 matmul weights at the AVX-512 VNNI
  // level only; a row inside a whole tile has no address of its own (is_tiled)
  kQ8_0P,
};

inline constexpr int kWeightLayoutCount = kDTypeCount + 5;

// The layout that holds `type`'s blocks as stored.
constexpr WeightLayout stored_layout(DType type) noexcept { return static_cast<WeightLayout>(type); }
constexpr bool is_repacked(WeightLayout layout) noexcept { return static_cast<int>(layout) >= kDTypeCount; }

// A DType added or moved must be mirrored above, before the repacked layouts.
static_assert(static_cast<int>(WeightLayout::kQ8_0R) == kDTypeCount);
static_assert(stored_layout(DType::kQ8_0) == WeightLayout::kQ8_0 && stored_layout(DType::kQ4_K) == WeightLayout::kQ4_K);
static_assert(stored_layout(DType::kFP8_E4M3) == WeightLayout::kFP8_E4M3 &&
              stored_layout(DType::kIQ4_NL) == WeightLayout::kIQ4_NL);

// Layouts whose rows are interleaved in tiles of kTileRows rows (kQ8_0P): a matrix's whole tiles
// lie at tile * kTileRows * row_stride, each holding its rows' blocks regrouped, and only the rows
// past the last whole tile are rows of their own (Q8_0R rows). Kernels are handed row ranges that
// start on a tile (decode and GEMM chunks are multiples of 16 rows); get_rows and
// dequantize_matrix_row find a row inside its tile.
inline constexpr std::int64_t kTileRows = 16;
constexpr bool is_tiled(WeightLayout layout) noexcept {
  return layout == WeightLayout::kQ8_0P;
}

// The stored format whose blocks `layout` holds: the DType itself, or the one a repacked layout
// regroups (kQ8_0R and kQ8_0P -> kQ8_0, kQ4_0R -> kQ4_0, kFP8_E4M3R -> kFP8_E4M3, kQ4_KR -> kQ4_K).
DType stored_type(WeightLayout layout) noexcept;
// The row-wise repacked layout of a stored format, or its stored layout when it has none (a
// tiled layout, kQ8_0P, is chosen by resident_layout alone).
WeightLayout repacked_layout(DType type) noexcept;

// Lower-case names: the stored DType's ("q8_0"), or the repacked layout's ("q8_0r", "q8_0p").
std::string_view name(WeightLayout layout) noexcept;
// Parses such a name, case-insensitive (bench_kernels --formats takes the repacked ones too).
std::optional<WeightLayout> weight_layout_from_name(std::string_view name) noexcept;
// Block geometry of the stored format (a repacked row has the stored row's size).
bool fits_blocks(WeightLayout layout, std::int64_t n) noexcept;
// Bytes of `n` consecutive elements; throws kInvalidArgument when n is not a whole number of blocks.
std::size_t row_bytes(WeightLayout layout, std::int64_t n);

struct WeightMatrix;  // cpu/matmul/matmul.hpp

// The layout a weight of type `stored` is copied into; `matmul`: a matmul reads it (a table only
// looked up by row stays as stored). Depends on the context's ISA level and int8 activations.
WeightLayout resident_layout(const CpuContext& ctx, DType stored, bool matmul) noexcept;

// Bytes between rows of a `cols`-wide weight in `layout`: the row's bytes, rounded up to 64 for
// repacked rows of at least 1 KiB so that every row (and its 64-byte loads) starts on a cache line.
std::size_t resident_row_stride(WeightLayout layout, std::int64_t cols);

// Writes `stored`'s rows into dst (rows of dst_stride bytes) in `layout` (stored.layout itself,
// its repacked layout, or for Q8_0 kQ8_0P), rows (tiles) split over the context's threads.
// Stride padding is zeroed.
// Returns the layout written: stored.layout instead of FP8R when some block scale has no exact
// FP8R split (cpu/repacked_blocks.hpp).
WeightLayout copy_to_layout(CpuContext& ctx, const WeightMatrix& stored, WeightLayout layout, std::byte* dst,
                            std::size_t dst_stride);

// Row r of a weight in any layout (a tiled one included) as floats: bit for bit the stored row's
// dequantize_row. Throws kInvalidArgument when r is outside [0, w.rows).
void dequantize_matrix_row(const WeightMatrix& w, std::int64_t r, float* dst);

}  // namespace sitsrt::cpu
