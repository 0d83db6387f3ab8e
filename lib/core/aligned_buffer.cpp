#include "core/aligned_buffer.hpp"

#include "core/check.hpp"

#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace sitsrt {

AlignedBuffer::AlignedBuffer(std::size_t bytes, std::string_view what, Pages pages) : size_(bytes) {
  if (bytes == 0) return;
  // Huge pages only pay (and only waste little of the rounding) for buffers of several pages.
  const bool huge = pages == Pages::kHuge && bytes >= 4 * kHugePageBytes;
  const std::size_t align = huge ? kHugePageBytes : kAlignment;
  const std::size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) raise(ErrorCode::kOutOfMemory, "cannot allocate {} bytes for {}", bytes, what);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (huge) ::madvise(p, rounded, MADV_HUGEPAGE);  // advisory: failure leaves small pages
#endif
  data_.reset(static_cast<std::byte*>(p));
}

void AlignedBuffer::Free::operator()(std::byte* p) const noexcept { std::free(p); }

}  // namespace sitsrt
