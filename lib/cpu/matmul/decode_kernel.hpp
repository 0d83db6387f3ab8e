// Internal: how the decode (m == 1) rows of one weight are computed in a context, shared by
// matmul() and the fused products of matvec_group.hpp so both give bit-identical outputs.
#pragma once

#include "core/thread_pool.hpp"
#include "cpu/matmul/matmul.hpp"
#include "cpu/matmul/matmul_kernels.hpp"
#include "cpu/qdot/qdot_kernels.hpp"

#include <algorithm>
#include <cstdint>
#include <span>

namespace sitsrt::cpu::detail {

// Decode rows are handed out in multiples of this so each thread streams whole cache lines
// of every format and the split does not depend on the format.
inline constexpr std::int64_t kMatvecGrain = 16;

// With several threads, decode rows are claimed in chunks (OwnedChunkQueue) rather than split
// into one fixed part per thread: on a shared host a thread that runs slower than the others, or
// is descheduled before it finishes, leaves at most one chunk for the others to wait on instead
// of the rest of its part (a chunk it holds while descheduled still waits for it to run again).
// Each thread first works through its own contiguous share, chunk after adjacent chunk (one
// unbroken weight stream), then takes halves of what the others have left; the chunks shrink
// near the end so the threads finish close together. The full chunk is 1/8 of a thread's share
// (at 2 threads: 64 rows of a 1024-row matrix, 176 of a 2816-row FFN matrix). Measured at 2
// threads against one shared counter with fixed chunks: thread-pool waiting 6-9% -> 4-7% of
// decode samples, decode +2-4% (docs/performance.md).
inline constexpr std::int64_t kDecodeChunksPerThread = 8;

// Chunk size in grain units for `units` grain units on n_threads (one chunk per thread alone).
[[nodiscard]] inline std::int64_t decode_chunk_units(std::int64_t units, int n_threads) noexcept {
  if (n_threads <= 1) return std::max<std::int64_t>(1, units);
  const std::int64_t chunks = kDecodeChunksPerThread * n_threads;
  return std::max<std::int64_t>(1, (units + chunks - 1) / chunks);
}

// Runs body(Range of grain units) on the pool for every chunk of [0, units), each chunk on
// whichever part claims it. Which thread runs a chunk never changes its result.
template <typename Body>
void for_each_decode_chunk(ThreadPool& pool, std::int64_t units, Body&& body) {
  OwnedChunkQueue chunks(units, decode_chunk_units(units, pool.size()), pool.size());
  pool.run([&](int part, int) {
    for (Range c = chunks.next(part); c.begin < c.end; c = chunks.next(part)) body(c);
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
// Throws kInvalidArgument when the context has no kernels for w's layout (a tiled layout outside
// the int8 AVX-512 VNNI kernels).
void check_layout_kernels(const CpuContext& ctx, const WeightMatrix& w, const char* op);

// x as the decode kernels read it: the floats, and where a kernel needs them, the int8 row (q)
// or fp16 row (h) prepared once per product on the calling thread in the context's shared scratch.
struct DecodeInput {
  const float* x = nullptr;
  QuantizedRow q{};
  HalfRow h{};
};

struct DecodeKernel {
  QdotFn qdot = nullptr;        // integer dot on the int8 input row
  HalfMatvecFn half = nullptr;  // FP8R with AVX512-FP16, on the fp16 input row
  MatvecFn matvec = nullptr;    // otherwise: float activations
  bool lanes = false;           // qdot reads QuantizedRow::lanes (Q4_0R, Q4_KR)

  static DecodeKernel for_weight(const CpuContext& ctx, WeightLayout layout) noexcept;

  [[nodiscard]] bool needs_input() const noexcept { return qdot != nullptr || half != nullptr; }

  // y[begin, end) of y = W x.
  void rows(const WeightMatrix& w, const DecodeInput& in, float* y, std::int64_t begin, std::int64_t end) const noexcept {
    if (end <= begin) return;
    const std::byte* first = w.data + static_cast<std::size_t>(begin) * w.row_stride;
    if (qdot != nullptr) {
      qdot(first, w.row_stride, in.q, y + begin, end - begin);
    } else if (half != nullptr) {
      half(first, w.row_stride, w.cols, in.x, in.h, y + begin, end - begin);
    } else {
      matvec(first, w.row_stride, w.cols, in.x, y + begin, end - begin);
    }
  }
};

// Shared scratch bytes a product needs for x (cols wide) when some of its kernels need a prepared
// input: room for both rows the context may prepare, so any mix of kernels in one fused product
// fits in what any one of its weights reserved (0 when `kernel` needs none).
std::size_t decode_input_bytes(const CpuContext& ctx, const DecodeKernel& kernel, std::int64_t cols) noexcept;

// x prepared for `kernels` (cols wide) in ctx.shared(): the int8 row if any has qdot (with its
// block lanes if any reads them), the fp16 row if any has half.
DecodeInput prepare_decode_input(CpuContext& ctx, std::span<const DecodeKernel> kernels, const float* x,
                                 std::int64_t cols);

}  // namespace sitsrt::cpu::detail
