// libFuzzer target: the safetensors header parser and the shard-index parser must either accept
// an input or throw sitsrt::Error; never crash, hang or read outside the image. The first byte
// picks the parser so one corpus exercises both.
#include "formats/safetensors.hpp"

#include <sitsrt/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool index = (data[0] & 1) != 0;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  try {
    if (index) {
      const auto parsed = sitsrt::safetensors::parse_shard_index(
          std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), "fuzz.index.json");
      for (const auto& [tensor, shard] : parsed.weight_map) {
        if (shard.empty() || shard.find('/') != std::string::npos) __builtin_trap();
      }
    } else {
      const auto file = sitsrt::safetensors::File::parse(bytes, "fuzz.safetensors");
      std::uint64_t covered = 0;
      for (const auto& info : file.tensors()) {
        const auto t = file.tensor_data(info);
        if (t.data() < bytes.data() || t.data() + t.size() > bytes.data() + bytes.size()) __builtin_trap();
        if (file.find_tensor(info.name) != &info) __builtin_trap();
        covered += info.bytes;
      }
      if (covered != bytes.size() - file.data_offset()) __builtin_trap();
    }
  } catch (const sitsrt::Error&) {
  }
  return 0;
}
