#include "core/mapped_file.hpp"

#include "core/check.hpp"
#include "core/file_io.hpp"

#include <cerrno>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>
#include <utility>

namespace sitsrt {

MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
  // Type-checked before anything blocks: a FIFO or a device is refused, never read.
  const UniqueFd fd = open_regular_file(path_, &identity_);
  size_ = static_cast<std::size_t>(identity_.size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (p == MAP_FAILED) raise(ErrorCode::kIo, "{}: cannot mmap {} bytes: {}", path_, size_, std::strerror(errno));
    data_ = static_cast<const std::byte*>(p);
  }
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      identity_(other.identity_),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    identity_ = other.identity_;
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

void release_mapped_pages(std::span<const std::byte> bytes) noexcept {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<std::uintptr_t>(bytes.data()) + page - 1) / page * page;
  const auto end = (reinterpret_cast<std::uintptr_t>(bytes.data()) + bytes.size()) / page * page;
  // MADV_DONTNEED on a private, never-written file mapping only unmaps page-cache pages.
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace sitsrt
