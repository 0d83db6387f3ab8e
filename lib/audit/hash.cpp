#include "audit/hash.hpp"

#include "core/check.hpp"
#include "core/file_io.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>
#include <algorithm>
#include <memory>
#include <vector>

namespace sitsrt::audit {
namespace {

std::string to_hex(const unsigned char* bytes, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return out;
}

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

MdCtx new_sha256() {
  MdCtx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    raise(ErrorCode::kInternal, "OpenSSL: SHA-256 initialisation failed");
  }
  return ctx;
}

std::string finish(EVP_MD_CTX* ctx) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx, md.data(), &len) != 1) raise(ErrorCode::kInternal, "OpenSSL: SHA-256 failed");
  return to_hex(md.data(), len);
}

}  // namespace

std::string sha256_hex(std::string_view data) {
  MdCtx ctx = new_sha256();
  EVP_DigestUpdate(ctx.get(), data.data(), data.size());
  return finish(ctx.get());
}

std::string sha256_hex(std::span<const std::int32_t> ids) {
  std::string bytes(ids.size() * 4, '\0');
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto v = static_cast<std::uint32_t>(ids[i]);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + static_cast<std::size_t>(b)] = static_cast<char>((v >> (8 * b)) & 0xff);
  }
  return sha256_hex(bytes);
}

std::string hmac_sha256_hex(std::string_view key, std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
           data.size(), md.data(), &len) == nullptr) {
    raise(ErrorCode::kInternal, "OpenSSL: HMAC-SHA-256 failed");
  }
  return to_hex(md.data(), len);
}

std::string sha256_fd_hex(int fd, const std::string& path, std::uint64_t size,
                          const std::function<void(double)>& progress) {
  MdCtx ctx = new_sha256();
  std::vector<char> buffer(std::size_t{4} << 20);
  for (std::uint64_t done = 0; done < size;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), size - done));
    read_exactly(fd, path, done, buffer.data(), n);  // throws naming the file when it shrank
    EVP_DigestUpdate(ctx.get(), buffer.data(), n);
    done += n;
    if (progress) progress(static_cast<double>(done) / static_cast<double>(size));
  }
  return finish(ctx.get());
}

std::string sha256_file_hex(const std::string& path, const std::function<void(double)>& progress) {
  FileIdentity identity;
  const UniqueFd fd = open_regular_file(path, &identity);  // a FIFO or a device is refused, not read
  return sha256_fd_hex(fd.get(), path, identity.size, progress);
}

}  // namespace sitsrt::audit
