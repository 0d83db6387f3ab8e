// GGUF reader. Layout (all little-endian; v2 and v3 are identical on little-endian hosts):
//   header      magic u32 "GGUF", version u32, tensor_count u64, kv_count u64
//   metadata    kv_count x (key: u64 length + bytes, value type u32, value)
//   tensor info tensor_count x (name string, n_dims u32, dims u64[n_dims], ggml type u32, offset u64)
//   padding     to general.alignment (default 32)
//   data        tensors at their offsets (relative to the start of the data section)
// Every count and length is checked against the bytes left before anything is allocated, so a
// corrupt or hostile file fails with a message instead of a giant allocation or a crash.
#include "formats/gguf.hpp"

#include "core/check.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>

namespace sitsrt::gguf {
namespace {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

constexpr std::uint32_t kMagic = 0x46554747u;  // "GGUF" read as a little-endian u32
// Smallest encodings, used to bound counts by the bytes left before reserving anything:
// a kv is a non-empty key (8 + 1), a value type (4) and at least a 1-byte value;
// a tensor info is a non-empty name (8 + 1), n_dims (4), one dim (8), a type (4), an offset (8).
constexpr std::uint64_t kMinKvBytes = 14;
constexpr std::uint64_t kMinTensorInfoBytes = 33;
constexpr std::uint64_t kMaxNameBytes = 64 * 1024;
constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 62;
// Each array element becomes a ~48-byte Value, so without a cap a file of N bytes could make us
// allocate ~48N. Real arrays (vocabularies, merges) stay far below 2^24 elements in total.
constexpr std::uint64_t kMaxArrayElements = std::uint64_t{1} << 24;
// Counts are only bounded by the file size; reserve at most this many entries up front so a bogus
// count in a multi-gigabyte file cannot request gigabytes before the entries fail to parse.
constexpr std::uint64_t kMaxReserve = 1 << 16;
constexpr std::uint32_t kLastValueType = static_cast<std::uint32_t>(ValueType::kF64);

// Bytes of the smallest encoding of one value of `type`.
constexpr std::uint64_t min_encoded_bytes(ValueType type) noexcept {
  switch (type) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kBool: return 1;
    case ValueType::kU16: case ValueType::kI16: return 2;
    case ValueType::kU32: case ValueType::kI32: case ValueType::kF32: return 4;
    case ValueType::kU64: case ValueType::kI64: case ValueType::kF64: return 8;
    case ValueType::kString: return 8;  // the length alone
    case ValueType::kArray: return 12;  // element type + length
  }
  return 1;
}

bool is_unsigned(ValueType t) noexcept {
  return t == ValueType::kU8 || t == ValueType::kU16 || t == ValueType::kU32 || t == ValueType::kU64;
}
bool is_signed(ValueType t) noexcept {
  return t == ValueType::kI8 || t == ValueType::kI16 || t == ValueType::kI32 || t == ValueType::kI64;
}

std::string supported_types() {
  std::string list;
  for (int i = 0; i < kDTypeCount; ++i) {
    if (!list.empty()) list += ", ";
    list += name(static_cast<DType>(i));
  }
  return list;
}

struct ParsedImage {
  std::uint32_t version = 0;
  std::uint64_t alignment = kDefaultAlignment;
  std::uint64_t data_offset = 0;
  std::vector<KeyValue> metadata;
  std::vector<TensorInfo> tensors;
  std::vector<std::uint32_t> metadata_by_key;
  std::vector<std::uint32_t> tensors_by_name;
};

// Indices of `items` sorted by name (ties by position, so the first duplicate is reported first).
template <typename Item, typename NameOf>
std::vector<std::uint32_t> sorted_order(const std::vector<Item>& items, NameOf name_of) {
  std::vector<std::uint32_t> order(items.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::ranges::sort(order, [&](std::uint32_t a, std::uint32_t b) {
    const std::string_view na = name_of(items[a]), nb = name_of(items[b]);
    return na != nb ? na < nb : a < b;
  });
  return order;
}

template <typename Item, typename NameOf>
const Item* lookup(const std::vector<Item>& items, const std::vector<std::uint32_t>& order,
                   std::string_view wanted, NameOf name_of) noexcept {
  const auto it = std::ranges::lower_bound(order, wanted, {},
                                           [&](std::uint32_t i) { return std::string_view(name_of(items[i])); });
  if (it == order.end() || name_of(items[*it]) != wanted) return nullptr;
  return &items[*it];
}

const std::string& key_of(const KeyValue& kv) noexcept { return kv.key; }
const std::string& name_of(const TensorInfo& t) noexcept { return t.name; }

// Single-pass cursor over the image. `context_` (set once per kv and per tensor) plus the array
// index path say where the cursor is, so error messages name the field while per-element reads
// format nothing unless they fail.
class Parser {
 public:
  Parser(std::span<const std::byte> bytes, std::string_view name) : bytes_(bytes), name_(name) {}

  ParsedImage run() {
    ParsedImage image;
    context_ = "header";
    const auto magic = read<std::uint32_t>("magic");
    if (magic != kMagic) {
      fail(ErrorCode::kInvalidModel, "bad magic {:#010x} (expected {:#010x}, \"GGUF\"): not a GGUF file", magic,
           kMagic);
    }
    image.version = read<std::uint32_t>("version");
    check_version(image.version);
    const auto tensor_count = read<std::uint64_t>("tensor count");
    const auto kv_count = read<std::uint64_t>("metadata kv count");
    check_count(kv_count, kMinKvBytes, "metadata kv count", "metadata entry");
    check_count(tensor_count, kMinTensorInfoBytes, "tensor count", "tensor info");

    read_metadata(image, kv_count);
    image.metadata_by_key = sorted_order(image.metadata, key_of);
    reject_duplicates(image.metadata, image.metadata_by_key, key_of, "metadata key", "entries");
    image.alignment = read_alignment(image);

    context_ = "header";
    check_count(tensor_count, kMinTensorInfoBytes, "tensor count", "tensor info");  // tighter now
    image.tensors.reserve(std::min(tensor_count, kMaxReserve));
    for (std::uint64_t i = 0; i < tensor_count; ++i) image.tensors.push_back(read_tensor_info(i));
    image.tensors_by_name = sorted_order(image.tensors, name_of);
    reject_duplicates(image.tensors, image.tensors_by_name, name_of, "tensor name", "tensor infos");

    // pos_ <= file size and alignment <= 2^31, so this cannot overflow.
    image.data_offset = (pos_ + image.alignment - 1) / image.alignment * image.alignment;
    check_placement(image);
    return image;
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) const {
    raise(code, "{}: {}", name_, fmt::format(format, std::forward<Args>(args)...));
  }

  [[nodiscard]] std::uint64_t left() const noexcept { return bytes_.size() - pos_; }

  // "header", "metadata key 'k'", "metadata key 'k'[3][0]", "tensor 't'".
  [[nodiscard]] std::string where() const {
    std::string text = context_;
    for (int d = 0; d < array_depth_; ++d) text += fmt::format("[{}]", index_path_[d]);
    return text;
  }

  template <typename T>
  T take() noexcept {  // caller has checked the bounds
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  template <typename T>
  T read(std::string_view field) {
    if (left() < sizeof(T)) {
      fail(ErrorCode::kInvalidModel, "truncated at offset {}: {} needs {} bytes for its {}, {} left", pos_, where(),
           sizeof(T), field, left());
    }
    return take<T>();
  }

  std::string_view read_string(std::string_view field, std::uint64_t max_bytes) {
    if (left() < sizeof(std::uint64_t)) {  // not read<>: no formatting on the per-string hot path
      fail(ErrorCode::kInvalidModel, "truncated at offset {}: {} needs 8 bytes for its {} length, {} left", pos_,
           where(), field, left());
    }
    const auto length = take<std::uint64_t>();
    if (length > left()) {
      fail(ErrorCode::kInvalidModel, "{}: {} length {} exceeds the {} bytes left in the file", where(), field, length,
           left());
    }
    if (length > max_bytes) {
      fail(ErrorCode::kInvalidModel, "{}: {} length {} exceeds the limit of {} bytes", where(), field, length,
           max_bytes);
    }
    const std::string_view text(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
    pos_ += length;
    return text;
  }

  void check_version(std::uint32_t version) const {
    if (version == 2 || version == 3) return;
    const std::uint32_t swapped = __builtin_bswap32(version);
    if (swapped == 2 || swapped == 3) {
      fail(ErrorCode::kUnsupported, "unsupported GGUF version {} (a big-endian version {} file; this reader needs "
           "little-endian)", version, swapped);
    }
    fail(ErrorCode::kUnsupported, "unsupported GGUF version {} (this reader handles versions 2 and 3)", version);
  }

  void check_count(std::uint64_t count, std::uint64_t min_bytes, std::string_view field,
                   std::string_view item) const {
    // The lookup indices are 32-bit; 2^32 entries would need a file of over 56 GiB of headers.
    if (count > left() / min_bytes || count > std::numeric_limits<std::uint32_t>::max()) {
      fail(ErrorCode::kInvalidModel, "header: {} {} is impossible: each {} needs at least {} bytes and only {} are left",
           field, count, item, min_bytes, left());
    }
  }

  void read_metadata(ParsedImage& image, std::uint64_t count) {
    image.metadata.reserve(std::min(count, kMaxReserve));
    for (std::uint64_t i = 0; i < count; ++i) {
      context_ = fmt::format("metadata entry #{}", i);
      array_depth_ = 0;
      const std::string_view key = read_string("key string", kMaxNameBytes);
      if (key.empty()) fail(ErrorCode::kInvalidModel, "{}: key is empty", where());
      context_ = fmt::format("metadata key '{}'", key);
      const auto raw_type = read<std::uint32_t>("value type");
      if (raw_type > kLastValueType) fail(ErrorCode::kInvalidModel, "{}: value type {} is unknown", where(), raw_type);
      image.metadata.push_back({std::string(key), read_value(static_cast<ValueType>(raw_type), 0)});
    }
  }

  // `depth` = number of arrays enclosing this value.
  Value read_value(ValueType type, int depth) {
    switch (type) {
      case ValueType::kU8: return {type, std::uint64_t{read<std::uint8_t>("value")}};
      case ValueType::kI8: return {type, std::int64_t{read<std::int8_t>("value")}};
      case ValueType::kU16: return {type, std::uint64_t{read<std::uint16_t>("value")}};
      case ValueType::kI16: return {type, std::int64_t{read<std::int16_t>("value")}};
      case ValueType::kU32: return {type, std::uint64_t{read<std::uint32_t>("value")}};
      case ValueType::kI32: return {type, std::int64_t{read<std::int32_t>("value")}};
      case ValueType::kU64: return {type, read<std::uint64_t>("value")};
      case ValueType::kI64: return {type, read<std::int64_t>("value")};
      case ValueType::kF32: return {type, double{read<float>("value")}};
      case ValueType::kF64: return {type, read<double>("value")};
      case ValueType::kBool: {
        const auto byte = read<std::uint8_t>("value");
        // Anything but 0/1 could not be written back identically, and no writer produces it.
        if (byte > 1) fail(ErrorCode::kInvalidModel, "{}: bool value {} is neither 0 nor 1", where(), byte);
        return {type, byte == 1};
      }
      case ValueType::kString: return {type, std::string(read_string("string", left()))};
      case ValueType::kArray: return {type, read_array(depth)};
    }
    fail(ErrorCode::kInternal, "{}: unhandled value type {}", where(), static_cast<std::uint32_t>(type));
  }

  // Fixed-size elements: the bounds were checked once for the whole array, so no per-element checks.
  template <typename Stored, typename Held>
  void take_all(Array& array, std::uint64_t count) {
    for (std::uint64_t i = 0; i < count; ++i) {
      array.items.push_back(Value{array.element_type, static_cast<Held>(take<Stored>())});
    }
  }

  Array read_array(int depth) {
    if (depth >= kMaxArrayDepth) {
      fail(ErrorCode::kInvalidModel, "{}: arrays are nested more than {} deep", where(), kMaxArrayDepth);
    }
    const auto raw_type = read<std::uint32_t>("array element type");
    if (raw_type > kLastValueType) {
      fail(ErrorCode::kInvalidModel, "{}: array element type {} is unknown", where(), raw_type);
    }
    Array array{static_cast<ValueType>(raw_type), {}};
    const auto count = read<std::uint64_t>("array length");
    const std::uint64_t min_bytes = min_encoded_bytes(array.element_type);
    if (count > left() / min_bytes) {
      fail(ErrorCode::kInvalidModel,
           "{}: array length {} is impossible: each {} element needs at least {} bytes and only {} are left", where(),
           count, name(array.element_type), min_bytes, left());
    }
    array_elements_ += count;  // count <= file size, so no overflow
    if (array_elements_ > kMaxArrayElements) {
      fail(ErrorCode::kInvalidModel, "{}: array length {} takes the metadata past this reader's limit of {} array "
           "elements in total", where(), count, kMaxArrayElements);
    }
    array.items.reserve(count);  // bounded by the bytes left and by kMaxArrayElements
    switch (array.element_type) {
      case ValueType::kU8: take_all<std::uint8_t, std::uint64_t>(array, count); return array;
      case ValueType::kI8: take_all<std::int8_t, std::int64_t>(array, count); return array;
      case ValueType::kU16: take_all<std::uint16_t, std::uint64_t>(array, count); return array;
      case ValueType::kI16: take_all<std::int16_t, std::int64_t>(array, count); return array;
      case ValueType::kU32: take_all<std::uint32_t, std::uint64_t>(array, count); return array;
      case ValueType::kI32: take_all<std::int32_t, std::int64_t>(array, count); return array;
      case ValueType::kU64: take_all<std::uint64_t, std::uint64_t>(array, count); return array;
      case ValueType::kI64: take_all<std::int64_t, std::int64_t>(array, count); return array;
      case ValueType::kF32: take_all<float, double>(array, count); return array;
      case ValueType::kF64: take_all<double, double>(array, count); return array;
      case ValueType::kBool: case ValueType::kString: case ValueType::kArray: break;
    }
    array_depth_ = depth + 1;
    for (std::uint64_t i = 0; i < count; ++i) {
      index_path_[depth] = i;
      array.items.push_back(read_value(array.element_type, depth + 1));
    }
    array_depth_ = depth;
    return array;
  }

  std::uint64_t read_alignment(const ParsedImage& image) const {
    const KeyValue* entry = lookup(image.metadata, image.metadata_by_key, "general.alignment", key_of);
    if (entry == nullptr) return kDefaultAlignment;
    if (entry->value.type != ValueType::kU32) {
      fail(ErrorCode::kInvalidModel, "metadata key 'general.alignment' has type {}, expected u32",
           name(entry->value.type));
    }
    const auto alignment = std::get<std::uint64_t>(entry->value.data);
    if (!std::has_single_bit(alignment)) {
      fail(ErrorCode::kInvalidModel, "metadata key 'general.alignment' = {} is not a power of two", alignment);
    }
    return alignment;
  }

  TensorInfo read_tensor_info(std::uint64_t index) {
    context_ = fmt::format("tensor info #{}", index);
    array_depth_ = 0;
    TensorInfo info;
    info.name = std::string(read_string("name string", kMaxNameBytes));
    if (info.name.empty()) fail(ErrorCode::kInvalidModel, "{}: name is empty", where());
    context_ = fmt::format("tensor '{}'", info.name);

    const auto n_dims = read<std::uint32_t>("n_dims");
    if (n_dims == 0 || n_dims > kMaxDims) {
      fail(ErrorCode::kInvalidModel, "{}: n_dims {} is outside 1..{}", where(), n_dims, kMaxDims);
    }
    std::vector<std::uint64_t> raw_dims(n_dims);
    for (auto& d : raw_dims) d = read<std::uint64_t>("dims");
    std::uint64_t elements = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      if (raw_dims[d] == 0) {
        fail(ErrorCode::kInvalidModel, "{}: dims[{}] is 0 (every dimension must be at least 1)", where(), d);
      }
      if (raw_dims[d] >= kMaxElements || elements > (kMaxElements - 1) / raw_dims[d]) {
        fail(ErrorCode::kInvalidModel, "{}: dims [{}] hold 2^62 or more elements", where(), fmt::join(raw_dims, ", "));
      }
      elements *= raw_dims[d];
    }
    info.dims.assign(raw_dims.begin(), raw_dims.end());  // each < 2^62: fits int64

    const auto ggml_type = read<std::uint32_t>("type");
    const auto dtype = dtype_from_ggml_type(ggml_type);
    if (!dtype) {
      if (ggml_type_name(ggml_type) == "unknown") {
        fail(ErrorCode::kInvalidModel, "tensor '{}' has unknown ggml type {}", info.name, ggml_type);
      }
      fail(ErrorCode::kUnsupported, "tensor '{}' has type {}, which this build does not support (supported: {})",
           info.name, ggml_type_name(ggml_type), supported_types());
    }
    info.type = *dtype;
    const auto& traits = sitsrt::traits(info.type);
    if (raw_dims[0] % static_cast<std::uint64_t>(traits.block_size) != 0) {
      fail(ErrorCode::kInvalidModel, "{}: dims[0] = {} is not a multiple of the {}-element {} block", where(),
           raw_dims[0], traits.block_size, traits.name);
    }
    // elements < 2^62 and block_bytes / block_size <= 4 (f32), so this stays below 2^64.
    info.bytes = elements / static_cast<std::uint64_t>(traits.block_size) *
                 static_cast<std::uint64_t>(traits.block_bytes);
    info.offset = read<std::uint64_t>("offset");
    return info;
  }

  void check_placement(const ParsedImage& image) {
    array_depth_ = 0;
    const std::uint64_t size = bytes_.size();
    const std::uint64_t data_bytes = image.data_offset <= size ? size - image.data_offset : 0;
    for (const auto& t : image.tensors) {
      context_ = fmt::format("tensor '{}'", t.name);
      if (t.offset % image.alignment != 0) {
        fail(ErrorCode::kInvalidModel, "{}: offset {} is not a multiple of the alignment {}", where(), t.offset,
             image.alignment);
      }
      if (t.offset > data_bytes || t.bytes > data_bytes - t.offset) {
        fail(ErrorCode::kInvalidModel, "{}: data at offset {} ({} bytes) extends past the end of the file: the data "
             "section holds {} bytes from file offset {}", where(), t.offset, t.bytes, data_bytes, image.data_offset);
      }
    }
    // Overlapping tensors would alias each other's weights: no writer produces them.
    std::vector<const TensorInfo*> by_offset;
    by_offset.reserve(image.tensors.size());
    for (const auto& t : image.tensors) by_offset.push_back(&t);
    std::ranges::sort(by_offset, {}, &TensorInfo::offset);
    for (std::size_t i = 1; i < by_offset.size(); ++i) {
      const TensorInfo& a = *by_offset[i - 1];
      const TensorInfo& b = *by_offset[i];
      if (a.offset + a.bytes > b.offset) {
        fail(ErrorCode::kInvalidModel, "tensors '{}' (offset {}, {} bytes) and '{}' (offset {}) overlap", a.name,
             a.offset, a.bytes, b.name, b.offset);
      }
    }
  }

  template <typename Item, typename NameOf>
  void reject_duplicates(const std::vector<Item>& items, const std::vector<std::uint32_t>& order, NameOf name_of,
                         std::string_view what, std::string_view plural) const {
    for (std::size_t i = 1; i < order.size(); ++i) {
      if (name_of(items[order[i - 1]]) == name_of(items[order[i]])) {
        fail(ErrorCode::kInvalidModel, "duplicate {} '{}' ({} #{} and #{})", what, name_of(items[order[i]]), plural,
             order[i - 1], order[i]);
      }
    }
  }

  std::span<const std::byte> bytes_;
  std::string_view name_;
  std::uint64_t pos_ = 0;
  std::string context_;
  std::array<std::uint64_t, kMaxArrayDepth> index_path_{};
  int array_depth_ = 0;
  std::uint64_t array_elements_ = 0;
};

}  // namespace

File File::open(const std::string& path) {
  File file;
  file.mapping_ = std::make_shared<MappedFile>(path);
  file.bytes_ = file.mapping_->bytes();
  file.name_ = path;
  file.parse_all();
  return file;
}

File File::parse(std::span<const std::byte> bytes, std::string display_name) {
  File file;
  file.bytes_ = bytes;
  file.name_ = std::move(display_name);
  file.parse_all();
  return file;
}

void File::parse_all() {
  ParsedImage image = Parser(bytes_, name_).run();
  version_ = image.version;
  alignment_ = image.alignment;
  data_offset_ = image.data_offset;
  metadata_ = std::move(image.metadata);
  tensors_ = std::move(image.tensors);
  metadata_by_key_ = std::move(image.metadata_by_key);
  tensors_by_name_ = std::move(image.tensors_by_name);
}

const Value* File::find(std::string_view key) const noexcept {
  const KeyValue* entry = lookup(metadata_, metadata_by_key_, key, key_of);
  return entry == nullptr ? nullptr : &entry->value;
}

const TensorInfo* File::find_tensor(std::string_view name) const noexcept {
  return lookup(tensors_, tensors_by_name_, name, name_of);
}

std::span<const std::byte> File::tensor_data(const TensorInfo& info) const noexcept {
  return bytes_.subspan(data_offset_ + info.offset, info.bytes);
}

void File::missing(std::string_view key) const {
  raise(ErrorCode::kInvalidModel, "{}: missing required metadata key '{}'", name_, key);
}

void File::wrong_type(std::string_view key, const Value& value, std::string_view expected) const {
  if (value.type == ValueType::kArray) {
    raise(ErrorCode::kInvalidModel, "{}: metadata key '{}' has type array of {}, expected {}", name_, key,
          name(std::get<Array>(value.data).element_type), expected);
  }
  raise(ErrorCode::kInvalidModel, "{}: metadata key '{}' has type {}, expected {}", name_, key, name(value.type),
        expected);
}

std::optional<std::uint64_t> File::get_uint(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (is_unsigned(value->type)) return std::get<std::uint64_t>(value->data);
  if (is_signed(value->type)) {
    const auto v = std::get<std::int64_t>(value->data);
    if (v < 0) {
      raise(ErrorCode::kInvalidModel, "{}: metadata key '{}' = {} is negative, expected an unsigned integer", name_,
            key, v);
    }
    return static_cast<std::uint64_t>(v);
  }
  wrong_type(key, *value, "an unsigned integer");
}

std::uint64_t File::require_uint(std::string_view key) const {
  if (const auto value = get_uint(key)) return *value;
  missing(key);
}

std::optional<std::int64_t> File::get_int(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (is_signed(value->type)) return std::get<std::int64_t>(value->data);
  if (is_unsigned(value->type)) {
    const auto v = std::get<std::uint64_t>(value->data);
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      raise(ErrorCode::kInvalidModel, "{}: metadata key '{}' = {} does not fit a signed 64-bit integer", name_, key,
            v);
    }
    return static_cast<std::int64_t>(v);
  }
  wrong_type(key, *value, "an integer");
}

std::optional<double> File::get_float(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (value->type == ValueType::kF32 || value->type == ValueType::kF64) return std::get<double>(value->data);
  if (is_unsigned(value->type)) return static_cast<double>(std::get<std::uint64_t>(value->data));
  if (is_signed(value->type)) return static_cast<double>(std::get<std::int64_t>(value->data));
  wrong_type(key, *value, "a number");
}

std::optional<bool> File::get_bool(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (value->type != ValueType::kBool) wrong_type(key, *value, "a bool");
  return std::get<bool>(value->data);
}

std::optional<std::string> File::get_string(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (value->type != ValueType::kString) wrong_type(key, *value, "a string");
  return std::get<std::string>(value->data);
}

std::string File::require_string(std::string_view key) const {
  if (auto value = get_string(key)) return std::move(*value);
  missing(key);
}

const Array* File::get_array(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) return nullptr;
  if (value->type != ValueType::kArray) wrong_type(key, *value, "an array");
  return &std::get<Array>(value->data);
}

std::vector<std::string_view> File::get_string_array(std::string_view key) const {
  const Array* array = get_array(key);
  if (array == nullptr) return {};
  if (array->element_type != ValueType::kString) wrong_type(key, *find(key), "an array of string");
  std::vector<std::string_view> out;
  out.reserve(array->items.size());
  for (const auto& item : array->items) out.emplace_back(std::get<std::string>(item.data));
  return out;
}

std::vector<float> File::get_float_array(std::string_view key) const {
  const Array* array = get_array(key);
  if (array == nullptr) return {};
  if (array->element_type != ValueType::kF32 && array->element_type != ValueType::kF64) {
    wrong_type(key, *find(key), "an array of f32 or f64");
  }
  std::vector<float> out;
  out.reserve(array->items.size());
  for (const auto& item : array->items) out.push_back(static_cast<float>(std::get<double>(item.data)));
  return out;
}

std::vector<std::int64_t> File::get_int_array(std::string_view key) const {
  const Array* array = get_array(key);
  if (array == nullptr) return {};
  std::vector<std::int64_t> out;
  out.reserve(array->items.size());
  if (is_signed(array->element_type)) {
    for (const auto& item : array->items) out.push_back(std::get<std::int64_t>(item.data));
  } else if (is_unsigned(array->element_type)) {
    for (std::size_t i = 0; i < array->items.size(); ++i) {
      const auto v = std::get<std::uint64_t>(array->items[i].data);
      if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        raise(ErrorCode::kInvalidModel, "{}: metadata key '{}'[{}] = {} does not fit a signed 64-bit integer", name_,
              key, i, v);
      }
      out.push_back(static_cast<std::int64_t>(v));
    }
  } else {
    wrong_type(key, *find(key), "an array of integers");
  }
  return out;
}

}  // namespace sitsrt::gguf
