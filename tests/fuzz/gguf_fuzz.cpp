// libFuzzer target: the GGUF reader must either parse an image or throw sitsrt::Error; it
// must never crash, hang or allocate far beyond the input size. When it parses, every tensor's
// bytes must lie inside the image and every typed getter must behave.
#include "formats/gguf.hpp"

#include <sitsrt/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const sitsrt::gguf::File file = sitsrt::gguf::File::parse(bytes, "fuzz.gguf");
    for (const auto& info : file.tensors()) {
      const auto t = file.tensor_data(info);
      if (t.data() < bytes.data() || t.data() + t.size() > bytes.data() + bytes.size()) __builtin_trap();
      if (file.find_tensor(info.name) == nullptr) __builtin_trap();
    }
    for (const auto& kv : file.metadata()) {
      if (file.find(kv.key) == nullptr) __builtin_trap();
      try {
        (void)file.get_uint(kv.key);
        (void)file.get_string(kv.key);
        (void)file.get_array(kv.key);
      } catch (const sitsrt::Error&) {
        // a type mismatch is reported, not a crash
      }
    }
  } catch (const sitsrt::Error&) {
  }
  return 0;
}
