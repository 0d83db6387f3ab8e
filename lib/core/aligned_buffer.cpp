#include "core/aligned_buffer.hpp"

#include "core/check.hpp"

#include <cstdlib>
#include <new>

namespace sitsrt {

AlignedBuffer::AlignedBuffer(std::size_t bytes, std::string_view what) : size_(bytes) {
  if (bytes == 0) return;
  const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) raise(ErrorCode::kOutOfMemory, "cannot allocate {} bytes for {}", bytes, what);
  data_.reset(static_cast<std::byte*>(p));
}

void AlignedBuffer::Free::operator()(std::byte* p) const noexcept { std::free(p); }

}  // namespace sitsrt
