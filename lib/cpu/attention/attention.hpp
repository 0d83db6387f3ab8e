// Causal multi-head attention with grouped KV heads, reading keys and values from a (paged,
// optionally quantized) cache.
#pragma once

#include "cpu/cpu_context.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

namespace sitsrt::cpu {

// Element types of cached K or V rows; the same values and row layouts as ops::KvType (the
// kernels layer cannot include ops). One row holds one position's n_kv_heads * head_dim values,
// head after head:
//   kF32, kF16: the values.
//   kInt8: int8 q in [-127, 127], then one f16 scale per head (x ~ q * scale).
//   kInt4: 4-bit indices into 16 non-uniform levels, two per byte (the even element in the low
//          nibble), then one 8-bit scale code per group of 32 consecutive values of the row
//          (x ~ level(index) * scale_of(code), core/kv_int4.hpp).
enum class KvType : std::uint8_t { kF32, kF16, kInt8, kInt4 };

// Bytes of one row of `type` (see KvType); 0 when the type cannot hold the width (int4 needs
// n_kv_heads * head_dim % 32 == 0).
std::size_t kv_row_bytes(KvType type, std::int64_t n_kv_heads, std::int64_t head_dim) noexcept;
// Bytes of one head row of a head-major block (KvLayerView::k_head_major): the head's values
// and scales; 0 when `type` cannot be stored by head (int4 with head_dim % 32 != 0).
std::size_t kv_head_bytes(KvType type, std::int64_t head_dim) noexcept;

// One layer's K and V cache of one sequence. Positions are grouped in blocks of block_size:
// logical block b lives in physical block block_table[b], whose row r starts at
// k + (block_table[b] * block_size + r) * k_row_bytes (same for v with v_row_bytes). A
// contiguous cache is one block as large as its capacity (contiguous_kv). The view does not own
// the memory or the table; both must outlive the calls that use it.
// Rotated sides hold every head vector multiplied by the normalised Walsh-Hadamard matrix of
// size head_dim (a power of two), applied before quantizing: kv_store rotates, attention rotates
// q (K side) or its output (V side) so results are those of the unrotated values.
// The longest exact recent window (KvLayerView::recent_window): the window is one attend chunk.
inline constexpr std::int64_t kMaxRecentWindow = 256;

struct KvLayerView {
  KvType k_type = KvType::kF32;
  KvType v_type = KvType::kF32;
  std::byte* k = nullptr;
  std::byte* v = nullptr;
  std::size_t k_row_bytes = 0;
  std::size_t v_row_bytes = 0;
  std::int64_t capacity = 0;    // positions this sequence may hold
  std::int64_t block_size = 0;  // positions per block
  std::span<const std::int32_t> block_table;
  bool k_rotated = false;
  bool v_rotated = false;
  // n_kv_heads * head_dim floats kv_store subtracts from every K row before rotating and
  // quantizing (null: none); attention reads the centered rows as they are (every score of a
  // query shifts by q.offset, which softmax cancels).
  const float* k_offset = nullptr;
  // n_kv_heads * head_dim positive floats kv_store divides the (centered) K row by before
  // rotating (null: none); attention multiplies each query head by its KV head's scales first,
  // so scores are those of the unscaled keys.
  const float* k_scale = nullptr;
  // Exact recent window (recent_window > 0): the int8/int4 sides also keep f16 copies of their
  // rows as stored before quantizing (centered, scaled and rotated as the side is), and a query
  // at position i reads positions max(exact_from, i - recent_window + 1) .. i from those copies
  // instead of the quantized rows: the keys a query attends most (its latest ones) keep f16
  // precision (docs/serving.md has the KLD). Positions before pos0 of a call come from the
  // sequence's ring (position p in row p % recent_window of k_recent / v_recent, f16 rows of
  // n_kv_heads * head_dim values; null for an unquantized side); the call's own rows from the
  // staging rows kv_store writes (KvStoreSequence). exact_from: the first position whose copy
  // the ring may hold (positions taken from a prefix cache have none).
  std::byte* k_recent = nullptr;
  std::byte* v_recent = nullptr;
  std::int64_t recent_window = 0;
  std::int64_t exact_from = 0;
  // Head-major blocks: within each block, head g's block_size head rows lie together, at
  // g * block_size * kv_head_bytes from the block's start, instead of each position's row
  // together. A head row is one position's head vector as its type stores it, then that head's
  // scales (int8: its f16 scale; int4: its head_dim / 32 scale codes, so head_dim % 32 == 0).
  // One (query row, kv head) item then reads a contiguous run per block, which hardware
  // prefetchers follow; with rows apart it read a few lines per row and waited on misses in
  // flight (16-stream decode, docs/performance.md). A block's bytes stay where they were, so
  // copies and swaps of whole blocks are unchanged.
  bool k_head_major = false;
  bool v_head_major = false;

  [[nodiscard]] bool k_windowed() const noexcept {
    return recent_window > 0 && (k_type == KvType::kInt8 || k_type == KvType::kInt4);
  }
  [[nodiscard]] bool v_windowed() const noexcept {
    return recent_window > 0 && (v_type == KvType::kInt8 || v_type == KvType::kInt4);
  }

  // Byte offset of position p's K row (the same for V with v_row_bytes).
  [[nodiscard]] std::size_t row_index(std::int64_t p) const noexcept {
    const std::int64_t b = p / block_size;
    return static_cast<std::size_t>(block_table[static_cast<std::size_t>(b)]) * static_cast<std::size_t>(block_size) +
           static_cast<std::size_t>(p - b * block_size);
  }
  // Byte offset of position p's head g row on a head-major side of row_bytes rows and
  // head_bytes head rows (k_head_major).
  [[nodiscard]] std::size_t head_row_offset(std::int64_t p, std::int64_t g, std::size_t row_bytes,
                                            std::size_t head_bytes) const noexcept {
    const std::int64_t b = p / block_size, r = p - b * block_size;
    return static_cast<std::size_t>(block_table[static_cast<std::size_t>(b)]) * static_cast<std::size_t>(block_size) *
               row_bytes +
           static_cast<std::size_t>(g * block_size + r) * head_bytes;
  }
};

// A contiguous layer: position p at k + p * k_row_bytes (one block of `capacity`).
KvLayerView contiguous_kv(KvType k_type, KvType v_type, std::byte* k, std::byte* v, std::size_t k_row_bytes,
                          std::size_t v_row_bytes, std::int64_t capacity) noexcept;

// Writes `rows` key/value rows (n_kv_heads * head_dim floats each) at positions pos0 ..
// pos0+rows-1 through the block table, converting to each side's type: F16 round to nearest
// even (as fp32_to_fp16); INT8 per (position, head) scale = the f16 value nearest above
// max|x| / 127, q = round-to-nearest-even(x / scale); INT4 per group of 32 row values,
// scale >= max|x| / 7, q = round(x / scale) clamped to [-8, 7]. So |dequantized - x| <= scale/2
// for every value while max|x| / qmax fits an f16 (below 65504; larger values saturate). K rows
// first have kv.k_offset subtracted and are divided by kv.k_scale (each when set); rotated
// sides are then rotated. A decode step's few rows are written by the calling thread, more are
// split over the pool. Throws kInvalidArgument past capacity, for a
// negative pos0, a short block table or row bytes below kv_row_bytes; kUnsupported for
// rotation without a power-of-two head_dim <= 1024, an int4 width not a multiple of 32 or a
// head-major int4 side with head_dim % 32 != 0. A head-major side's row is converted whole,
// then scattered by head (each head's values, then its scales).
void kv_store(CpuContext& ctx, const KvLayerView& kv, const float* k, std::int64_t ldk, const float* v,
              std::int64_t ldv, std::int64_t rows, std::int64_t n_kv_heads, std::int64_t head_dim, std::int64_t pos0);

// The f16 copies of a call's own rows for a windowed side (KvLayerView::recent_window): row i
// (position pos0 + i) at k + i * n_kv_heads * head_dim halves; null for an unwindowed side.
struct KvStaging {
  std::uint16_t* k = nullptr;
  std::uint16_t* v = nullptr;
};

// One sequence's rows for kv_store_batch (see kv_store).
struct KvStoreSequence {
  KvLayerView kv;
  const float* k = nullptr;
  std::int64_t ldk = 0;
  const float* v = nullptr;
  std::int64_t ldv = 0;
  std::int64_t rows = 0;
  std::int64_t pos0 = 0;
  KvStaging staging;  // written for windowed sides (required there)
};

// After attention: the last min(rows, recent_window) staged rows of each windowed side go to
// the sequence's ring (position p to row p % recent_window), so the next call finds them there.
void kv_commit_recent(std::span<const KvStoreSequence> sequences, std::int64_t n_kv_heads, std::int64_t head_dim);

// kv_store for every sequence of a batched step: all checks first (nothing is written when one
// fails), then the rows of all sequences in one split over the pool (inline when few). Each
// row's bytes are those kv_store writes for it alone.
void kv_store_batch(CpuContext& ctx, std::span<const KvStoreSequence> sequences, std::int64_t n_kv_heads,
                    std::int64_t head_dim);

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
// position). A chunk reads its K rows once for all query heads of the group (converted or
// dequantized in registers in the dot product; rows found through the block table, the next
// rows prefetched across block edges), takes a float softmax (chunk max subtracted; exp to a
// few ulp; sum in 16 float lanes) and sums its V rows once into unnormalised outputs. Chunks
// are folded in order (rescaled by exp(chunk max - running max), std::exp) and divided by the
// sum at the end. Work items are whole pairs; when pairs are fewer than 4 per thread and a row
// spans 4 chunks (> 768 positions), the chunks themselves are items run by different threads
// and folded afterwards in the same order, so results do not depend on the thread count or on
// which thread ran what. Each thread needs attention_scratch_floats. Throws kInvalidArgument
// for a bad shape, pos0 + rows > capacity or a block table that does not cover them.
void attention(CpuContext& ctx, const float* q, std::int64_t ldq, std::int64_t rows, std::int64_t pos0,
               const KvLayerView& kv, const AttentionShape& shape, float* out, std::int64_t ldo);

// One sequence of a batched attention call (see attention for the meaning of each field).
struct AttentionSequence {
  const float* q = nullptr;
  std::int64_t ldq = 0;
  std::int64_t rows = 0;
  std::int64_t pos0 = 0;
  KvLayerView kv;
  float* out = nullptr;
  std::int64_t ldo = 0;
  KvStaging staging;  // this call's rows of windowed sides, as kv_store staged them
};

// attention for every sequence in one thread-pool dispatch over all their (row, kv head) pairs
// (a batched decode step of B sequences). Each sequence's output is bit-identical to calling
// attention on it alone, whatever the other sequences and the thread count: a pair's chunks and
// their fold order depend only on that pair. Scratch: attention_scratch_floats of the largest
// capacity. The views may share a block pool; the outputs must not overlap.
void attention_batch(CpuContext& ctx, std::span<const AttentionSequence> sequences, const AttentionShape& shape);

// Per-thread scratch for attention over caches of up to `capacity` positions: a chunk's scores,
// row addresses and a few head_dim-sized rows per query head of a group, plus a split's share
// of chunk partials (up to 4 per 256 positions of capacity), so linear in capacity.
std::size_t attention_scratch_floats(std::int64_t capacity, const AttentionShape& shape) noexcept;

}  // namespace sitsrt::cpu
