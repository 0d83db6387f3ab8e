// GGUF value-type names, the ggml tensor-type table and the small Value/TensorInfo helpers.
#include "formats/gguf.hpp"

#include <array>

namespace sitsrt::gguf {
namespace {

// Names as ggml prints them (ggml_type_name); empty = an id that ggml never used or has removed.
constexpr std::array<std::string_view, 40> kGgmlTypeNames = {
    "f32",     "f16",    "q4_0",    "q4_1",  "",       "",       "q5_0",  "q5_1",
    "q8_0",    "q8_1",   "q2_K",    "q3_K",  "q4_K",   "q5_K",   "q6_K",  "q8_K",
    "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s",  "iq2_s", "iq4_xs",
    "i8",      "i16",    "i32",     "i64",   "f64",    "iq1_m",  "bf16",  "",
    "",        "",       "tq1_0",   "tq2_0", "",       "",       "",      "mxfp4",
};

// ggml type id of each sitsrt::DType, indexed by the DType value. ggml has no FP8 E4M3 or
// INT4 g128 type: those use sitsrt-private ids from kPrivateTypeBase on (files that only
// sitsrt reads; llama.cpp rejects them as unknown types).
constexpr std::uint32_t kPrivateTypeBase = 0x5300;
constexpr std::array<std::uint32_t, kDTypeCount> kGgmlIdOfDType = {
    0,   // kF32
    1,   // kF16
    30,  // kBF16
    8,   // kQ8_0
    2,   // kQ4_0
    3,   // kQ4_1
    6,   // kQ5_0
    7,   // kQ5_1
    kPrivateTypeBase + 0,  // kFP8_E4M3
    kPrivateTypeBase + 1,  // kQ4_G128
    // K-quant section: kQ2_K .. kQ8_K, kIQ4_NL
    10, 11, 12, 13, 14, 15, 20,
};

}  // namespace

std::string_view name(ValueType type) noexcept {
  switch (type) {
    case ValueType::kU8: return "u8";
    case ValueType::kI8: return "i8";
    case ValueType::kU16: return "u16";
    case ValueType::kI16: return "i16";
    case ValueType::kU32: return "u32";
    case ValueType::kI32: return "i32";
    case ValueType::kF32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kU64: return "u64";
    case ValueType::kI64: return "i64";
    case ValueType::kF64: return "f64";
  }
  return "unknown";
}

std::optional<DType> dtype_from_ggml_type(std::uint32_t ggml_type) noexcept {
  for (std::size_t i = 0; i < kGgmlIdOfDType.size(); ++i) {
    if (kGgmlIdOfDType[i] == ggml_type) return static_cast<DType>(i);
  }
  return std::nullopt;
}

std::uint32_t ggml_type_from_dtype(DType type) noexcept {
  return kGgmlIdOfDType[static_cast<std::size_t>(type)];
}

std::string_view ggml_type_name(std::uint32_t ggml_type) noexcept {
  if (ggml_type >= kPrivateTypeBase) {
    const std::optional<DType> own = dtype_from_ggml_type(ggml_type);
    return own ? name(*own) : "unknown";
  }
  if (ggml_type >= kGgmlTypeNames.size() || kGgmlTypeNames[ggml_type].empty()) return "unknown";
  return kGgmlTypeNames[ggml_type];
}

std::int64_t TensorInfo::elements() const noexcept {
  std::int64_t n = 1;
  for (const std::int64_t d : dims) n *= d;  // validated at open/add_tensor: < 2^62
  return n;
}

Value Value::string_array(std::span<const std::string> items) {
  std::vector<Value> values;
  values.reserve(items.size());
  for (const auto& s : items) values.push_back(Value::string(s));
  return array(ValueType::kString, std::move(values));
}

Value Value::f32_array(std::span<const float> items) {
  std::vector<Value> values;
  values.reserve(items.size());
  for (const float v : items) values.push_back(Value::f32(v));
  return array(ValueType::kF32, std::move(values));
}

Value Value::i32_array(std::span<const std::int32_t> items) {
  std::vector<Value> values;
  values.reserve(items.size());
  for (const std::int32_t v : items) values.push_back(Value::i32(v));
  return array(ValueType::kI32, std::move(values));
}

}  // namespace sitsrt::gguf
