// KL-divergence base files (`sitsrt perplexity --kl-divergence-base`): the evaluated tokens and,
// for every scored position, the base model's next-token distribution as uint16-quantized
// log-probabilities. Layout, version 1, little-endian (docs/perplexity.md):
//
//   header  [0,8) magic "SITSKLD\n"; [8,12) u32 version; [12,16) u32 n_vocab; [16,20) u32 n_ctx;
//           [20,24) u32 n_chunks; [24,28) u32 first_scored; [28,32) u32 flags (bit 0 add_bos,
//           bit 1 decode_scored); [32,36) i32 bos (-1: none); [36,100) model SHA-256, 64 lowercase
//           hex digits; [100,104) u32 description bytes D (<= 4096); D bytes of UTF-8 text;
//           n_chunks · n_ctx i32 token ids; u64 FNV-1a-64 of every header byte before it.
//   rows    n_chunks · (n_ctx − 1 − first_scored) rows of row_bytes() each, chunk by chunk,
//           position first_scored .. n_ctx − 2 (the logits after token j predict token j + 1):
//           u64 FNV-1a-64 of the rest of the row; f32 min_log_prob; f32 scale; f32
//           target_log_prob; i32 top_token; n_vocab u16 codes; zero padding to a multiple of 8.
//
// Every field is validated on reading; a malformed, truncated or padded file is an Error naming
// the file and the field.
#pragma once

#include "eval/log_probs.hpp"

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt::eval {

inline constexpr std::uint32_t kKldBaseVersion = 1;
inline constexpr std::size_t kKldFixedHeaderBytes = 104;
inline constexpr std::uint32_t kKldMaxDescriptionBytes = 4096;
inline constexpr std::size_t kKldRowPrefixBytes = 24;
inline constexpr std::uint32_t kKldMaxVocab = 1u << 24;
inline constexpr std::uint32_t kKldMaxContext = 1u << 24;

struct KldBaseHeader {
  std::uint32_t version = kKldBaseVersion;
  std::uint32_t n_vocab = 0;
  std::uint32_t n_ctx = 0;
  std::uint32_t n_chunks = 0;
  std::uint32_t first_scored = 0;  // positions [first_scored, n_ctx − 1) of each chunk are scored
  bool add_bos = false;            // each chunk's first token was replaced by bos when evaluated
  bool decode_scored = false;      // the scored positions ran as one-token (decode) steps
  std::int32_t bos = -1;
  std::string model_sha256;          // of the base model (Engine::model_sha256)
  std::string description;           // the base run's model path and engine settings, for people
  std::vector<std::int32_t> tokens;  // n_chunks · n_ctx ids, as tokenized (before the BOS substitution)

  [[nodiscard]] std::uint64_t rows_per_chunk() const noexcept { return std::uint64_t{n_ctx} - 1 - first_scored; }
  [[nodiscard]] std::uint64_t rows() const noexcept { return std::uint64_t{n_chunks} * rows_per_chunk(); }
  [[nodiscard]] std::uint64_t row_bytes() const noexcept;
  [[nodiscard]] std::uint64_t header_bytes() const noexcept;
  [[nodiscard]] std::uint64_t file_bytes() const noexcept { return header_bytes() + rows() * row_bytes(); }
  // The token that row `r` (file order) predicts.
  [[nodiscard]] std::int32_t target(std::uint64_t r) const noexcept;
};

// FNV-1a, 64 bits, continuing from `state`.
inline constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ull;
std::uint64_t fnv1a64(std::span<const std::byte> bytes, std::uint64_t state = kFnvOffset) noexcept;

// Checks a header's fields (as the reader does); throws Error naming `name` and the field.
void validate_header(const KldBaseHeader& header, std::string_view name);
// The serialized header (its checksum included).
std::vector<std::byte> serialize_header(const KldBaseHeader& header);
// Parses and validates the header at the start of `bytes` (which may hold more: the whole file)
// of a file of `file_size` bytes, which must be exactly header.file_bytes().
KldBaseHeader parse_header(std::span<const std::byte> bytes, std::uint64_t file_size, std::string_view name);
// The serialized row (row_bytes() bytes, checksum first).
void serialize_row(const KldBaseHeader& header, const QuantizedRow& row, std::span<const std::uint16_t> codes,
                   std::span<std::byte> out);
// Parses and validates row `index` (for messages) from exactly row_bytes() bytes into `codes`
// (n_vocab entries).
QuantizedRow parse_row(std::span<const std::byte> bytes, const KldBaseHeader& header, std::uint64_t index,
                       std::string_view name, std::span<std::uint16_t> codes);

// Writes a base file: to PATH.part, renamed to PATH by finish() once every row is written; an
// unfinished writer removes its part file when destroyed.
class KldBaseWriter {
 public:
  KldBaseWriter(std::string path, KldBaseHeader header);
  ~KldBaseWriter();
  KldBaseWriter(const KldBaseWriter&) = delete;
  KldBaseWriter& operator=(const KldBaseWriter&) = delete;

  void write_row(const QuantizedRow& row, std::span<const std::uint16_t> codes);
  void finish();
  [[nodiscard]] const KldBaseHeader& header() const noexcept { return header_; }

 private:
  void write(std::span<const std::byte> bytes);
  std::string path_, part_path_;
  KldBaseHeader header_;
  std::ofstream out_;
  std::vector<std::byte> row_buffer_;
  std::uint64_t rows_written_ = 0;
  bool finished_ = false;
};

// Reads a base file row by row, in file order; the header and the file size are checked on
// construction, each row when it is read.
class KldBaseReader {
 public:
  explicit KldBaseReader(std::string path);
  [[nodiscard]] const KldBaseHeader& header() const noexcept { return header_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] std::uint64_t rows_read() const noexcept { return rows_read_; }
  // The next row; `codes` receives its n_vocab codes.
  QuantizedRow next_row(std::span<std::uint16_t> codes);

 private:
  std::string path_;
  std::ifstream in_;
  KldBaseHeader header_;
  std::vector<std::byte> row_buffer_;
  std::uint64_t rows_read_ = 0;
};

}  // namespace sitsrt::eval
