// HMAC key files (--audit-key-file, audit verify --key-file): the key is the file's bytes less
// one trailing newline. Reading is bounded and type-checked: a FIFO or a device (/dev/zero) is
// refused at once instead of blocking or being read without end.
#pragma once

#include <cstdint>
#include <string>

namespace sitsrt::audit {

inline constexpr std::uint64_t kMaxKeyFileBytes = std::uint64_t{64} << 10;

// The key in `contents` (read from `path`, named in messages): less one trailing '\n'. Throws
// sitsrt::Error(kInvalidArgument) naming the file when the key is empty or the contents exceed
// kMaxKeyFileBytes.
std::string key_from_file_contents(std::string contents, const std::string& path);

// Reads and parses a key file. Throws sitsrt::Error: kIo naming the file when it cannot be
// opened or is not a regular file, kInvalidArgument as key_from_file_contents.
std::string read_key_file(const std::string& path);

}  // namespace sitsrt::audit
