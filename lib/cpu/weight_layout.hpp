// The layouts the CPU backend keeps its resident copy of the weights in (EngineOptions::
// mmap_weights = false): the stored layout, or for the formats whose decode kernels read a
// repacked one faster, that one (core/repacked_blocks.hpp). A repacked weight dequantizes bit
// for bit as its stored format; Q8_0R/Q4_0R also decode bit-identically, FP8R's AVX512-FP16
// decode rounds differently from stored FP8's BF16 kernel (both within their tested bounds).
#pragma once

#include "core/dtype.hpp"
#include "cpu/cpu_context.hpp"
#include "cpu/matmul.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu {

// The layout a weight of type `stored` is copied into; `matmul`: a matmul reads it (a table only
// looked up by row stays as stored). Depends on the context's ISA level and int8 activations.
DType resident_layout(const CpuContext& ctx, DType stored, bool matmul) noexcept;

// Bytes between rows of a `cols`-wide weight in `layout`: the row's bytes, rounded up to 64 for
// repacked rows of at least 1 KiB so that every row (and its 64-byte loads) starts on a cache line.
std::size_t resident_row_stride(DType layout, std::int64_t cols);

// Writes `stored`'s rows into dst (rows of dst_stride bytes) in `layout` (stored.type itself or
// its repacked layout), rows split over the context's threads. Stride padding is zeroed.
// Returns the layout written: stored.type instead of FP8R when some block scale has no exact
// FP8R split (core/repacked_blocks.hpp).
DType copy_to_layout(CpuContext& ctx, const WeightMatrix& stored, DType layout, std::byte* dst, std::size_t dst_stride);

}  // namespace sitsrt::cpu
