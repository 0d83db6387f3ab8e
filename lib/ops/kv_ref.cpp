#include "ops/kv_ref.hpp"

#include "core/check.hpp"

namespace sitsrt::ops {

std::string_view name(KvType type) noexcept {
  switch (type) {
    case KvType::kF32: return "f32";
    case KvType::kF16: return "f16";
    case KvType::kInt8: return "int8";
    case KvType::kInt4: return "int4";
  }
  return "?";
}

KvType parse_kv_type(std::string_view text) {
  for (KvType t : {KvType::kF32, KvType::kF16, KvType::kInt8, KvType::kInt4}) {
    if (text == name(t)) return t;
  }
  raise(ErrorCode::kInvalidArgument, "KV cache type '{}' is not one of f32, f16, int8, int4", text);
}

std::size_t kv_row_bytes(KvType type, std::int64_t n_kv_heads, std::int64_t head_dim) {
  const auto width = static_cast<std::size_t>(n_kv_heads * head_dim);
  switch (type) {
    case KvType::kF32: return width * 4;
    case KvType::kF16: return width * 2;
    case KvType::kInt8: return width + static_cast<std::size_t>(n_kv_heads) * 2;
    case KvType::kInt4:
      if (width % 32 != 0) {
        raise(ErrorCode::kUnsupported, "KV cache type int4 needs a multiple of 32 values per position, not {}", width);
      }
      return width / 2 + width / 32;
  }
  raise(ErrorCode::kInternal, "unknown KV type {}", static_cast<int>(type));
}

}  // namespace sitsrt::ops
