// SHA-256 and HMAC-SHA-256 (OpenSSL EVP), as lowercase hex strings.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace sitsrt::audit {

std::string sha256_hex(std::string_view data);
// Of the ids as little-endian int32 bytes.
std::string sha256_hex(std::span<const std::int32_t> ids);
// HMAC-SHA-256 of `data` under `key`.
std::string hmac_sha256_hex(std::string_view key, std::string_view data);
// Streams a file through SHA-256; `progress` (optional) gets the fraction read. Throws
// sitsrt::Error(kIo) naming the file when it cannot be read or is not a regular file.
std::string sha256_file_hex(const std::string& path, const std::function<void(double)>& progress = {});
// The first `size` bytes of an open file (`path` names it in messages); throws kIo when the file
// ends first.
std::string sha256_fd_hex(int fd, const std::string& path, std::uint64_t size,
                          const std::function<void(double)>& progress = {});

}  // namespace sitsrt::audit
