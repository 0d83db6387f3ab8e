// Writing a file the user names without destroying anything: the data goes to a new file with a
// unique name (O_EXCL) in the target's folder and takes the target's name only once it is
// complete and synced. A target that is not a regular file (device node, FIFO, socket,
// directory, symbolic link) is never replaced, nor one of the inputs being read, nor (unless
// asked) an existing file. A failure or an uncommitted destruction leaves the target untouched
// and no temporary file behind.
#pragma once

#include "core/file_io.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace sitsrt {

struct OutputFileOptions {
  // false: refuse a target that exists (also when it appears while the file is written).
  bool replace_existing = true;
  // Appended to the "already exists" refusal, e.g. "pass --force to replace it".
  std::string exists_hint;
  // Files the output must never replace (compared by inode, so links and other spellings of the
  // same file count): the inputs of a conversion. Missing ones are ignored.
  std::vector<std::string> protected_inputs;
};

class AtomicOutputFile {
 public:
  // Checks the target (Error(kInvalidArgument) naming it for a non-regular file, an input or an
  // existing file not to be replaced) and creates the temporary file (kIo on failure).
  explicit AtomicOutputFile(std::string target, OutputFileOptions options = {});
  ~AtomicOutputFile();
  AtomicOutputFile(const AtomicOutputFile&) = delete;
  AtomicOutputFile& operator=(const AtomicOutputFile&) = delete;

  [[nodiscard]] const std::string& target() const noexcept { return target_; }
  [[nodiscard]] const std::string& temp_path() const noexcept { return temp_path_; }

  // Buffered; throws Error(kIo) naming the target with the system's reason, e.g. "File too large"
  // past RLIMIT_FSIZE (with SIGXFSZ ignored) or "No space left on device".
  void write(const void* data, std::size_t size);
  // Flushes, fsyncs and closes the file, checks the target again and moves the file into place
  // (without replacing an existing file unless replace_existing), then syncs the folder.
  void commit();

 private:
  void flush();
  void check_target() const;
  [[noreturn]] void fail(const char* action, int error) const;

  std::string target_;
  OutputFileOptions options_;
  std::vector<FileIdentity> inputs_;  // identities of the protected inputs that exist
  std::string temp_path_;
  UniqueFd fd_;
  std::vector<char> buffer_;
  bool committed_ = false;
};

}  // namespace sitsrt
