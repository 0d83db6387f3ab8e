// Internal: how the decode (m == 1) rows of one weight are computed in a context, shared by
// matmul() and the fused products of matvec_group.hpp so both give bit-identical outputs.
#pragma once

#include "core/thread_pool.hpp"
#include "cpu/matmul.hpp"
#include "cpu/matmul_kernels.hpp"
#include "cpu/qdot_kernels.hpp"

#include <algorithm>
#include <cstdint>

namespace sitsrt::cpu::detail {

// Decode rows are handed out in multiples of this so each thread streams whole cache lines
// of every format and the split does not depend on the format.
inline constexpr std::int64_t kMatvecGrain = 16;

// With several threads, decode rows are claimed in chunks (ChunkQueue) rather than split into
// one fixed part per thread: on a shared host a thread that runs slower than the others, or is
// descheduled before it finishes, leaves at most one chunk for the others to wait on instead of
// the rest of its part (a chunk it holds while descheduled still waits for it to run again).
// About this many chunks per thread keeps that tail small while each chunk still streams a long
// contiguous run of
// the weight (at 2 threads: 64 rows of a 1024-row matrix, 176 of a 2816-row FFN matrix, i.e.
// 70-190 KiB of Q8_0). 16 and 32 per thread measured up to 7-9% slower; see docs/performance.md.
inline constexpr std::int64_t kDecodeChunksPerThread = 8;
// The last chunks shrink (ChunkQueue's tail_parts = this * threads) so the threads finish a
// matmul close together: at 2 threads a 1024-row matrix is 13 chunks of 64 rows, then 48, 48,
// 32 and four of 16 (16 chunks of 64 without it).
inline constexpr std::int64_t kDecodeTailParts = 2;

// Chunk size in grain units for `units` grain units on n_threads (one chunk per thread alone).
[[nodiscard]] inline std::int64_t decode_chunk_units(std::int64_t units, int n_threads) noexcept {
  if (n_threads <= 1) return std::max<std::int64_t>(1, units);
  const std::int64_t chunks = kDecodeChunksPerThread * n_threads;
  return std::max<std::int64_t>(1, (units + chunks - 1) / chunks);
}

// Runs body(Range of grain units) on the pool for every chunk of [0, units), each chunk on
// whichever thread claims it. Which thread runs a chunk never changes its result.
template <typename Body>
void for_each_decode_chunk(ThreadPool& pool, std::int64_t units, Body&& body) {
  ChunkQueue chunks(units, decode_chunk_units(units, pool.size()), kDecodeTailParts * pool.size());
  pool.run([&](int, int) {
    for (Range c = chunks.next(); c.begin < c.end; c = chunks.next()) body(c);
  });
}

// The same over rows [0, rows): body(begin, end) with begin a multiple of kMatvecGrain.
template <typename Body>
void for_each_decode_row_chunk(ThreadPool& pool, std::int64_t rows, Body&& body) {
  for_each_decode_chunk(pool, (rows + kMatvecGrain - 1) / kMatvecGrain, [&](Range units) {
    body(units.begin * kMatvecGrain, std::min(rows, units.end * kMatvecGrain));
  });
}

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
