// Which device a buffer or a backend's memory belongs to. Backend-neutral code (ops, the KV
// cache, the executor) carries this with every view so a kernel never receives another
// device's address.
#pragma once

#include <cstdint>
#include <string>

namespace sitsrt {

enum class DeviceKind : std::uint8_t { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  friend bool operator==(const Device&, const Device&) = default;
};

// "cpu:0", "cuda:1"
[[nodiscard]] inline std::string device_name(Device d) {
  return std::string(d.kind == DeviceKind::kCpu ? "cpu" : "cuda") + ":" + std::to_string(d.index);
}

}  // namespace sitsrt
