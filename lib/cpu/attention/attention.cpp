// attention / attention_batch: argument checks, the thread split over (sequence, query row,
// kv head) pairs, block-table walking into per-chunk row addresses, the Hadamard rotation of q
// and of the output, and scratch hand-out. The per-chunk arithmetic is in
// vec_{generic,avx2,avx512}.cpp.
#include "cpu/attention/attention.hpp"

#include "core/check.hpp"
#include "cpu/attention/kv_quant.hpp"
#include "cpu/attention/kv_store.hpp"
#include "cpu/vec_kernels.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <span>

namespace sitsrt::cpu {
namespace {

using detail::kAttendChunk;

// A pair's running (or one chunk's) partial result: per head the max score, the sum of
// exp(score - max) and the unnormalised value sum o (group x pad16(head_dim) floats).
struct Partial {
  float* o;
  float* max;
  float* sum;
};

std::int64_t pad16(std::int64_t v) {
  return (v + 15) / 16 * 16;
}

// Floats of one Partial, a multiple of 16 so consecutive ones stay 64-byte aligned.
std::int64_t partial_floats(std::int64_t group, std::int64_t head_dim) {
  return group * pad16(head_dim) + pad16(2 * group);
}

Partial partial_at(float* base, std::int64_t group, std::int64_t head_dim) {
  float* ml = base + group * pad16(head_dim);
  return {base, ml, ml + group};
}

std::int64_t chunk_count(std::int64_t n) {
  return (n + kAttendChunk - 1) / kAttendChunk;
}

// Per-thread scratch after the kernel's own: the K and V row addresses of one chunk, then the
// rotated q of one group (both multiples of 16 floats).
constexpr std::int64_t kRowAddressFloats = 2 * kAttendChunk * static_cast<std::int64_t>(sizeof(void*) / sizeof(float));
std::int64_t chunk_scratch_floats(std::int64_t group, std::int64_t head_dim) {
  return static_cast<std::int64_t>(detail::attend_scratch_floats(group, head_dim)) + kRowAddressFloats +
         group * pad16(head_dim);
}

// Split over positions only when (row, kv head) pairs are fewer than this many per thread and
// the longest row has at least kSplitMinChunks chunks; otherwise whole pairs are the work items.
constexpr std::int64_t kSplitBelowPairsPerThread = 4;
constexpr std::int64_t kSplitMinChunks = 4;

// run <- run (+) c: both rescaled to the larger max. The single place chunks are combined,
// always in chunk order, so a pair's result does not depend on whether (or over how many
// threads) its chunks were split.
void fold(const Partial& run, const Partial& c, std::int64_t group, std::int64_t dp) {
  for (std::int64_t h = 0; h < group; ++h) {
    const float m = std::max(run.max[h], c.max[h]);
    const float a = std::exp(run.max[h] - m), b = std::exp(c.max[h] - m);
    run.max[h] = m;
    run.sum[h] = run.sum[h] * a + c.sum[h] * b;
    float* o = run.o + h * dp;
    const float* co = c.o + h * dp;
    for (std::int64_t x = 0; x < dp; ++x) o[x] = o[x] * a + co[x] * b;
  }
}

// Normalised output of the group's heads; a rotated V cache gave rotated sums, rotated back
// here once per head (the normalised Hadamard matrix is its own inverse).
void finish(const Partial& run, std::int64_t group, std::int64_t d, bool v_rotated, float* out) {
  const std::int64_t dp = pad16(d);
  for (std::int64_t h = 0; h < group; ++h) {
    const float inv = 1.0f / run.sum[h];
    for (std::int64_t x = 0; x < d; ++x) out[h * d + x] = run.o[h * dp + x] * inv;
    if (v_rotated) detail::hadamard_normalized(out + h * d, d);
  }
}

static_assert(kMaxRecentWindow <= kAttendChunk, "an exact window is one chunk");

// Everything one sequence needs to address a (row, kv head, chunk) item.
struct SequencePlan {
  const AttentionSequence* seq;
  const AttentionShape* shape;
  std::int64_t group;
  detail::AttendFn attend;
  detail::AttendFn attend_exact;  // the exact window's chunk: f16 rows for windowed sides

  // Positions row i attends: first .. first + n - 1.
  [[nodiscard]] std::int64_t first(std::int64_t i) const {
    const std::int64_t pos = seq->pos0 + i;
    return shape->window > 0 ? std::max<std::int64_t>(0, pos - shape->window + 1) : 0;
  }
  [[nodiscard]] std::int64_t count(std::int64_t i) const { return seq->pos0 + i - first(i) + 1; }
  // First position row i reads from the exact window (KvLayerView::recent_window): the
  // quantized rows are first(i) .. exact_begin(i) - 1, in chunks of kAttendChunk, and the exact
  // ones up to the row's position one last chunk. Without a windowed side, past the row.
  [[nodiscard]] std::int64_t exact_begin(std::int64_t i) const {
    const KvLayerView& kv = seq->kv;
    const std::int64_t pos = seq->pos0 + i;
    if (!kv.k_windowed() && !kv.v_windowed()) return pos + 1;
    return std::clamp(std::max(kv.exact_from, pos - kv.recent_window + 1), first(i), pos + 1);
  }
  [[nodiscard]] std::int64_t quantized_chunks(std::int64_t i) const { return chunk_count(exact_begin(i) - first(i)); }
  [[nodiscard]] std::int64_t chunks(std::int64_t i) const {
    return quantized_chunks(i) + (exact_begin(i) <= seq->pos0 + i ? 1 : 0);
  }

  // Row addresses of the exact positions begin .. begin + n - 1 (padded as resolve_rows): a
  // windowed side's from this call's staging (positions from pos0) or the ring, the other
  // side's from the blocks.
  void resolve_exact_rows(std::int64_t begin, std::int64_t n, std::int64_t g, const std::byte** k_rows,
                          const std::byte** v_rows) const {
    const KvLayerView& kv = seq->kv;
    resolve_rows(begin, n, g, k_rows, v_rows);
    const std::int64_t width = shape->n_kv_heads * shape->head_dim;
    const auto row_bytes = static_cast<std::size_t>(width) * 2;
    const auto exact = [&](const std::uint16_t* staged, const std::byte* ring, std::int64_t p) {
      if (p >= seq->pos0) return reinterpret_cast<const std::byte*>(staged + (p - seq->pos0) * width);
      return ring + static_cast<std::size_t>(p % kv.recent_window) * row_bytes;
    };
    std::int64_t idx = 0;
    for (; idx < n; ++idx) {
      if (kv.k_windowed()) k_rows[idx] = exact(seq->staging.k, kv.k_recent, begin + idx);
      if (kv.v_windowed()) v_rows[idx] = exact(seq->staging.v, kv.v_recent, begin + idx);
    }
    for (; idx % 4 != 0; ++idx) {
      k_rows[idx] = k_rows[n - 1];
      v_rows[idx] = v_rows[n - 1];
    }
  }

  // Row addresses of positions begin .. begin + n - 1 for kv head g, walking the blocks they
  // fall in, padded to a multiple of four with the last row: a row-major side's rows (the
  // kernels add the head's offset), a head-major side's head vectors (KvLayerView::k_head_major).
  void resolve_rows(std::int64_t begin, std::int64_t n, std::int64_t g, const std::byte** k_rows,
                    const std::byte** v_rows) const {
    const KvLayerView& kv = seq->kv;
    const std::int64_t d = shape->head_dim;
    const std::size_t k_head = kv_head_bytes(kv.k_type, d), v_head = kv_head_bytes(kv.v_type, d);
    const std::size_t k_step = kv.k_head_major ? k_head : kv.k_row_bytes;
    const std::size_t v_step = kv.v_head_major ? v_head : kv.v_row_bytes;
    std::int64_t idx = 0;
    while (idx < n) {
      const std::int64_t p = begin + idx, r = p % kv.block_size;
      const std::int64_t run = std::min(kv.block_size - r, n - idx);
      const std::byte* k = kv.k + (kv.k_head_major ? kv.head_row_offset(p, g, kv.k_row_bytes, k_head)
                                                   : kv.row_index(p) * kv.k_row_bytes);
      const std::byte* v = kv.v + (kv.v_head_major ? kv.head_row_offset(p, g, kv.v_row_bytes, v_head)
                                                   : kv.row_index(p) * kv.v_row_bytes);
      for (std::int64_t j = 0; j < run; ++j) {
        k_rows[idx + j] = k + static_cast<std::size_t>(j) * k_step;
        v_rows[idx + j] = v + static_cast<std::size_t>(j) * v_step;
      }
      idx += run;
    }
    for (; idx % 4 != 0; ++idx) {
      k_rows[idx] = k_rows[n - 1];
      v_rows[idx] = v_rows[n - 1];
    }
  }

  void run_chunk(std::int64_t i, std::int64_t g, std::int64_t chunk, const Partial& dst, float* scratch) const {
    const std::int64_t d = shape->head_dim, width = shape->n_kv_heads * d;
    const std::int64_t exact_at = exact_begin(i);
    const bool exact = chunk == quantized_chunks(i);
    const std::int64_t begin = exact ? exact_at : first(i) + chunk * kAttendChunk;
    float* extra = scratch + detail::attend_scratch_floats(group, d);
    auto** k_rows = reinterpret_cast<const std::byte**>(extra);
    const std::byte** v_rows = k_rows + kAttendChunk;
    float* q_rotated = extra + kRowAddressFloats;
    detail::AttendArgs args{};
    args.q = seq->q + i * seq->ldq + g * group * d;
    if (seq->kv.k_rotated || seq->kv.k_scale != nullptr) {
      std::memcpy(q_rotated, args.q, static_cast<std::size_t>(group * d) * sizeof(float));
      if (const float* s = seq->kv.k_scale; s != nullptr) {  // q . k = (q s) . (k / s)
        for (std::int64_t h = 0; h < group; ++h) {
          for (std::int64_t e = 0; e < d; ++e) q_rotated[h * d + e] *= s[g * d + e];
        }
      }
      if (seq->kv.k_rotated) {  // q . (H k) = (H q) . (H k) for the orthonormal H
        for (std::int64_t h = 0; h < group; ++h) detail::hadamard_normalized(q_rotated + h * d, d);
      }
      args.q = q_rotated;
    }
    if (exact) {
      args.n = seq->pos0 + i + 1 - begin;
      resolve_exact_rows(begin, args.n, g, k_rows, v_rows);
    } else {
      args.n = std::min(kAttendChunk, exact_at - begin);
      resolve_rows(begin, args.n, g, k_rows, v_rows);
    }
    // A head-major side's addresses are the head rows: a row of one head (head_dim values, then
    // that head's scales). A windowed side's exact chunk reads f16 rows of every head instead.
    const bool k_by_head = seq->kv.k_head_major && !(exact && seq->kv.k_windowed());
    const bool v_by_head = seq->kv.v_head_major && !(exact && seq->kv.v_windowed());
    args.k = k_by_head ? detail::AttendSide{k_rows, 0, d} : detail::AttendSide{k_rows, g * d, width};
    args.v = v_by_head ? detail::AttendSide{v_rows, 0, d} : detail::AttendSide{v_rows, g * d, width};
    args.group = group;
    args.head_dim = d;
    args.scale = shape->scale;
    args.o = dst.o;
    args.max = dst.max;
    args.sum = dst.sum;
    args.scratch = scratch;
    (exact ? attend_exact : attend)(args);
  }
};

void check_shape(const AttentionShape& shape) {
  if (shape.n_heads <= 0 || shape.n_kv_heads <= 0 || shape.head_dim <= 0 || shape.n_heads % shape.n_kv_heads != 0 ||
      shape.window < 0) {
    raise(ErrorCode::kInvalidArgument, "attention: bad shape n_heads={} n_kv_heads={} head_dim={} window={}",
          shape.n_heads, shape.n_kv_heads, shape.head_dim, shape.window);
  }
}

void check_sequence(const AttentionSequence& s, const AttentionShape& shape) {
  detail::check_cache(s.kv, shape.n_kv_heads, shape.head_dim, s.pos0, s.rows, "attention");
  if ((s.kv.k_windowed() && s.staging.k == nullptr && s.rows > 0) ||
      (s.kv.v_windowed() && s.staging.v == nullptr && s.rows > 0)) {
    raise(ErrorCode::kInvalidArgument, "attention: a windowed side without this call's staged rows");
  }
  const bool int4 = s.kv.k_type == KvType::kInt4 || s.kv.v_type == KvType::kInt4;
  if (int4 && shape.head_dim % 2 != 0) {  // a head would start inside a byte
    raise(ErrorCode::kUnsupported, "attention: an int4 cache needs an even head_dim, not {}", shape.head_dim);
  }
}

// Maps a global pair index (pairs of all sequences in order, each sequence's latest rows first)
// to its sequence, row and kv head. Each thread claims increasing indices, so a cursor that
// only moves forward finds the sequence in O(1) amortised, with no table to allocate.
class PairCursor {
 public:
  PairCursor(std::span<const SequencePlan> plans, std::int64_t n_kv) : plans_(plans), n_kv_(n_kv) {}

  struct Pair {
    const SequencePlan* plan;
    std::int64_t row, kv_head;
  };
  Pair at(std::int64_t pair) {
    while (pair >= base_ + plans_[s_].seq->rows * n_kv_) base_ += plans_[s_++].seq->rows * n_kv_;
    const std::int64_t local = pair - base_;
    const SequencePlan& p = plans_[s_];
    return {&p, p.seq->rows - 1 - local / n_kv_, local % n_kv_};
  }

 private:
  std::span<const SequencePlan> plans_;
  std::int64_t n_kv_;
  std::size_t s_ = 0;
  std::int64_t base_ = 0;
};

// Sequences planned at once on the stack; longer batches run in groups of this many, each
// group one dispatch (per-sequence results do not depend on the grouping).
constexpr std::size_t kMaxBatch = 1024;
// A thread claims up to this many consecutive pairs at once (the kv heads of one row): with
// head-major blocks their vectors are neighbours, and the hardware prefetcher, which runs ahead
// within a 4 KiB page, fills this thread's L2 with the next head's while it reads one. With
// claims of one pair the other thread often took the next head and missed on what had been
// fetched here: attention of a 16-stream step ~10% slower (docs/performance.md, session 25).
constexpr std::int64_t kMaxPairsPerClaim = 8;

void attend_group(CpuContext& ctx, std::span<const SequencePlan> plans, const AttentionShape& shape) {
  const std::int64_t group = shape.n_heads / shape.n_kv_heads, n_kv = shape.n_kv_heads;
  const std::int64_t d = shape.head_dim, dp = pad16(d);
  const auto kernel_need = static_cast<std::size_t>(chunk_scratch_floats(group, d));
  const std::int64_t part = partial_floats(group, d);
  std::int64_t pairs = 0, max_chunks = 0;
  for (const SequencePlan& p : plans) {
    pairs += p.seq->rows * n_kv;
    // The latest row has the most positions, though not always the most chunks: with an exact
    // window starting at exact_from, an earlier row may read more of them quantized.
    for (std::int64_t i = 0; i < p.seq->rows; ++i) max_chunks = std::max(max_chunks, p.chunks(i));
  }
  if (pairs == 0) return;
  const int threads = ctx.threads();
  const auto output = [&](const PairCursor::Pair& x) {
    return x.plan->seq->out + x.row * x.plan->seq->ldo + x.kv_head * group * d;
  };

  if (threads > 1 && max_chunks >= kSplitMinChunks && pairs < kSplitBelowPairsPerThread * threads) {
    // Few long pairs: every (pair, chunk) is an item; item k's partial goes to slot k / threads
    // of thread k % threads's scratch (after its kernel scratch), then each pair folds its
    // chunks in order. Bounded by attention_scratch_floats: items < 4 * threads * max_chunks.
    const std::int64_t items = pairs * max_chunks;
    const std::size_t need = kernel_need + static_cast<std::size_t>((items + threads - 1) / threads * part);
    const auto slot = [&](std::int64_t item) {
      float* base = ctx.scratch(static_cast<int>(item % threads), need) + kernel_need;
      return partial_at(base + item / threads * part, group, d);
    };
    std::atomic<std::int64_t> next{0};
    ctx.pool().run([&](int t, int) {
      float* scratch = nullptr;
      PairCursor cursor(plans, n_kv);
      for (std::int64_t k = next.fetch_add(1, std::memory_order_relaxed); k < items;
           k = next.fetch_add(1, std::memory_order_relaxed)) {
        const std::int64_t chunk = k % max_chunks;
        const PairCursor::Pair x = cursor.at(k / max_chunks);
        if (chunk >= x.plan->chunks(x.row)) continue;
        if (scratch == nullptr) scratch = ctx.scratch(t, need);
        x.plan->run_chunk(x.row, x.kv_head, chunk, slot(k), scratch);
      }
    });
    PairCursor cursor(plans, n_kv);
    for (std::int64_t pair = 0; pair < pairs; ++pair) {
      const PairCursor::Pair x = cursor.at(pair);
      const Partial run = slot(pair * max_chunks);
      for (std::int64_t chunk = 1; chunk < x.plan->chunks(x.row); ++chunk) {
        fold(run, slot(pair * max_chunks + chunk), group, dp);
      }
      finish(run, group, d, x.plan->seq->kv.v_rotated, output(x));
    }
    return;
  }

  // Pairs are claimed in runs of consecutive ones (kMaxPairsPerClaim, fewer when that would
  // leave a thread under four claims), longest rows (latest positions) first within a sequence,
  // so a prefill's triangular work spreads evenly; which thread runs a pair does not change its
  // result.
  const std::size_t need = kernel_need + static_cast<std::size_t>(2 * part);
  const std::int64_t claim = std::clamp<std::int64_t>(pairs / (4 * threads), 1, kMaxPairsPerClaim);
  std::atomic<std::int64_t> next{0};
  ctx.pool().run([&](int t, int) {
    float* scratch = nullptr;
    PairCursor cursor(plans, n_kv);
    for (std::int64_t first = next.fetch_add(claim, std::memory_order_relaxed); first < pairs;
         first = next.fetch_add(claim, std::memory_order_relaxed)) {
      for (std::int64_t pair = first; pair < std::min(pairs, first + claim); ++pair) {
        if (scratch == nullptr) scratch = ctx.scratch(t, need);
        const Partial run = partial_at(scratch + kernel_need, group, d);
        const Partial chunk = partial_at(scratch + kernel_need + part, group, d);
        const PairCursor::Pair x = cursor.at(pair);
        const std::int64_t chunks = x.plan->chunks(x.row);
        for (std::int64_t c = 0; c < chunks; ++c) {
          x.plan->run_chunk(x.row, x.kv_head, c, c == 0 ? run : chunk, scratch);
          if (c > 0) fold(run, chunk, group, dp);
        }
        finish(run, group, d, x.plan->seq->kv.v_rotated, output(x));
      }
    }
  });
}

}  // namespace

void attention_batch(CpuContext& ctx, std::span<const AttentionSequence> sequences, const AttentionShape& shape) {
  check_shape(shape);
  for (const AttentionSequence& s : sequences) check_sequence(s, shape);
  const detail::AttendTable& table = detail::vec_kernels_for(ctx.isa()).attend;
  const std::int64_t group = shape.n_heads / shape.n_kv_heads;
  std::array<SequencePlan, kMaxBatch> plans;
  for (std::size_t first = 0; first < sequences.size(); first += kMaxBatch) {
    const std::size_t n = std::min(kMaxBatch, sequences.size() - first);
    for (std::size_t i = 0; i < n; ++i) {
      const AttentionSequence& s = sequences[first + i];
      const KvType k_exact = s.kv.k_windowed() ? KvType::kF16 : s.kv.k_type;
      const KvType v_exact = s.kv.v_windowed() ? KvType::kF16 : s.kv.v_type;
      plans[i] = {&s, &shape, group,
                  table[static_cast<std::size_t>(s.kv.k_type)][static_cast<std::size_t>(s.kv.v_type)],
                  table[static_cast<std::size_t>(k_exact)][static_cast<std::size_t>(v_exact)]};
    }
    attend_group(ctx, std::span<const SequencePlan>(plans.data(), n), shape);
  }
}

void attention(CpuContext& ctx, const float* q, std::int64_t ldq, std::int64_t rows, std::int64_t pos0,
               const KvLayerView& kv, const AttentionShape& shape, float* out, std::int64_t ldo) {
  const AttentionSequence one{q, ldq, rows, pos0, kv, out, ldo};
  attention_batch(ctx, std::span<const AttentionSequence>(&one, 1), shape);
}

std::size_t attention_scratch_floats(std::int64_t capacity, const AttentionShape& shape) noexcept {
  if (shape.n_heads <= 0 || shape.n_kv_heads <= 0 || shape.head_dim <= 0 || capacity <= 0) return 0;
  const std::int64_t group = shape.n_heads / shape.n_kv_heads;
  // Chunk scratch, then either a running and a chunk partial, or a split's share of chunk
  // partials: fewer than kSplitBelowPairsPerThread * chunk_count(capacity) per thread.
  const std::int64_t slots = std::max<std::int64_t>(2, kSplitBelowPairsPerThread * (chunk_count(capacity) + 1));
  return static_cast<std::size_t>(chunk_scratch_floats(group, shape.head_dim) +
                                  slots * partial_floats(group, shape.head_dim));
}

}  // namespace sitsrt::cpu
