// GGUF v3 writer. Tensor data is produced by a callback at write time, one tensor at a time,
// so multi-gigabyte files are written without holding them in memory.
#pragma once

#include "formats/gguf.hpp"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace sitsrt::gguf {

class Writer {
 public:
  // Fills `out` (exactly the tensor's byte size) with the tensor's encoded data.
  using Fill = std::function<void(std::span<std::byte> out)>;

  explicit Writer(std::uint64_t alignment = 32);

  void set(std::string key, Value value);  // replaces an existing key
  // dims in GGUF order (innermost first); dims[0] must be a whole number of blocks of `type`.
  void add_tensor(std::string name, std::vector<std::int64_t> dims, DType type, Fill fill);

  // Writes the file (to `path` + ".tmp", then renamed). progress(done_tensors, total) is
  // called after each tensor. Throws sitsrt::Error on I/O failure.
  void write(const std::string& path, const std::function<void(std::size_t, std::size_t)>& progress = {}) const;

  // Serialises into memory (tests and fuzz corpora).
  [[nodiscard]] std::vector<std::byte> to_bytes() const;

 private:
  struct PendingTensor {
    std::string name;
    std::vector<std::int64_t> dims;
    DType type;
    std::uint64_t bytes;
    Fill fill;
  };
  template <typename Sink>
  void emit(Sink& sink, const std::function<void(std::size_t, std::size_t)>& progress) const;

  std::uint64_t alignment_;
  std::vector<KeyValue> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace sitsrt::gguf
