#include "core/file_io.hpp"

#include "core/check.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sitsrt {
namespace {

FileIdentity identity_from(const struct stat& st) {
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
          static_cast<std::uint64_t>(st.st_size),
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

}  // namespace

void UniqueFd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

const char* file_type_name(unsigned mode) noexcept {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
  }
  return "not a regular file";
}

UniqueFd open_regular_file(const std::string& path, FileIdentity* identity) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever. It has no
  // effect on regular files, the only kind accepted.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd) raise(ErrorCode::kIo, "{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) raise(ErrorCode::kIo, "{}: cannot stat: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) {
    raise(ErrorCode::kIo, "{}: is {}, not a regular file", path, file_type_name(static_cast<unsigned>(st.st_mode)));
  }
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags >= 0) ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  if (identity != nullptr) *identity = identity_from(st);
  return fd;
}

FileIdentity identity_of(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) raise(ErrorCode::kIo, "{}: cannot stat: {}", path, std::strerror(errno));
  return identity_from(st);
}

FileIdentity identity_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) raise(ErrorCode::kIo, "{}: cannot stat: {}", path, std::strerror(errno));
  return identity_from(st);
}

std::string read_regular_file(const std::string& path, std::uint64_t max_bytes, std::string_view what,
                              ErrorCode too_large) {
  FileIdentity id;
  const UniqueFd fd = open_regular_file(path, &id);
  const auto refuse = [&](std::uint64_t size, bool at_least) {
    raise(too_large, "{}: {}{} bytes is larger than the {} ({} bytes) a {} may have", path, at_least ? "over " : "",
          size, byte_size_text(max_bytes), max_bytes, what);
  };
  if (id.size > max_bytes) refuse(id.size, false);
  std::string out;
  out.resize(static_cast<std::size_t>(id.size));
  std::size_t done = 0;
  for (;;) {
    if (done == out.size()) {
      // The file may have grown since fstat: read on, one byte past the limit at most.
      if (out.size() > max_bytes) refuse(max_bytes, true);
      out.resize(std::min<std::uint64_t>(max_bytes + 1, std::max<std::uint64_t>(out.size() * 2, 4096)));
    }
    const ssize_t n = ::read(fd.get(), out.data() + done, out.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      raise(ErrorCode::kIo, "{}: cannot read: {}", path, std::strerror(errno));
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  if (done > max_bytes) refuse(max_bytes, true);
  out.resize(done);
  return out;
}

void read_exactly(int fd, const std::string& path, std::uint64_t offset, void* out, std::size_t size) {
  auto* to = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t n = ::pread(fd, to, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      raise(ErrorCode::kIo, "{}: cannot read: {}", path, std::strerror(errno));
    }
    if (n == 0) raise(ErrorCode::kIo, "{}: the file ends at byte {} (it shrank while being read)", path, offset);
    to += n;
    offset += static_cast<std::uint64_t>(n);
    size -= static_cast<std::size_t>(n);
  }
}

std::string byte_size_text(std::uint64_t bytes) {
  constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} bytes", bytes) : fmt::format("{:.4g} {}", value, kUnits[unit]);
}

}  // namespace sitsrt
