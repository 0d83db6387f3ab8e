// The tensors of a model, by their GGUF names, whatever file format they came from: element
// type, dims in GGUF order (innermost first), byte size and bytes. The graph builders look
// tensors up here, and the backend reads weight bytes from here (it is the WeightSource), so
// neither depends on a file format. A GGUF file fills it with views into its mapping; a
// Hugging Face checkpoint fills it with views into the safetensors mappings plus a few owned
// buffers (norm vectors converted to F32, Gemma's 1 + w).
//
// Threading: immutable after it is filled; const members may be called from any thread.
#pragma once

#include "core/dtype.hpp"
#include "graph/weight_source.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt::gguf {
class File;
}

namespace sitsrt {

struct CatalogTensor {
  std::string name;         // GGUF name ("blk.0.attn_q.weight")
  std::string source_name;  // name in the file it came from (HF: "model.layers.0.self_attn.q_proj.weight")
  DType type = DType::kF32;
  std::vector<std::int64_t> dims;  // GGUF order: dims[0] is contiguous
  std::uint64_t bytes = 0;
  std::span<const std::byte> data;
  bool mapped = false;  // data lies in a read-only file mapping (release() may drop its pages)
  [[nodiscard]] std::int64_t elements() const noexcept;
};

class TensorCatalog final : public graph::WeightSource {
 public:
  // `path` names the model in messages (a GGUF file or an HF directory).
  explicit TensorCatalog(std::string path) : path_(std::move(path)) {}
  // Views into `file`'s mapping; the catalog keeps the mapping alive.
  static TensorCatalog from_gguf(const gguf::File& file);

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] const CatalogTensor* find(std::string_view name) const noexcept;
  [[nodiscard]] const std::vector<CatalogTensor>& tensors() const noexcept { return tensors_; }  // insertion order
  [[nodiscard]] std::span<const std::byte> data(const graph::Weight& weight) const override;
  // Drops a mapped tensor's whole pages from the process (they are re-read from the file if
  // touched again); owned tensors stay.
  void release(const graph::Weight& weight) const noexcept override;
  // "'blk.0.attn_q.weight'", plus the file's own name for it when the format names it
  // differently (for messages about missing or mis-shaped tensors).
  [[nodiscard]] std::string describe(const std::string& name) const;
  void set_source_namer(std::function<std::string(const std::string&)> namer) { namer_ = std::move(namer); }

  // Adds a view; `data.size()` must equal the type's size of `dims`. Throws kInvalidModel
  // naming the tensor for a duplicate name or a size mismatch.
  void add(CatalogTensor tensor);
  // Adds a tensor whose bytes the catalog owns.
  void add_owned(CatalogTensor tensor, std::vector<std::byte> bytes);
  // Keeps whatever backs the views (a mapping, a checkpoint) alive as long as the catalog.
  void keep_alive(std::shared_ptr<const void> owner) { owners_.push_back(std::move(owner)); }

 private:
  std::string path_;
  std::vector<CatalogTensor> tensors_;
  std::map<std::string, std::size_t, std::less<>> by_name_;
  std::vector<std::shared_ptr<const std::vector<std::byte>>> owned_;
  std::vector<std::shared_ptr<const void>> owners_;
  std::function<std::string(const std::string&)> namer_;
};

}  // namespace sitsrt
