// kv_store / attention: argument checks, thread split over (query row, kv head) pairs and
// scratch hand-out. The per-pair arithmetic is in vec_{generic,avx2,avx512}.cpp.
#include "cpu/attention.hpp"

#include "core/check.hpp"
#include "cpu/vec_kernels.hpp"

#include <algorithm>
#include <atomic>
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
  const auto store_row = [&](const float* src, std::byte* dst) {
    if (kv.type == DType::kF32) {
      std::memcpy(dst, src, static_cast<std::size_t>(kv_width) * 4);
    } else {
      f32_to_f16(src, reinterpret_cast<std::uint16_t*>(dst), kv_width);
    }
  };
  ctx.pool().run([&](int t, int n) {
    const Range r = split_range(rows, t, n);
    for (std::int64_t i = r.begin; i < r.end; ++i) {
      const std::size_t offset = static_cast<std::size_t>(pos0 + i) * kv.row_stride;
      store_row(k + i * ldk, kv.k + offset);
      store_row(v + i * ldv, kv.v + offset);
    }
  });
}

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
  const std::int64_t d = shape.head_dim;
  const std::size_t head_bytes = static_cast<std::size_t>(d) * element_bytes(kv.type, "attention");
  const detail::AttendFn attend = kv.type == DType::kF32 ? detail::vec_kernels_for(ctx.isa()).attend_f32
                                                         : detail::vec_kernels_for(ctx.isa()).attend_f16;
  const std::size_t need = detail::attend_scratch_floats(pos0 + rows, group, d);
  const std::int64_t pairs = rows * shape.n_kv_heads;
  // Pairs are claimed one at a time, longest rows (latest positions) first, so a prefill's
  // triangular work spreads evenly; which thread runs a pair does not change its result.
  std::atomic<std::int64_t> next{0};
  ctx.pool().run([&](int t, int) {
    float* scratch = nullptr;
    for (std::int64_t idx = next.fetch_add(1, std::memory_order_relaxed); idx < pairs;
         idx = next.fetch_add(1, std::memory_order_relaxed)) {
      if (scratch == nullptr) scratch = ctx.scratch(t, need);
      const std::int64_t i = rows - 1 - idx / shape.n_kv_heads;
      const std::int64_t g = idx % shape.n_kv_heads;
      const std::int64_t pos = pos0 + i;
      const std::int64_t first = shape.window > 0 ? std::max<std::int64_t>(0, pos - shape.window + 1) : 0;
      const std::size_t skip = static_cast<std::size_t>(first) * kv.row_stride;
      detail::AttendArgs args{};
      args.q = q + i * ldq + g * group * d;
      args.k = kv.k + skip + static_cast<std::size_t>(g) * head_bytes;
      args.v = kv.v + skip + static_cast<std::size_t>(g) * head_bytes;
      args.row_stride = kv.row_stride;
      args.group = group;
      args.n = pos - first + 1;
      args.head_dim = d;
      args.scale = shape.scale;
      args.out = out + i * ldo + g * group * d;
      args.scratch = scratch;
      attend(args);
    }
  });
}

std::size_t attention_scratch_floats(std::int64_t capacity, const AttentionShape& shape) noexcept {
  if (shape.n_heads <= 0 || shape.n_kv_heads <= 0 || shape.head_dim <= 0 || capacity <= 0) return 0;
  return detail::attend_scratch_floats(capacity, shape.n_heads / shape.n_kv_heads, shape.head_dim);
}

}  // namespace sitsrt::cpu
