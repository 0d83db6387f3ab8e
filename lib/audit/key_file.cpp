#include "audit/key_file.hpp"

#include "core/check.hpp"
#include "core/file_io.hpp"

namespace sitsrt::audit {

std::string key_from_file_contents(std::string contents, const std::string& path) {
  if (contents.size() > kMaxKeyFileBytes) {
    raise(ErrorCode::kInvalidArgument, "key file '{}': {} bytes is larger than the {} a key file may have", path,
          contents.size(), byte_size_text(kMaxKeyFileBytes));
  }
  if (!contents.empty() && contents.back() == '\n') contents.pop_back();
  if (contents.empty()) raise(ErrorCode::kInvalidArgument, "key file '{}' is empty", path);
  return contents;
}

std::string read_key_file(const std::string& path) {
  return key_from_file_contents(read_regular_file(path, kMaxKeyFileBytes, "key file"), path);
}

}  // namespace sitsrt::audit
