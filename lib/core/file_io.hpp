// Reading the files a user points the library at without hanging, reading without bound or
// trusting a name twice: the file type is checked right after a non-blocking open (a FIFO with
// no writer never blocks the caller, a device is never read), every whole-file read is bounded,
// and an open file's identity (device, inode, size, modification time) can be compared later to
// tell whether the file changed or was replaced. Linux/POSIX.
#pragma once

#include <sitsrt/error.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace sitsrt {

// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

// What tells one version of a file from another: the inode it is, and its size and
// modification time (nanoseconds). Equal identities at two moments mean the same file, not
// rewritten in between (as far as the file system's timestamp granularity can tell).
struct FileIdentity {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
  [[nodiscard]] bool same_inode(const FileIdentity& o) const noexcept { return device == o.device && inode == o.inode; }
};

// "a directory", "a FIFO", "a character device", ... for a stat st_mode.
const char* file_type_name(unsigned mode) noexcept;

// Opens `path` read-only with O_NONBLOCK (so opening a FIFO returns at once), then requires a
// regular file. Throws Error(kIo) naming the path: the errno text when it cannot be opened, or
// "is a FIFO (not a regular file)" and the like. `identity` (optional) receives the file's.
UniqueFd open_regular_file(const std::string& path, FileIdentity* identity = nullptr);

// The identity of an open file now; throws kIo naming `path` when fstat fails.
FileIdentity identity_of(int fd, const std::string& path);
// The identity of the file `path` names now (following symlinks); throws kIo.
FileIdentity identity_of(const std::string& path);

// The whole content of the regular file `path`, refusing one larger than `max_bytes`:
// Error(too_large) "PATH: N bytes is larger than the LIMIT a WHAT may have". Also refuses
// non-regular files (kIo, as open_regular_file) and reads at most max_bytes + 1 bytes even if
// the file grows meanwhile.
std::string read_regular_file(const std::string& path, std::uint64_t max_bytes, std::string_view what,
                              ErrorCode too_large = ErrorCode::kInvalidArgument);

// Reads [offset, offset + size) of an open file in full (pread, EINTR retried). Throws kIo
// naming `path` on an error or when the file ends first ("the file shrank").
void read_exactly(int fd, const std::string& path, std::uint64_t offset, void* out, std::size_t size);

// "12 KiB", "3.5 MiB": byte counts in messages.
std::string byte_size_text(std::uint64_t bytes);

}  // namespace sitsrt
