// Causal multi-head attention with grouped KV heads, reading keys and values from a cache.
#pragma once

#include "core/dtype.hpp"
#include "cpu/cpu_context.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu {

// One layer's K and V cache: position p's key row at k + p * row_stride (same for v),
// each row n_kv_heads * head_dim elements of `type` (kF32 or kF16).
struct KvLayerView {
  DType type = DType::kF32;
  std::byte* k = nullptr;
  std::byte* v = nullptr;
  std::size_t row_stride = 0;
  std::int64_t capacity = 0;  // positions the cache can hold
};

// Writes `rows` key/value rows (kv_width floats each) at positions pos0 .. pos0+rows-1,
// converting to the cache type (F16: round to nearest even, as fp32_to_fp16); a decode step's
// few rows are written by the calling thread, more are split over the pool. Throws
// kInvalidArgument past capacity or for a negative pos0, kUnsupported for other cache types.
void kv_store(CpuContext& ctx, const KvLayerView& kv, const float* k, std::int64_t ldk, const float* v,
              std::int64_t ldv, std::int64_t rows, std::int64_t kv_width, std::int64_t pos0);

struct AttentionShape {
  std::int64_t n_heads = 0;
  std::int64_t n_kv_heads = 0;  // n_heads % n_kv_heads == 0; query head h reads KV head h / (n_heads / n_kv_heads)
  std::int64_t head_dim = 0;
  float scale = 0.0f;       // usually 1/sqrt(head_dim)
  std::int64_t window = 0;  // > 0: sliding window, position p attends to p - window + 1 .. p only
};

// q: `rows` rows of n_heads * head_dim floats; row i is the token at position pos0 + i and
// attends to cache positions 0 .. pos0 + i (inclusive), or with a window only to the last
// `window` of them (keys outside are skipped, not masked). out: same shape as q.
// Each (row, kv head) pair's positions are cut into chunks of 256 (from the pair's first
// position). A chunk reads its K rows once for all query heads of the group (F16 converted in
// the dot product), takes a float softmax (chunk max subtracted; exp to a few ulp; sum in 16
// float lanes) and sums its V rows once into unnormalised outputs. Chunks are folded in order
// (rescaled by exp(chunk max - running max), std::exp) and divided by the sum at the end.
// Work items are whole pairs; when pairs are fewer than 4 per thread and a row spans 4
// chunks (> 768 positions), the chunks themselves are items run by different threads and
// folded afterwards in the same order, so results do not depend on the thread count or on
// which thread ran what. Each thread needs attention_scratch_floats. Throws
// kInvalidArgument for a bad shape or pos0 + rows > capacity.
void attention(CpuContext& ctx, const float* q, std::int64_t ldq, std::int64_t rows, std::int64_t pos0,
               const KvLayerView& kv, const AttentionShape& shape, float* out, std::int64_t ldo);

// Per-thread scratch for attention over a cache of `capacity` positions: a chunk's scores and a
// few head_dim-sized rows per query head of a group, plus a split's share of chunk partials
// (up to 4 per 256 positions of capacity), so linear in capacity.
std::size_t attention_scratch_floats(std::int64_t capacity, const AttentionShape& shape) noexcept;

}  // namespace sitsrt::cpu
