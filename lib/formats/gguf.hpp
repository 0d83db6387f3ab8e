// GGUF (v2, v3) reader: the file is mmapped, validated strictly up front, and tensors are
// handed out as views into the mapping. Every failure names the file and the field.
//
// Threading: a File is immutable after open/parse; every const member may be called from any
// number of threads at once. Copies share the mapping (it lives as long as the last copy).
#pragma once

#include "core/dtype.hpp"
#include "core/mapped_file.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace sitsrt::gguf {

// Metadata value types, numbered as in the GGUF specification.
enum class ValueType : std::uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
std::string_view name(ValueType type) noexcept;  // "u32", "string", ...; "unknown" out of range

inline constexpr std::uint64_t kDefaultAlignment = 32;  // when general.alignment is absent
inline constexpr int kMaxDims = 4;                      // GGML_MAX_DIMS
inline constexpr int kMaxArrayDepth = 8;                // arrays of arrays, nesting limit

struct Value;
struct Array {
  ValueType element_type = ValueType::kU8;
  std::vector<Value> items;  // arrays may nest (element_type == kArray)
  friend bool operator==(const Array&, const Array&) = default;
};

// One metadata value. Integers of every width are held as int64/uint64, floats as double;
// `type` remembers the stored width so the writer reproduces the file exactly.
// Held alternative by type: kU8/kU16/kU32/kU64 -> uint64, kI8/kI16/kI32/kI64 -> int64,
// kF32/kF64 -> double, kBool -> bool, kString -> string, kArray -> Array.
struct Value {
  ValueType type = ValueType::kU8;
  std::variant<std::uint64_t, std::int64_t, double, bool, std::string, Array> data;

  static Value u8(std::uint8_t v) { return {ValueType::kU8, std::uint64_t{v}}; }
  static Value i8(std::int8_t v) { return {ValueType::kI8, std::int64_t{v}}; }
  static Value u16(std::uint16_t v) { return {ValueType::kU16, std::uint64_t{v}}; }
  static Value i16(std::int16_t v) { return {ValueType::kI16, std::int64_t{v}}; }
  static Value u32(std::uint32_t v) { return {ValueType::kU32, std::uint64_t{v}}; }
  static Value i32(std::int32_t v) { return {ValueType::kI32, std::int64_t{v}}; }
  static Value u64(std::uint64_t v) { return {ValueType::kU64, v}; }
  static Value i64(std::int64_t v) { return {ValueType::kI64, v}; }
  static Value f32(float v) { return {ValueType::kF32, double{v}}; }
  static Value f64(double v) { return {ValueType::kF64, v}; }
  static Value boolean(bool v) { return {ValueType::kBool, v}; }
  static Value string(std::string v) { return {ValueType::kString, std::move(v)}; }
  static Value array(ValueType element_type, std::vector<Value> items) {
    return {ValueType::kArray, Array{element_type, std::move(items)}};
  }
  // Typed array shorthands (tokenizer vocabularies, scores, token types).
  static Value string_array(std::span<const std::string> items);
  static Value f32_array(std::span<const float> items);
  static Value i32_array(std::span<const std::int32_t> items);

  // Exact comparison (NaN != NaN, as for double).
  friend bool operator==(const Value&, const Value&) = default;
};

struct KeyValue {
  std::string key;
  Value value;
};

// GGML tensor type ids (the subset this build can read maps onto sitsrt::DType).
std::optional<DType> dtype_from_ggml_type(std::uint32_t ggml_type) noexcept;
std::uint32_t ggml_type_from_dtype(DType type) noexcept;
std::string_view ggml_type_name(std::uint32_t ggml_type) noexcept;  // "q4_K", or "unknown"

struct TensorInfo {
  std::string name;
  std::vector<std::int64_t> dims;  // GGUF order: dims[0] is the innermost (contiguous) dimension
  DType type = DType::kF32;
  std::uint64_t offset = 0;        // from the start of the data section
  std::uint64_t bytes = 0;
  [[nodiscard]] std::int64_t elements() const noexcept;
};

class File {
 public:
  // Maps and validates `path`. Throws sitsrt::Error (kIo, kInvalidModel, kUnsupported) whose
  // message starts with the path and names the offending field, key or tensor.
  // kUnsupported: GGUF version other than 2/3, or a tensor type outside sitsrt::DType.
  static File open(const std::string& path);

  // Parses an in-memory image (used by tests and fuzzers); `bytes` must outlive the File.
  static File parse(std::span<const std::byte> bytes, std::string display_name);

  [[nodiscard]] const std::string& path() const noexcept { return name_; }
  [[nodiscard]] std::uint32_t version() const noexcept { return version_; }
  [[nodiscard]] std::uint64_t alignment() const noexcept { return alignment_; }
  [[nodiscard]] std::uint64_t data_offset() const noexcept { return data_offset_; }
  [[nodiscard]] std::size_t file_size() const noexcept { return bytes_.size(); }
  // True when the bytes are this File's own read-only mapping (not a caller-owned image).
  [[nodiscard]] bool mapped() const noexcept { return mapping_ != nullptr; }
  // The mapping the bytes live in (nullptr for a caller-owned image): its identity says which
  // file, in which state, the bytes came from.
  [[nodiscard]] const MappedFile* mapping() const noexcept { return mapping_.get(); }
  [[nodiscard]] const std::vector<KeyValue>& metadata() const noexcept { return metadata_; }   // file order
  [[nodiscard]] const std::vector<TensorInfo>& tensors() const noexcept { return tensors_; }  // file order

  // O(log n) lookups; nullptr when absent.
  [[nodiscard]] const Value* find(std::string_view key) const noexcept;
  [[nodiscard]] const TensorInfo* find_tensor(std::string_view name) const noexcept;

  // Typed metadata access. The `require_*` forms throw kInvalidModel naming the file and the key
  // when the key is missing or has an incompatible type; `get_*` return nullopt when missing
  // (and still throw on a wrong type). Integer getters accept any integer width that fits:
  // get_uint rejects negative values, get_int rejects u64 values above INT64_MAX.
  // get_float accepts f32, f64 and integers.
  [[nodiscard]] std::optional<std::uint64_t> get_uint(std::string_view key) const;
  [[nodiscard]] std::uint64_t require_uint(std::string_view key) const;
  [[nodiscard]] std::optional<std::int64_t> get_int(std::string_view key) const;
  [[nodiscard]] std::optional<double> get_float(std::string_view key) const;
  [[nodiscard]] std::optional<bool> get_bool(std::string_view key) const;
  [[nodiscard]] std::optional<std::string> get_string(std::string_view key) const;
  [[nodiscard]] std::string require_string(std::string_view key) const;
  // Array accessors: throw when the key holds something else; nullptr/empty when missing.
  [[nodiscard]] const Array* get_array(std::string_view key) const;
  // Views into this File's metadata (valid while the File lives); the element type must be string.
  [[nodiscard]] std::vector<std::string_view> get_string_array(std::string_view key) const;
  // Elements of type f32 or f64.
  [[nodiscard]] std::vector<float> get_float_array(std::string_view key) const;
  // Elements of any integer type (u64 above INT64_MAX is an error).
  [[nodiscard]] std::vector<std::int64_t> get_int_array(std::string_view key) const;

  // Raw bytes of a tensor inside the mapping (validated at open). `info` must come from this File.
  [[nodiscard]] std::span<const std::byte> tensor_data(const TensorInfo& info) const noexcept;

 private:
  File() = default;
  void parse_all();
  [[noreturn]] void missing(std::string_view key) const;
  [[noreturn]] void wrong_type(std::string_view key, const Value& value, std::string_view expected) const;

  std::shared_ptr<MappedFile> mapping_;  // null when parsing a caller-owned image
  std::span<const std::byte> bytes_;
  std::string name_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = kDefaultAlignment;
  std::uint64_t data_offset_ = 0;
  std::vector<KeyValue> metadata_;
  std::vector<TensorInfo> tensors_;
  // Indices into metadata_/tensors_ sorted by key/name: copy-safe lookup without hashing.
  std::vector<std::uint32_t> metadata_by_key_;
  std::vector<std::uint32_t> tensors_by_name_;
};

}  // namespace sitsrt::gguf
