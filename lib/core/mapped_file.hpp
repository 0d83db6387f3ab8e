// Read-only memory mapping of a whole file (RAII). Weights are read straight from it.
#pragma once

#include "core/file_io.hpp"

#include <cstddef>
#include <span>
#include <string>

namespace sitsrt {

class MappedFile {
 public:
  // Maps `path`; throws sitsrt::Error(kIo) naming the path when it cannot be opened or mapped.
  explicit MappedFile(std::string path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  // The file as it was when mapped (device, inode, size, modification time).
  [[nodiscard]] const FileIdentity& identity() const noexcept { return identity_; }

  // Touches every page so later reads do not fault; calls progress(done, total) now and then.
  template <typename Progress>
  void prefault(Progress&& progress) const {
    constexpr std::size_t kStep = std::size_t{64} << 20;
    volatile unsigned char sink = 0;
    for (std::size_t off = 0; off < size_; off += 4096) {
      sink = sink ^ static_cast<unsigned char>(data_[off]);
      if (off % kStep == 0) progress(off, size_);
    }
    progress(size_, size_);
  }

 private:
  void release() noexcept;
  std::string path_;
  FileIdentity identity_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// Drops the whole pages inside `bytes` (part of a read-only file mapping) from the process:
// they stop counting in its resident memory and are read from the file again if touched.
void release_mapped_pages(std::span<const std::byte> bytes) noexcept;

}  // namespace sitsrt
