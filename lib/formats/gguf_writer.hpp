// GGUF v3 writer. Tensor data is produced by a callback at write time, one tensor at a time,
// so multi-gigabyte files are written without holding them in memory.
//
// Alignment: the writer owns `general.alignment`. A non-default alignment passed to the
// constructor is recorded as that key (u32, first in the metadata); a default (32) alignment
// writes no key unless the caller sets it. set("general.alignment", Value::u32(n)) changes the
// alignment the writer uses. Readers see the same value either way.
//
// Layout written: header, metadata in insertion order, tensor infos in add_tensor order with
// offsets packed in that order (each aligned), zero padding to the alignment, then the tensor
// data, each tensor followed by zero padding to the alignment (as ggml does).
//
// Threading: not thread-safe; one thread builds and writes a Writer.
#pragma once

#include "core/output_file.hpp"
#include "formats/gguf.hpp"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

namespace sitsrt::gguf {

class Writer {
 public:
  // Fills `out` (exactly the tensor's byte size, zero-initialised) with the tensor's encoded data.
  using Fill = std::function<void(std::span<std::byte> out)>;
  using Progress = std::function<void(std::size_t done_tensors, std::size_t total_tensors)>;

  // Throws kInvalidArgument unless `alignment` is a power of two no larger than 2^31.
  explicit Writer(std::uint64_t alignment = kDefaultAlignment);

  // Replaces an existing key in place, else appends. Throws kInvalidArgument (naming the key) for an
  // empty key, a value whose held alternative does not match its type, an integer out of range for
  // its width, array items whose type differs from element_type, or arrays nested too deep.
  void set(std::string key, Value value);

  // dims in GGUF order (innermost first), 1..4 of them, each >= 1; dims[0] must be a whole number
  // of blocks of `type`. Throws kInvalidArgument naming the tensor (also for a duplicate name).
  void add_tensor(std::string name, std::vector<std::int64_t> dims, DType type, Fill fill);

  [[nodiscard]] std::uint64_t alignment() const noexcept { return alignment_; }

  // Writes the file under a unique temporary name beside `path` (O_EXCL), then moves it into place
  // (see AtomicOutputFile); on failure the temporary file is removed and `path` is untouched.
  // Throws sitsrt::Error(kInvalidArgument) naming the path for a target that is not a regular file
  // (device, FIFO, symlink, directory), is one of output.protected_inputs, or exists while
  // output.replace_existing is false; kIo when a file cannot be created, written (e.g. disk full,
  // "File too large") or renamed; exceptions from a Fill propagate.
  // progress(done_tensors, total) is called after each tensor.
  void write(const std::string& path, const Progress& progress = {}, const OutputFileOptions& output = {}) const;
  // The same into an output file created (and its target checked) beforehand; commits it.
  void write(AtomicOutputFile& file, const Progress& progress = {}) const;

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
  void emit(Sink& sink, const Progress& progress) const;

  std::uint64_t alignment_;
  std::vector<KeyValue> metadata_;
  std::vector<PendingTensor> tensors_;
  std::unordered_set<std::string> tensor_names_;
};

}  // namespace sitsrt::gguf
