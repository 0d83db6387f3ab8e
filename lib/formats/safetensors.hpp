// Safetensors reader (one file, or a sharded set through model.safetensors.index.json).
// A file is an 8-byte little-endian header length N, N bytes of a UTF-8 JSON object (optionally
// padded with spaces), then the tensor bytes. The file is mmapped and the header is validated
// strictly before anything is handed out: header bounds, JSON shape, dtypes, shapes, and byte
// ranges (inside the data, matching dtype x shape, disjoint and covering the data without
// holes). Every failure is a sitsrt::Error whose message starts with the path and names the
// tensor or key at fault.
//
// Threading: immutable after open/parse; const members may be called from any thread.
#pragma once

#include "core/mapped_file.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt::safetensors {

// Element types of the format ("F32", "BF16", "F8_E4M3", ...). Tensors keep their file type;
// mapping onto weight formats (and quantized checkpoints' packing) is the model loader's job.
enum class ElementType : std::uint8_t {
  kF64, kF32, kF16, kBF16, kF8_E4M3, kF8_E5M2, kI64, kI32, kI16, kI8, kU64, kU32, kU16, kU8, kBool,
};
std::string_view name(ElementType type) noexcept;  // the spelling used in headers ("F8_E4M3")
std::optional<ElementType> element_type_from_name(std::string_view name) noexcept;
int element_bytes(ElementType type) noexcept;

inline constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t{100} << 20;  // as the reference reader
inline constexpr int kMaxDims = 8;

struct TensorInfo {
  std::string name;
  ElementType type = ElementType::kF32;
  std::vector<std::int64_t> shape;  // outermost first (row-major), as in the header
  std::uint64_t offset = 0;         // from the start of the data section
  std::uint64_t bytes = 0;
  [[nodiscard]] std::int64_t elements() const noexcept;
};

class File {
 public:
  // Maps and validates `path`. Throws kIo (cannot open/map) or kInvalidModel.
  static File open(const std::string& path);
  // Validates an in-memory image (tests, fuzzers); `bytes` must outlive the File.
  static File parse(std::span<const std::byte> bytes, std::string display_name);

  [[nodiscard]] const std::string& path() const noexcept { return name_; }
  // True when the bytes are this File's own read-only mapping (not a caller-owned image).
  [[nodiscard]] bool mapped() const noexcept { return mapping_ != nullptr; }
  // The mapping the bytes live in (nullptr for a caller-owned image): its identity says which
  // file, in which state, the bytes came from.
  [[nodiscard]] const MappedFile* mapping() const noexcept { return mapping_.get(); }
  [[nodiscard]] std::uint64_t data_offset() const noexcept { return data_offset_; }
  [[nodiscard]] const std::vector<TensorInfo>& tensors() const noexcept { return tensors_; }  // by offset
  [[nodiscard]] const std::map<std::string, std::string, std::less<>>& metadata() const noexcept {
    return metadata_;
  }
  [[nodiscard]] const TensorInfo* find_tensor(std::string_view name) const noexcept;
  // Bytes of a tensor inside the mapping; `info` must come from this File.
  [[nodiscard]] std::span<const std::byte> tensor_data(const TensorInfo& info) const noexcept;

 private:
  File() = default;
  void parse_header();

  std::shared_ptr<MappedFile> mapping_;  // null when parsing a caller-owned image
  std::span<const std::byte> bytes_;
  std::string name_;
  std::uint64_t data_offset_ = 0;
  std::vector<TensorInfo> tensors_;
  std::vector<std::uint32_t> by_name_;  // indices into tensors_ sorted by name
  std::map<std::string, std::string, std::less<>> metadata_;
};

// The weight map of a sharded checkpoint: model.safetensors.index.json ({"metadata": {...},
// "weight_map": {tensor: shard file name}}). Validated without opening any shard: shard names
// must be plain file names in the index's folder (no path separators, no "..").
struct ShardIndex {
  std::map<std::string, std::string, std::less<>> weight_map;  // tensor -> shard file name
  std::vector<std::string> shards;                             // distinct shard names, sorted
  std::optional<std::uint64_t> total_size;                     // metadata.total_size when present
};
ShardIndex parse_shard_index(std::string_view json_text, const std::string& display_name);

// Every tensor of a checkpoint directory (model.safetensors, or the shards listed by
// model.safetensors.index.json), each shard mmapped once. The index and the shards must agree:
// a tensor the index places in a shard must be there, and no tensor may appear twice.
class Checkpoint {
 public:
  // `path`: a directory, a .safetensors file, or an index .json file.
  static Checkpoint open(const std::string& path);

  struct Entry {
    const File* file;
    const TensorInfo* info;
  };
  [[nodiscard]] std::optional<Entry> find(std::string_view name) const noexcept;
  [[nodiscard]] std::span<const std::byte> data(const Entry& entry) const noexcept {
    return entry.file->tensor_data(*entry.info);
  }
  [[nodiscard]] const std::vector<File>& files() const noexcept { return files_; }
  [[nodiscard]] std::size_t tensor_count() const noexcept { return by_name_.size(); }
  [[nodiscard]] std::uint64_t total_bytes() const noexcept;
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  std::vector<File> files_;
  std::map<std::string, std::pair<std::uint32_t, std::uint32_t>, std::less<>> by_name_;  // -> (file, tensor)
};

}  // namespace sitsrt::safetensors
