// The files an engine's model was loaded from, pinned: opened (their identity taken: device,
// inode, size, modification time) before the loader reads them and kept open, so that the model
// SHA-256 an audit record carries is computed from the very inodes the weights came from,
// whatever happens to the names afterwards, and only while each file is unchanged since it was
// pinned. Replacing or rewriting a model file while it loads makes the load fail instead of
// producing a record with one model's hash and another model's tokens. See docs/audit-log.md.
#pragma once

#include "core/file_io.hpp"
#include "model/hf_model.hpp"

#include <functional>
#include <string>
#include <vector>

namespace sitsrt {

class ModelPins {
 public:
  // Pins the GGUF file, or every regular .json and .safetensors file of the Hugging Face
  // directory. Throws kIo naming a file that cannot be opened or is not a regular file.
  ModelPins(const std::string& model_path, bool hf_directory);

  // After the load (weights, config and tokenizer read): every weight file must have been mapped
  // from its pinned inode in its pinned state, and every other pinned file must still be what its
  // name gave the loader. Weight files outside the pinned set (a shard with another extension)
  // are pinned now, by the identity they had when mapped. Throws kIo naming the file otherwise.
  void confirm(const std::vector<MappedWeightFile>& mapped);

  // Throws kIo naming the first weight file that changed (size or modification time) since it
  // was mapped: mmapped weights would no longer be what was loaded. One fstat per file.
  void check_weights_unchanged() const;

  // SHA-256 of the GGUF file, or of the lines "NAME SHA256\n" of the directory's pinned files in
  // name order. Read from the pinned descriptors; throws kIo when a file changed since it was
  // pinned, before or while it is hashed. `progress` gets the fraction of bytes hashed.
  [[nodiscard]] std::string sha256(const std::function<void(double)>& progress) const;

  [[nodiscard]] std::uint64_t total_bytes() const noexcept;

 private:
  struct Pin {
    std::string name;  // file name (sort key of the directory digest)
    std::string path;
    UniqueFd fd;
    FileIdentity identity;
    bool weights = false;
  };
  void check_unchanged(const Pin& pin, std::string_view when = "after it was loaded") const;

  std::string model_path_;
  bool hf_ = false;
  std::vector<Pin> pins_;  // by name
};

}  // namespace sitsrt
