// GGUF v3 writer: validates everything when it is added, so write() only fails on I/O or a Fill.
#include "formats/gguf_writer.hpp"

#include "core/check.hpp"
#include "core/output_file.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

namespace sitsrt::gguf {
namespace {

static_assert(std::endian::native == std::endian::little, "the GGUF writer assumes a little-endian host");

constexpr std::uint32_t kMagic = 0x46554747u;  // "GGUF" as a little-endian u32
constexpr std::uint32_t kVersion = 3;
constexpr std::uint64_t kMaxNameBytes = 64 * 1024;  // the reader's limit
constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 62;
constexpr std::string_view kAlignmentKey = "general.alignment";

bool valid_alignment(std::uint64_t alignment) noexcept {
  return std::has_single_bit(alignment) && alignment <= (std::uint64_t{1} << 31);
}

// Checks that `value` can be encoded exactly as its declared type.
void validate_value(std::string_view key, const Value& value, int depth) {
  const auto fail = [&](std::string_view problem) {
    raise(ErrorCode::kInvalidArgument, "GGUF writer: metadata key '{}': {}", key, problem);
  };
  const auto check_unsigned = [&](std::uint64_t max) {
    const auto* v = std::get_if<std::uint64_t>(&value.data);
    if (v == nullptr) fail(fmt::format("a {} value must hold an unsigned integer", name(value.type)));
    if (*v > max) fail(fmt::format("{} does not fit {}", *v, name(value.type)));
  };
  const auto check_signed = [&](std::int64_t min, std::int64_t max) {
    const auto* v = std::get_if<std::int64_t>(&value.data);
    if (v == nullptr) fail(fmt::format("a {} value must hold a signed integer", name(value.type)));
    if (*v < min || *v > max) fail(fmt::format("{} does not fit {}", *v, name(value.type)));
  };
  const auto check_holds = [&]<typename T>(std::string_view what) {
    if (!std::holds_alternative<T>(value.data)) fail(fmt::format("a {} value must hold {}", name(value.type), what));
  };
  switch (value.type) {
    case ValueType::kU8: check_unsigned(0xFF); return;
    case ValueType::kU16: check_unsigned(0xFFFF); return;
    case ValueType::kU32: check_unsigned(0xFFFFFFFFu); return;
    case ValueType::kU64: check_unsigned(std::numeric_limits<std::uint64_t>::max()); return;
    case ValueType::kI8: check_signed(-128, 127); return;
    case ValueType::kI16: check_signed(-32768, 32767); return;
    case ValueType::kI32:
      check_signed(std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max());
      return;
    case ValueType::kI64:
      check_signed(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
      return;
    case ValueType::kF32: case ValueType::kF64: check_holds.operator()<double>("a double"); return;
    case ValueType::kBool: check_holds.operator()<bool>("a bool"); return;
    case ValueType::kString: check_holds.operator()<std::string>("a string"); return;
    case ValueType::kArray: {
      check_holds.operator()<Array>("an Array");
      if (depth >= kMaxArrayDepth) fail(fmt::format("arrays are nested more than {} deep", kMaxArrayDepth));
      const Array& array = std::get<Array>(value.data);
      if (static_cast<std::uint32_t>(array.element_type) > static_cast<std::uint32_t>(ValueType::kF64)) {
        fail(fmt::format("array element type {} is unknown", static_cast<std::uint32_t>(array.element_type)));
      }
      for (std::size_t i = 0; i < array.items.size(); ++i) {
        if (array.items[i].type != array.element_type) {
          fail(fmt::format("item [{}] has type {} in an array of {}", i, name(array.items[i].type),
                           name(array.element_type)));
        }
        validate_value(key, array.items[i], depth + 1);
      }
      return;
    }
  }
  fail(fmt::format("value type {} is unknown", static_cast<std::uint32_t>(value.type)));
}

// Little-endian encoder over a byte sink; tracks the position for padding.
template <typename Sink>
class Encoder {
 public:
  explicit Encoder(Sink& sink) : sink_(sink) {}

  void bytes(const void* data, std::size_t size) {
    sink_.write(static_cast<const std::byte*>(data), size);
    position_ += size;
  }
  template <typename T>
  void scalar(T v) { bytes(&v, sizeof v); }
  void string(std::string_view s) {
    scalar<std::uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad(std::uint64_t alignment) {
    static constexpr std::byte kZeros[256] = {};
    std::uint64_t n = (alignment - position_ % alignment) % alignment;
    while (n > 0) {
      const auto chunk = std::min<std::uint64_t>(n, sizeof kZeros);
      bytes(kZeros, chunk);
      n -= chunk;
    }
  }
  void value(const Value& v) {  // the payload only; the type tag is written by the caller
    switch (v.type) {
      case ValueType::kU8: scalar(static_cast<std::uint8_t>(std::get<std::uint64_t>(v.data))); return;
      case ValueType::kU16: scalar(static_cast<std::uint16_t>(std::get<std::uint64_t>(v.data))); return;
      case ValueType::kU32: scalar(static_cast<std::uint32_t>(std::get<std::uint64_t>(v.data))); return;
      case ValueType::kU64: scalar(std::get<std::uint64_t>(v.data)); return;
      case ValueType::kI8: scalar(static_cast<std::int8_t>(std::get<std::int64_t>(v.data))); return;
      case ValueType::kI16: scalar(static_cast<std::int16_t>(std::get<std::int64_t>(v.data))); return;
      case ValueType::kI32: scalar(static_cast<std::int32_t>(std::get<std::int64_t>(v.data))); return;
      case ValueType::kI64: scalar(std::get<std::int64_t>(v.data)); return;
      case ValueType::kF32: scalar(static_cast<float>(std::get<double>(v.data))); return;
      case ValueType::kF64: scalar(std::get<double>(v.data)); return;
      case ValueType::kBool: scalar(static_cast<std::uint8_t>(std::get<bool>(v.data) ? 1 : 0)); return;
      case ValueType::kString: string(std::get<std::string>(v.data)); return;
      case ValueType::kArray: {
        const Array& array = std::get<Array>(v.data);
        scalar(static_cast<std::uint32_t>(array.element_type));
        scalar<std::uint64_t>(array.items.size());
        for (const Value& item : array.items) value(item);
        return;
      }
    }
  }
  [[nodiscard]] std::uint64_t position() const noexcept { return position_; }

 private:
  Sink& sink_;
  std::uint64_t position_ = 0;
};

struct MemorySink {
  std::vector<std::byte>& out;
  void write(const std::byte* data, std::size_t size) {
    const std::size_t old_size = out.size();
    out.resize(old_size + size);
    if (size > 0) std::memcpy(out.data() + old_size, data, size);
  }
};

struct FileSink {
  AtomicOutputFile& file;
  void write(const std::byte* data, std::size_t size) { file.write(data, size); }
};

}  // namespace

Writer::Writer(std::uint64_t alignment) : alignment_(alignment) {
  if (!valid_alignment(alignment)) {
    raise(ErrorCode::kInvalidArgument, "GGUF writer: alignment {} is not a power of two in [1, 2^31]", alignment);
  }
  if (alignment != kDefaultAlignment) {
    metadata_.push_back({std::string(kAlignmentKey), Value::u32(static_cast<std::uint32_t>(alignment))});
  }
}

void Writer::set(std::string key, Value value) {
  if (key.empty()) raise(ErrorCode::kInvalidArgument, "GGUF writer: metadata key is empty");
  if (key.size() > kMaxNameBytes) {
    raise(ErrorCode::kInvalidArgument, "GGUF writer: metadata key of {} bytes exceeds the limit of {}", key.size(),
          kMaxNameBytes);
  }
  validate_value(key, value, 0);
  if (key == kAlignmentKey) {
    if (value.type != ValueType::kU32 || !valid_alignment(std::get<std::uint64_t>(value.data))) {
      raise(ErrorCode::kInvalidArgument, "GGUF writer: '{}' must be a u32 power of two", key);
    }
    alignment_ = std::get<std::uint64_t>(value.data);
  }
  for (auto& entry : metadata_) {
    if (entry.key == key) {
      entry.value = std::move(value);
      return;
    }
  }
  metadata_.push_back({std::move(key), std::move(value)});
}

void Writer::add_tensor(std::string name, std::vector<std::int64_t> dims, DType type, Fill fill) {
  const auto fail = [&](std::string_view problem) {
    raise(ErrorCode::kInvalidArgument, "GGUF writer: tensor '{}': {}", name, problem);
  };
  if (name.empty()) raise(ErrorCode::kInvalidArgument, "GGUF writer: tensor name is empty");
  if (name.size() > kMaxNameBytes) fail(fmt::format("name exceeds the limit of {} bytes", kMaxNameBytes));
  if (tensor_names_.contains(name)) fail("duplicate tensor name");
  if (dims.empty() || dims.size() > static_cast<std::size_t>(kMaxDims)) {
    fail(fmt::format("{} dims, expected 1..{}", dims.size(), kMaxDims));
  }
  std::uint64_t elements = 1;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] < 1) fail(fmt::format("dims[{}] = {} is not at least 1", d, dims[d]));
    const auto n = static_cast<std::uint64_t>(dims[d]);
    if (n >= kMaxElements || elements > (kMaxElements - 1) / n) fail("dims hold 2^62 or more elements");
    elements *= n;
  }
  if (!fits_blocks(type, dims[0])) {
    fail(fmt::format("dims[0] = {} is not a multiple of the {}-element {} block", dims[0], traits(type).block_size,
                     sitsrt::name(type)));
  }
  if (!fill) fail("no fill callback");
  const std::uint64_t bytes = elements / static_cast<std::uint64_t>(traits(type).block_size) *
                              static_cast<std::uint64_t>(traits(type).block_bytes);
  tensor_names_.insert(name);
  tensors_.push_back({std::move(name), std::move(dims), type, bytes, std::move(fill)});
}

template <typename Sink>
void Writer::emit(Sink& sink, const Progress& progress) const {
  Encoder<Sink> out(sink);
  out.scalar(kMagic);
  out.scalar(kVersion);
  out.template scalar<std::uint64_t>(tensors_.size());
  out.template scalar<std::uint64_t>(metadata_.size());
  for (const auto& [key, value] : metadata_) {
    out.string(key);
    out.scalar(static_cast<std::uint32_t>(value.type));
    out.value(value);
  }
  std::uint64_t offset = 0;
  for (const auto& t : tensors_) {
    out.string(t.name);
    out.template scalar<std::uint32_t>(static_cast<std::uint32_t>(t.dims.size()));
    for (const std::int64_t d : t.dims) out.template scalar<std::uint64_t>(static_cast<std::uint64_t>(d));
    out.scalar(ggml_type_from_dtype(t.type));
    out.scalar(offset);
    offset += (t.bytes + alignment_ - 1) / alignment_ * alignment_;
  }
  out.pad(alignment_);
  std::vector<std::byte> buffer;
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    buffer.assign(t.bytes, std::byte{0});
    t.fill(std::span<std::byte>(buffer));
    out.bytes(buffer.data(), buffer.size());
    out.pad(alignment_);
    if (progress) progress(i + 1, tensors_.size());
  }
}

std::vector<std::byte> Writer::to_bytes() const {
  std::vector<std::byte> bytes;
  MemorySink sink{bytes};
  emit(sink, {});
  return bytes;
}

void Writer::write(const std::string& path, const Progress& progress, const OutputFileOptions& output) const {
  // A unique temporary file in the target's folder, renamed into place when complete: a failure
  // (disk full, a throwing Fill) leaves the target untouched and nothing behind.
  AtomicOutputFile file(path, output);
  write(file, progress);
}

void Writer::write(AtomicOutputFile& file, const Progress& progress) const {
  FileSink sink{file};
  emit(sink, progress);
  file.commit();
}

}  // namespace sitsrt::gguf
