// kv_store / attention: argument checks, thread split over (query row, kv head) pairs and
// scratch hand-out. The per-pair arithmetic is in vec_{generic,avx2,avx512}.cpp.
#include "cpu/attention/attention.hpp"

#include "core/check.hpp"
#include "cpu/vec_kernels.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

namespace sitsrt::cpu {
namespace {

std::size_t element_bytes(DType type, const char* op) {
  switch (type) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    default:
      raise(ErrorCode::kUnsupported, "{}: KV cache type {} (only f32 and f16)", op, name(type));
  }
}

void check_cache(const KvLayerView& kv, std::int64_t width, std::int64_t pos0, std::int64_t rows, const char* op) {
  const std::size_t bytes = element_bytes(kv.type, op);
  if (kv.k == nullptr || kv.v == nullptr) raise(ErrorCode::kInvalidArgument, "{}: null KV cache", op);
  if (kv.row_stride < static_cast<std::size_t>(width) * bytes) {
    raise(ErrorCode::kInvalidArgument, "{}: KV row_stride {} below {} x {}-byte elements", op, kv.row_stride, width,
          bytes);
  }
  if (pos0 < 0 || rows < 0 || pos0 + rows > kv.capacity) {
    raise(ErrorCode::kInvalidArgument, "{}: positions {}..{} outside the KV cache capacity {}", op, pos0,
          pos0 + rows - 1, kv.capacity);
  }
}

}  // namespace

void kv_store(CpuContext& ctx, const KvLayerView& kv, const float* k, std::int64_t ldk, const float* v,
              std::int64_t ldv, std::int64_t rows, std::int64_t kv_width, std::int64_t pos0) {
  if (kv_width < 0) raise(ErrorCode::kInvalidArgument, "kv_store: negative kv_width {}", kv_width);
  check_cache(kv, kv_width, pos0, rows, "kv_store");
  if (rows == 0) return;
  const auto f32_to_f16 = detail::vec_kernels_for(ctx.isa()).f32_to_f16_row;
  // A decode step's row or two is stored by the calling thread: a fork-join costs more.
  constexpr std::int64_t kInlineElements = 1 << 14;
  const auto store_row = [&](const float* src, std::byte* dst) {
    if (kv.type == DType::kF32) {
      std::memcpy(dst, src, static_cast<std::size_t>(kv_width) * 4);
    } else {
      f32_to_f16(src, reinterpret_cast<std::uint16_t*>(dst), kv_width);
    }
  };
  const auto store_rows = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const std::size_t offset = static_cast<std::size_t>(pos0 + i) * kv.row_stride;
      store_row(k + i * ldk, kv.k + offset);
      store_row(v + i * ldv, kv.v + offset);
    }
  };
  if (rows * kv_width <= kInlineElements) {
    store_rows(0, rows);
    return;
  }
  ctx.pool().run([&](int t, int n) {
    const Range r = split_range(rows, t, n);
    store_rows(r.begin, r.end);
  });
}

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

void finish(const Partial& run, std::int64_t group, std::int64_t d, float* out) {
  const std::int64_t dp = pad16(d);
  for (std::int64_t h = 0; h < group; ++h) {
    const float inv = 1.0f / run.sum[h];
    for (std::int64_t x = 0; x < d; ++x) out[h * d + x] = run.o[h * dp + x] * inv;
  }
}

// Everything one attention call needs to address a (row, kv head, chunk) item.
struct AttentionPlan {
  const float* q;
  std::int64_t ldq, pos0;
  const KvLayerView* kv;
  const AttentionShape* shape;
  std::int64_t group;
  std::size_t head_bytes;
  detail::AttendFn attend;

  // Positions row i attends: first .. first + n - 1.
  [[nodiscard]] std::int64_t first(std::int64_t i) const {
    const std::int64_t pos = pos0 + i;
    return shape->window > 0 ? std::max<std::int64_t>(0, pos - shape->window + 1) : 0;
  }
  [[nodiscard]] std::int64_t count(std::int64_t i) const { return pos0 + i - first(i) + 1; }

  void run_chunk(std::int64_t i, std::int64_t g, std::int64_t chunk, const Partial& dst, float* scratch) const {
    const std::int64_t d = shape->head_dim;
    const std::int64_t begin = first(i) + chunk * kAttendChunk;
    const std::size_t skip =
        static_cast<std::size_t>(begin) * kv->row_stride + static_cast<std::size_t>(g) * head_bytes;
    detail::AttendArgs args{};
    args.q = q + i * ldq + g * group * d;
    args.k = kv->k + skip;
    args.v = kv->v + skip;
    args.row_stride = kv->row_stride;
    args.group = group;
    args.n = std::min(kAttendChunk, pos0 + i + 1 - begin);
    args.head_dim = d;
    args.scale = shape->scale;
    args.o = dst.o;
    args.max = dst.max;
    args.sum = dst.sum;
    args.scratch = scratch;
    attend(args);
  }
};

}  // namespace

void attention(CpuContext& ctx, const float* q, std::int64_t ldq, std::int64_t rows, std::int64_t pos0,
               const KvLayerView& kv, const AttentionShape& shape, float* out, std::int64_t ldo) {
  if (shape.n_heads <= 0 || shape.n_kv_heads <= 0 || shape.head_dim <= 0 || shape.n_heads % shape.n_kv_heads != 0 ||
      shape.window < 0) {
    raise(ErrorCode::kInvalidArgument, "attention: bad shape n_heads={} n_kv_heads={} head_dim={} window={}",
          shape.n_heads, shape.n_kv_heads, shape.head_dim, shape.window);
  }
  check_cache(kv, shape.n_kv_heads * shape.head_dim, pos0, rows, "attention");
  if (rows == 0) return;
  const std::int64_t group = shape.n_heads / shape.n_kv_heads;
  const std::int64_t d = shape.head_dim, dp = pad16(d);
  const AttentionPlan plan{q,
                           ldq,
                           pos0,
                           &kv,
                           &shape,
                           group,
                           static_cast<std::size_t>(d) * element_bytes(kv.type, "attention"),
                           kv.type == DType::kF32 ? detail::vec_kernels_for(ctx.isa()).attend_f32
                                                  : detail::vec_kernels_for(ctx.isa()).attend_f16};
  const std::size_t kernel_need = detail::attend_scratch_floats(group, d);
  const std::int64_t part = partial_floats(group, d);
  const std::int64_t pairs = rows * shape.n_kv_heads;
  const std::int64_t max_chunks = chunk_count(plan.count(rows - 1));
  const int threads = ctx.threads();
  const auto row_of = [&](std::int64_t pair) { return rows - 1 - pair / shape.n_kv_heads; };

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
      for (std::int64_t k = next.fetch_add(1, std::memory_order_relaxed); k < items;
           k = next.fetch_add(1, std::memory_order_relaxed)) {
        const std::int64_t pair = k / max_chunks, chunk = k % max_chunks, i = row_of(pair);
        if (chunk >= chunk_count(plan.count(i))) continue;
        if (scratch == nullptr) scratch = ctx.scratch(t, need);
        plan.run_chunk(i, pair % shape.n_kv_heads, chunk, slot(k), scratch);
      }
    });
    for (std::int64_t pair = 0; pair < pairs; ++pair) {
      const std::int64_t i = row_of(pair), g = pair % shape.n_kv_heads;
      const Partial run = slot(pair * max_chunks);
      for (std::int64_t chunk = 1; chunk < chunk_count(plan.count(i)); ++chunk) {
        fold(run, slot(pair * max_chunks + chunk), group, dp);
      }
      finish(run, group, d, out + i * ldo + g * group * d);
    }
    return;
  }

  // Pairs are claimed one at a time, longest rows (latest positions) first, so a prefill's
  // triangular work spreads evenly; which thread runs a pair does not change its result.
  const std::size_t need = kernel_need + static_cast<std::size_t>(2 * part);
  std::atomic<std::int64_t> next{0};
  ctx.pool().run([&](int t, int) {
    float* scratch = nullptr;
    for (std::int64_t pair = next.fetch_add(1, std::memory_order_relaxed); pair < pairs;
         pair = next.fetch_add(1, std::memory_order_relaxed)) {
      if (scratch == nullptr) scratch = ctx.scratch(t, need);
      const Partial run = partial_at(scratch + kernel_need, group, d);
      const Partial chunk = partial_at(scratch + kernel_need + part, group, d);
      const std::int64_t i = row_of(pair), g = pair % shape.n_kv_heads;
      const std::int64_t chunks = chunk_count(plan.count(i));
      for (std::int64_t c = 0; c < chunks; ++c) {
        plan.run_chunk(i, g, c, c == 0 ? run : chunk, scratch);
        if (c > 0) fold(run, chunk, group, dp);
      }
      finish(run, group, d, out + i * ldo + g * group * d);
    }
  });
}

std::size_t attention_scratch_floats(std::int64_t capacity, const AttentionShape& shape) noexcept {
  if (shape.n_heads <= 0 || shape.n_kv_heads <= 0 || shape.head_dim <= 0 || capacity <= 0) return 0;
  const std::int64_t group = shape.n_heads / shape.n_kv_heads;
  // Kernel scratch, then either a running and a chunk partial, or a split's share of chunk
  // partials: fewer than kSplitBelowPairsPerThread * chunk_count(capacity) per thread.
  const std::int64_t slots = std::max<std::int64_t>(2, kSplitBelowPairsPerThread * chunk_count(capacity));
  return detail::attend_scratch_floats(group, shape.head_dim) +
         static_cast<std::size_t>(slots * partial_floats(group, shape.head_dim));
}

}  // namespace sitsrt::cpu
