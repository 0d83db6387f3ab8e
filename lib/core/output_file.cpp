#include "core/output_file.hpp"

#include "core/check.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <random>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <unistd.h>

namespace sitsrt {
namespace {

constexpr std::size_t kBufferBytes = std::size_t{1} << 20;

std::string random_suffix() {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}() ^ static_cast<std::uint64_t>(::getpid())};
  std::string s(8, 'x');
  for (char& c : s) c = kChars[rng() % (sizeof kChars - 1)];
  return s;
}

std::string parent_folder(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace

AtomicOutputFile::AtomicOutputFile(std::string target, OutputFileOptions options)
    : target_(std::move(target)), options_(std::move(options)) {
  if (target_.empty()) raise(ErrorCode::kInvalidArgument, "output path is empty");
  for (const std::string& input : options_.protected_inputs) {
    struct stat st {};
    if (::stat(input.c_str(), &st) == 0) inputs_.push_back(identity_of(input));
  }
  check_target();
  for (int attempt = 0; attempt < 100 && !fd_; ++attempt) {
    temp_path_ = target_ + "." + random_suffix() + ".tmp";
    fd_.reset(::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!fd_ && errno != EEXIST) {
      const int error = errno;
      raise(ErrorCode::kIo, "{}: cannot create the temporary file {}: {}", target_, temp_path_, std::strerror(error));
    }
  }
  if (!fd_) raise(ErrorCode::kIo, "{}: cannot find a free temporary file name beside it", target_);
  buffer_.reserve(kBufferBytes);
}

AtomicOutputFile::~AtomicOutputFile() {
  if (committed_) return;
  fd_.reset();
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void AtomicOutputFile::check_target() const {
  struct stat st {};
  if (::lstat(target_.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    raise(ErrorCode::kIo, "{}: cannot stat: {}", target_, std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    raise(ErrorCode::kInvalidArgument, "{}: is {}; refusing to replace it with the output (write to a new file)",
          target_, file_type_name(static_cast<unsigned>(st.st_mode)));
  }
  const FileIdentity existing = identity_of(target_);
  for (std::size_t i = 0; i < inputs_.size(); ++i) {
    if (existing.same_inode(inputs_[i])) {
      raise(ErrorCode::kInvalidArgument, "{}: is an input of this conversion; refusing to write the output over it",
            target_);
    }
  }
  if (!options_.replace_existing) {
    raise(ErrorCode::kInvalidArgument, "{}: already exists; refusing to overwrite it{}{}", target_,
          options_.exists_hint.empty() ? "" : " (", options_.exists_hint.empty() ? "" : options_.exists_hint + ")");
  }
}

void AtomicOutputFile::fail(const char* action, int error) const {
  raise(ErrorCode::kIo, "{}: {} failed: {}", target_, action, std::strerror(error));
}

void AtomicOutputFile::flush() {
  std::size_t off = 0;
  while (off < buffer_.size()) {
    const ssize_t n = ::write(fd_.get(), buffer_.data() + off, buffer_.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", errno);
    }
    off += static_cast<std::size_t>(n);
  }
  buffer_.clear();
}

void AtomicOutputFile::write(const void* data, std::size_t size) {
  if (committed_ || !fd_) raise(ErrorCode::kInternal, "{}: write after commit", target_);
  const auto* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const std::size_t n = std::min(size, kBufferBytes - buffer_.size());
    buffer_.insert(buffer_.end(), bytes, bytes + n);
    bytes += n;
    size -= n;
    if (buffer_.size() == kBufferBytes) flush();
  }
}

void AtomicOutputFile::commit() {
  if (committed_ || !fd_) raise(ErrorCode::kInternal, "{}: committed twice", target_);
  flush();
  // fsync before the rename so that a crash never leaves a partial file under the target name.
  if (::fsync(fd_.get()) != 0) fail("fsync", errno);
  if (::close(fd_.release()) != 0) fail("close", errno);
  check_target();  // it may have appeared, or been replaced by something else, meanwhile
  if (options_.replace_existing) {
    if (std::rename(temp_path_.c_str(), target_.c_str()) != 0) fail("rename", errno);
  } else if (::renameat2(AT_FDCWD, temp_path_.c_str(), AT_FDCWD, target_.c_str(), RENAME_NOREPLACE) != 0) {
    const int error = errno;
    if (error == EEXIST) check_target();  // throws the "already exists" refusal
    if (error != EINVAL && error != ENOSYS) fail("rename", error);
    // A file system without RENAME_NOREPLACE: link() refuses an existing name too.
    if (::link(temp_path_.c_str(), target_.c_str()) != 0) {
      const int link_error = errno;
      if (link_error == EEXIST) check_target();
      fail("link", link_error);
    }
    ::unlink(temp_path_.c_str());
  }
  committed_ = true;
  if (const UniqueFd folder(::open(parent_folder(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); folder) {
    ::fsync(folder.get());  // the new name itself survives a crash
  }
}

}  // namespace sitsrt
