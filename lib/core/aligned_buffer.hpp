// An owned, 64-byte aligned, uninitialised byte buffer (activation arenas, KV caches, scratch,
// resident weights).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

namespace sitsrt {

class AlignedBuffer {
 public:
  static constexpr std::size_t kAlignment = 64;

  // Large buffers that are streamed from end to end (weights, the bandwidth probe) may ask for
  // transparent huge pages: one TLB entry per 2 MiB instead of per 4 KiB measured +20-30% on a
  // single core's streaming read here (docs/performance.md). The request is advisory: where the
  // kernel has THP off, the buffer simply gets small pages.
  enum class Pages { kDefault, kHuge };
  static constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

  AlignedBuffer() = default;
  // Throws sitsrt::Error(kOutOfMemory) naming `what` when the allocation fails.
  AlignedBuffer(std::size_t bytes, std::string_view what, Pages pages = Pages::kDefault);

  [[nodiscard]] std::byte* data() noexcept { return data_.get(); }
  [[nodiscard]] const std::byte* data() const noexcept { return data_.get(); }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::span<std::byte> span() noexcept { return {data_.get(), size_}; }
  template <typename T>
  [[nodiscard]] T* as() noexcept {
    return reinterpret_cast<T*>(data_.get());
  }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept;
  };
  std::unique_ptr<std::byte, Free> data_;
  std::size_t size_ = 0;
};

}  // namespace sitsrt
