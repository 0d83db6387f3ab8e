// Hand-built GGUF images for tests: every field is written explicitly, so a test can put any
// value (or garbage) in any field, which the Writer would refuse to produce.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt::test {

// Little-endian byte builder.
class GgufBytes {
 public:
  GgufBytes& u8(std::uint8_t v) { return raw(&v, 1); }
  GgufBytes& u32(std::uint32_t v) { return raw(&v, 4); }
  GgufBytes& u64(std::uint64_t v) { return raw(&v, 8); }
  GgufBytes& i32(std::int32_t v) { return raw(&v, 4); }
  GgufBytes& f32(float v) { return raw(&v, 4); }
  GgufBytes& str(std::string_view s) {  // u64 length + bytes
    u64(s.size());
    return raw(s.data(), s.size());
  }
  GgufBytes& zeros(std::size_t n) {
    bytes.resize(bytes.size() + n, std::byte{0});
    return *this;
  }
  GgufBytes& pad_to(std::size_t alignment) { return zeros((alignment - bytes.size() % alignment) % alignment); }
  GgufBytes& append(const GgufBytes& other) {
    bytes.insert(bytes.end(), other.bytes.begin(), other.bytes.end());
    return *this;
  }
  GgufBytes& raw(const void* data, std::size_t n) {
    const auto* p = static_cast<const std::byte*>(data);
    bytes.insert(bytes.end(), p, p + n);
    return *this;
  }
  [[nodiscard]] std::size_t size() const noexcept { return bytes.size(); }

  std::vector<std::byte> bytes;
};

struct RawTensor {
  std::string name;
  std::vector<std::uint64_t> dims;
  std::uint32_t type = 0;  // ggml type id (0 = f32)
  std::uint64_t offset = 0;
};

// A whole image: header, kvs (pre-encoded), tensor infos, padding, `data_bytes` zero bytes.
// Counts default to the real ones; set them to lie.
struct RawImage {
  std::uint32_t magic = 0x46554747u;  // "GGUF"
  std::uint32_t version = 3;
  std::optional<std::uint64_t> tensor_count;
  std::optional<std::uint64_t> kv_count;
  GgufBytes kvs;
  std::uint64_t n_kvs = 0;
  std::vector<RawTensor> tensors;
  std::size_t alignment = 32;  // padding used before the data section (set the key separately)
  std::size_t data_bytes = 0;

  RawImage& kv_u32(std::string_view key, std::uint32_t v) {
    kvs.str(key).u32(4).u32(v);
    ++n_kvs;
    return *this;
  }
  RawImage& kv_string(std::string_view key, std::string_view v) {
    kvs.str(key).u32(8).str(v);
    ++n_kvs;
    return *this;
  }
  RawImage& tensor(std::string name, std::vector<std::uint64_t> dims, std::uint32_t type, std::uint64_t offset) {
    tensors.push_back({std::move(name), std::move(dims), type, offset});
    return *this;
  }

  [[nodiscard]] std::vector<std::byte> build() const {
    GgufBytes out;
    out.u32(magic).u32(version);
    out.u64(tensor_count.value_or(tensors.size())).u64(kv_count.value_or(n_kvs));
    out.append(kvs);
    for (const auto& t : tensors) {
      out.str(t.name).u32(static_cast<std::uint32_t>(t.dims.size()));
      for (const auto d : t.dims) out.u64(d);
      out.u32(t.type).u64(t.offset);
    }
    out.pad_to(alignment).zeros(data_bytes);
    return out.bytes;
  }
};

// Offset of the first occurrence of `needle` in `bytes` (npos when absent).
inline std::size_t find_bytes(const std::vector<std::byte>& bytes, std::string_view needle) {
  if (needle.size() > bytes.size()) return std::string_view::npos;
  for (std::size_t i = 0; i + needle.size() <= bytes.size(); ++i) {
    if (std::memcmp(bytes.data() + i, needle.data(), needle.size()) == 0) return i;
  }
  return std::string_view::npos;
}

template <typename T>
void patch(std::vector<std::byte>& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

}  // namespace sitsrt::test
