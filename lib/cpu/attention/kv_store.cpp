// kv_store / kv_store_batch: rows written through the block table, converted or quantized (kv_quant.hpp), with
// the Hadamard rotation of rotated sides; plus the KvLayerView helpers and the argument checks
// attention shares.
#include "cpu/attention/kv_store.hpp"

#include "core/check.hpp"
#include "cpu/attention/kv_quant.hpp"
#include "cpu/vec_kernels.hpp"

#include <array>
#include <cstring>
#include <span>
#include <tuple>
#include <vector>

namespace sitsrt::cpu {

std::size_t kv_row_bytes(KvType type, std::int64_t n_kv_heads, std::int64_t head_dim) noexcept {
  const auto width = static_cast<std::size_t>(n_kv_heads * head_dim);
  switch (type) {
    case KvType::kF32:
      return width * 4;
    case KvType::kF16:
      return width * 2;
    case KvType::kInt8:
      return width + static_cast<std::size_t>(n_kv_heads) * 2;
    case KvType::kInt4:
      return width % 32 == 0 ? width / 2 + width / 32 : 0;  // core/kv_int4.hpp
  }
  return 0;
}

std::size_t kv_head_bytes(KvType type, std::int64_t head_dim) noexcept {
  const auto d = static_cast<std::size_t>(head_dim);
  switch (type) {
    case KvType::kF32:
      return 4 * d;
    case KvType::kF16:
      return 2 * d;
    case KvType::kInt8:
      return d + 2;
    case KvType::kInt4:
      return d % 32 == 0 ? d / 2 + d / 32 : 0;
  }
  return 0;
}

KvLayerView contiguous_kv(KvType k_type, KvType v_type, std::byte* k, std::byte* v, std::size_t k_row_bytes,
                          std::size_t v_row_bytes, std::int64_t capacity) noexcept {
  static constexpr std::array<std::int32_t, 1> kOneBlock{0};
  KvLayerView view;
  view.k_type = k_type;
  view.v_type = v_type;
  view.k = k;
  view.v = v;
  view.k_row_bytes = k_row_bytes;
  view.v_row_bytes = v_row_bytes;
  view.capacity = capacity;
  view.block_size = capacity > 0 ? capacity : 1;
  view.block_table = kOneBlock;
  return view;
}

namespace detail {

void check_cache(const KvLayerView& kv, std::int64_t n_kv_heads, std::int64_t head_dim, std::int64_t pos0,
                 std::int64_t rows, const char* op) {
  if (kv.k == nullptr || kv.v == nullptr) raise(ErrorCode::kInvalidArgument, "{}: null KV cache", op);
  for (const auto& [side, type, bytes, rotated] : {std::tuple{"K", kv.k_type, kv.k_row_bytes, kv.k_rotated},
                                                   std::tuple{"V", kv.v_type, kv.v_row_bytes, kv.v_rotated}}) {
    const std::size_t need = kv_row_bytes(type, n_kv_heads, head_dim);
    if (need == 0 && n_kv_heads * head_dim > 0) {
      raise(ErrorCode::kUnsupported, "{}: {} cache int4 needs a multiple of 32 values per position, not {}", op, side,
            n_kv_heads * head_dim);
    }
    if (bytes < need)
      raise(ErrorCode::kInvalidArgument, "{}: {} row bytes {} below the {} needed", op, side, bytes, need);
    if (rotated && (!is_power_of_two(head_dim) || head_dim > kMaxRotatedHeadDim)) {
      raise(ErrorCode::kUnsupported, "{}: a rotated {} cache needs a power-of-two head_dim <= {}, not {}", op, side,
            kMaxRotatedHeadDim, head_dim);
    }
  }
  if ((kv.k_head_major && kv_head_bytes(kv.k_type, head_dim) == 0) ||
      (kv.v_head_major && kv_head_bytes(kv.v_type, head_dim) == 0)) {
    raise(ErrorCode::kUnsupported, "{}: a head-major int4 cache needs head_dim % 32 == 0 (its scale groups), not {}",
          op, head_dim);
  }
  if (kv.recent_window < 0 || kv.recent_window > kMaxRecentWindow || kv.exact_from < 0) {
    raise(ErrorCode::kInvalidArgument, "{}: recent window {} (0 .. {}) from position {}", op, kv.recent_window,
          kMaxRecentWindow, kv.exact_from);
  }
  if ((kv.k_windowed() && kv.k_recent == nullptr) || (kv.v_windowed() && kv.v_recent == nullptr)) {
    raise(ErrorCode::kInvalidArgument, "{}: a recent window of {} positions without its f16 rows", op,
          kv.recent_window);
  }
  if (pos0 < 0 || rows < 0 || pos0 + rows > kv.capacity) {
    raise(ErrorCode::kInvalidArgument, "{}: positions {}..{} outside the KV cache capacity {}", op, pos0,
          pos0 + rows - 1, kv.capacity);
  }
  if (kv.block_size < 1 || static_cast<std::int64_t>(kv.block_table.size()) * kv.block_size < pos0 + rows) {
    raise(ErrorCode::kInvalidArgument, "{}: {} blocks of {} positions do not cover positions 0..{}", op,
          kv.block_table.size(), kv.block_size, pos0 + rows - 1);
  }
  const std::int64_t used = (pos0 + rows + kv.block_size - 1) / kv.block_size;
  for (std::int64_t b = 0; b < used; ++b) {
    if (kv.block_table[static_cast<std::size_t>(b)] < 0) {
      raise(ErrorCode::kInvalidArgument, "{}: block table entry {} is negative", op, b);
    }
  }
}

}  // namespace detail

namespace {

// One row of one side: rotated heads (if asked) then the type's conversion. Rotation works on
// a stack copy of max(32, head_dim) values at a time, so an int4 group never straddles a copy.
// `exact` (a windowed side's staging row, or null) receives the f16 of the values quantized.
// f16 and int4 go through the ISA's kernels (the same bits as the scalar forms).
void store_row(KvType type, bool rotated, const float* src, std::byte* dst, std::int64_t n_kv_heads,
               std::int64_t head_dim, const detail::VecKernels& vec, std::uint16_t* exact) {
  const auto f32_to_f16 = vec.f32_to_f16_row;
  const std::int64_t width = n_kv_heads * head_dim;
  if (!rotated) {
    if (exact != nullptr) f32_to_f16(src, exact, width);
    if (type == KvType::kF16) {
      f32_to_f16(src, reinterpret_cast<std::uint16_t*>(dst), width);
    } else if (type == KvType::kInt4) {
      vec.int4_quantize_groups(src, width / 32, dst, dst + width / 2);
    } else {
      detail::quantize_row(type, src, n_kv_heads, head_dim, dst);
    }
    return;
  }
  alignas(64) std::array<float, detail::kMaxRotatedHeadDim> tmp;
  const std::int64_t span = std::max<std::int64_t>(32, head_dim);  // a power of two dividing width or > width
  for (std::int64_t e0 = 0; e0 < width; e0 += span) {
    const std::int64_t n = std::min(span, width - e0);
    std::memcpy(tmp.data(), src + e0, static_cast<std::size_t>(n) * 4);
    for (std::int64_t h = 0; h < n; h += head_dim) detail::hadamard_normalized(tmp.data() + h, head_dim);
    if (exact != nullptr) f32_to_f16(tmp.data(), exact + e0, n);
    switch (type) {
      case KvType::kF32:
        std::memcpy(dst + 4 * e0, tmp.data(), static_cast<std::size_t>(n) * 4);
        break;
      case KvType::kF16:
        f32_to_f16(tmp.data(), reinterpret_cast<std::uint16_t*>(dst + 2 * e0), n);
        break;
      case KvType::kInt8: {  // heads of this copy: values at e0, scales after the row's values
        for (std::int64_t h = 0; h < n; h += head_dim) {
          const std::uint16_t s = detail::quantize_span(tmp.data() + h, head_dim, 127.0f, -127.0f,
                                                        reinterpret_cast<std::int8_t*>(dst + e0 + h));
          std::memcpy(dst + width + 2 * ((e0 + h) / head_dim), &s, 2);
        }
        break;
      }
      case KvType::kInt4:  // n and e0 are multiples of 32 here (width is)
        vec.int4_quantize_groups(tmp.data(), n / 32, dst + e0 / 2, dst + width / 2 + e0 / 32);
        break;
    }
  }
}

}  // namespace

void kv_store_batch(CpuContext& ctx, std::span<const KvStoreSequence> sequences, std::int64_t n_kv_heads,
                    std::int64_t head_dim) {
  if (n_kv_heads < 0 || head_dim < 0) {
    raise(ErrorCode::kInvalidArgument, "kv_store: negative shape {} x {}", n_kv_heads, head_dim);
  }
  std::int64_t total = 0;
  for (const KvStoreSequence& s : sequences) {
    detail::check_cache(s.kv, n_kv_heads, head_dim, s.pos0, s.rows, "kv_store");
    if ((s.kv.k_windowed() && s.staging.k == nullptr) || (s.kv.v_windowed() && s.staging.v == nullptr)) {
      raise(ErrorCode::kInvalidArgument, "kv_store: a windowed side without staging rows");
    }
    total += s.rows;
  }
  if (total == 0) return;
  const detail::VecKernels& vec = detail::vec_kernels_for(ctx.isa());
  // Global rows [begin, end) of the sequences in order; a cursor finds each row's sequence.
  const auto store_rows = [&](std::int64_t begin, std::int64_t end) {
    std::size_t s = 0;
    std::int64_t base = 0;
    for (std::int64_t g = begin; g < end; ++g) {
      while (g >= base + sequences[s].rows) base += sequences[s++].rows;
      const KvStoreSequence& q = sequences[s];
      const std::int64_t i = g - base, p = q.pos0 + i;
      const std::size_t row = q.kv.row_index(p);
      const float* k_src = q.k + i * q.ldk;
      if (q.kv.k_offset != nullptr || q.kv.k_scale != nullptr) {  // (k - offset) / scale, then as any row
        thread_local std::vector<float> centered;
        centered.resize(static_cast<std::size_t>(n_kv_heads * head_dim));
        for (std::size_t e = 0; e < centered.size(); ++e) {
          const float x = q.kv.k_offset != nullptr ? k_src[e] - q.kv.k_offset[e] : k_src[e];
          centered[e] = q.kv.k_scale != nullptr ? x / q.kv.k_scale[e] : x;
        }
        k_src = centered.data();
      }
      const std::int64_t width = n_kv_heads * head_dim;
      // A head-major side's row goes through `staged`, then each head vector to its place.
      const auto store_side = [&](KvType type, bool rotated, bool head_major, const float* src, std::byte* plane,
                                  std::size_t row_bytes, std::uint16_t* exact) {
        if (!head_major) {
          store_row(type, rotated, src, plane + row * row_bytes, n_kv_heads, head_dim, vec, exact);
          return;
        }
        thread_local std::vector<std::byte> staged;
        staged.resize(row_bytes);
        store_row(type, rotated, src, staged.data(), n_kv_heads, head_dim, vec, exact);
        // Head h's values and scales in the row-major row (KvType), then in its head row.
        const std::size_t head_bytes = kv_head_bytes(type, head_dim), d = static_cast<std::size_t>(head_dim);
        const std::size_t values = type == KvType::kF32    ? 4 * d
                                   : type == KvType::kF16  ? 2 * d
                                   : type == KvType::kInt8 ? d
                                                           : d / 2;
        const std::size_t all_values = values * static_cast<std::size_t>(n_kv_heads);
        for (std::size_t h = 0; h < static_cast<std::size_t>(n_kv_heads); ++h) {
          std::byte* dst = plane + q.kv.head_row_offset(p, static_cast<std::int64_t>(h), row_bytes, head_bytes);
          std::memcpy(dst, staged.data() + h * values, values);
          const std::size_t scales = head_bytes - values;  // int8: 2 bytes, int4: d / 32 codes
          std::memcpy(dst + values, staged.data() + all_values + h * scales, scales);
        }
      };
      store_side(q.kv.k_type, q.kv.k_rotated, q.kv.k_head_major, k_src, q.kv.k, q.kv.k_row_bytes,
                 q.kv.k_windowed() ? q.staging.k + i * width : nullptr);
      store_side(q.kv.v_type, q.kv.v_rotated, q.kv.v_head_major, q.v + i * q.ldv, q.kv.v, q.kv.v_row_bytes,
                 q.kv.v_windowed() ? q.staging.v + i * width : nullptr);
    }
  };
  // A decode step's row or two per sequence is stored by the calling thread when the batch is
  // small: a fork-join costs more.
  constexpr std::int64_t kInlineElements = 1 << 14;
  if (total * n_kv_heads * head_dim <= kInlineElements) {
    store_rows(0, total);
    return;
  }
  ctx.pool().run([&](int t, int n) {
    const Range r = split_range(total, t, n);
    store_rows(r.begin, r.end);
  });
}

void kv_commit_recent(std::span<const KvStoreSequence> sequences, std::int64_t n_kv_heads, std::int64_t head_dim) {
  const auto row_bytes = static_cast<std::size_t>(n_kv_heads * head_dim) * 2;
  for (const KvStoreSequence& s : sequences) {
    const std::int64_t window = s.kv.recent_window;
    for (std::int64_t i = std::max<std::int64_t>(0, s.rows - window); i < s.rows && window > 0; ++i) {
      const auto slot = static_cast<std::size_t>((s.pos0 + i) % window);
      const auto offset = static_cast<std::size_t>(i) * row_bytes;
      if (s.kv.k_windowed())
        std::memcpy(s.kv.k_recent + slot * row_bytes, reinterpret_cast<const std::byte*>(s.staging.k) + offset,
                    row_bytes);
      if (s.kv.v_windowed())
        std::memcpy(s.kv.v_recent + slot * row_bytes, reinterpret_cast<const std::byte*>(s.staging.v) + offset,
                    row_bytes);
    }
  }
}

void kv_store(CpuContext& ctx, const KvLayerView& kv, const float* k, std::int64_t ldk, const float* v,
              std::int64_t ldv, std::int64_t rows, std::int64_t n_kv_heads, std::int64_t head_dim, std::int64_t pos0) {
  const KvStoreSequence one{kv, k, ldk, v, ldv, rows, pos0};
  kv_store_batch(ctx, std::span<const KvStoreSequence>(&one, 1), n_kv_heads, head_dim);
}

}  // namespace sitsrt::cpu
