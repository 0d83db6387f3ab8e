#include "eval/kld_base_file.hpp"

#include "core/check.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

namespace sitsrt::eval {
namespace {

static_assert(std::endian::native == std::endian::little, "KL-divergence base files are little-endian");

constexpr char kMagic[8] = {'S', 'I', 'T', 'S', 'K', 'L', 'D', '\n'};
constexpr std::uint32_t kFlagAddBos = 1u << 0;
constexpr std::uint32_t kFlagDecodeScored = 1u << 1;
constexpr std::uint32_t kKnownFlags = kFlagAddBos | kFlagDecodeScored;
constexpr std::size_t kShaOffset = 36, kShaBytes = 64;
// A valid row's largest log-probability is ~0; allow float rounding of min + 65535 · scale.
constexpr double kLogProbSlack = 1e-3;

template <typename T>
T load(std::span<const std::byte> bytes, std::size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

template <typename T>
void store(std::span<std::byte> bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

bool lower_hex(std::string_view s) {
  return s.size() == kShaBytes &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

std::uint64_t KldBaseHeader::row_bytes() const noexcept {
  return (kKldRowPrefixBytes + 2 * std::uint64_t{n_vocab} + 7) / 8 * 8;
}

std::uint64_t KldBaseHeader::header_bytes() const noexcept {
  return kKldFixedHeaderBytes + description.size() + 4 * std::uint64_t{n_ctx} * n_chunks + 8;
}

std::int32_t KldBaseHeader::target(std::uint64_t r) const noexcept {
  const std::uint64_t chunk = r / rows_per_chunk(), j = first_scored + r % rows_per_chunk();
  return tokens[static_cast<std::size_t>(chunk * n_ctx + j + 1)];
}

std::uint64_t fnv1a64(std::span<const std::byte> bytes, std::uint64_t state) noexcept {
  for (const std::byte b : bytes) {
    state ^= static_cast<std::uint64_t>(b);
    state *= 0x100000001b3ull;
  }
  return state;
}

namespace {

// Everything but the token ids (which the layout depends on only through n_ctx · n_chunks).
void validate_fields(const KldBaseHeader& h, std::string_view name) {
  const auto fail = [&](std::string_view field, const std::string& problem) {
    raise(ErrorCode::kInvalidArgument, "{}: KL-divergence base file field '{}': {}", name, field, problem);
  };
  if (h.version != kKldBaseVersion) {
    raise(ErrorCode::kUnsupported, "{}: KL-divergence base file field 'version': {} (this build reads version {})",
          name, h.version, kKldBaseVersion);
  }
  if (h.n_vocab < 2 || h.n_vocab > kKldMaxVocab)
    fail("n_vocab", fmt::format("{} is outside [2, {}]", h.n_vocab, kKldMaxVocab));
  if (h.n_ctx < 4 || h.n_ctx > kKldMaxContext)
    fail("n_ctx", fmt::format("{} is outside [4, {}]", h.n_ctx, kKldMaxContext));
  if (h.n_chunks < 1) fail("n_chunks", "0 (a base file holds at least one chunk)");
  if (std::uint64_t{h.n_ctx} * h.n_chunks > (std::uint64_t{1} << 31)) {
    fail("n_chunks", fmt::format("{} chunks of {} tokens is over 2^31 tokens", h.n_chunks, h.n_ctx));
  }
  if (h.first_scored < 1 || std::uint64_t{h.first_scored} + 1 >= h.n_ctx) {
    fail("first_scored", fmt::format("{} is outside [1, n_ctx - 2 = {}]", h.first_scored, h.n_ctx - 2));
  }
  if (h.bos < -1 || h.bos >= static_cast<std::int64_t>(h.n_vocab)) {
    fail("bos", fmt::format("{} is neither -1 nor a token id below n_vocab {}", h.bos, h.n_vocab));
  }
  if (h.add_bos && h.bos < 0) fail("flags", "add_bos is set but bos is -1");
  if (!lower_hex(h.model_sha256)) fail("model_sha256", "not 64 lowercase hex digits");
  if (h.description.size() > kKldMaxDescriptionBytes) {
    fail("description", fmt::format("{} bytes, over the limit of {}", h.description.size(), kKldMaxDescriptionBytes));
  }
}

}  // namespace

void validate_header(const KldBaseHeader& h, std::string_view name) {
  validate_fields(h, name);
  const auto fail = [&](const std::string& problem) {
    raise(ErrorCode::kInvalidArgument, "{}: KL-divergence base file field 'tokens': {}", name, problem);
  };
  if (h.tokens.size() != std::uint64_t{h.n_ctx} * h.n_chunks) {
    fail(fmt::format("{} ids for {} chunks of {}", h.tokens.size(), h.n_chunks, h.n_ctx));
  }
  for (std::size_t i = 0; i < h.tokens.size(); ++i) {
    if (h.tokens[i] < 0 || h.tokens[i] >= static_cast<std::int64_t>(h.n_vocab)) {
      fail(fmt::format("tokens[{}] = {} is outside the vocabulary [0, {})", i, h.tokens[i], h.n_vocab));
    }
  }
}

std::vector<std::byte> serialize_header(const KldBaseHeader& h) {
  validate_header(h, "KL-divergence base header");
  std::vector<std::byte> out(static_cast<std::size_t>(h.header_bytes()));
  const std::span<std::byte> b(out);
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  store<std::uint32_t>(b, 8, h.version);
  store<std::uint32_t>(b, 12, h.n_vocab);
  store<std::uint32_t>(b, 16, h.n_ctx);
  store<std::uint32_t>(b, 20, h.n_chunks);
  store<std::uint32_t>(b, 24, h.first_scored);
  store<std::uint32_t>(b, 28, (h.add_bos ? kFlagAddBos : 0u) | (h.decode_scored ? kFlagDecodeScored : 0u));
  store<std::int32_t>(b, 32, h.bos);
  std::memcpy(out.data() + kShaOffset, h.model_sha256.data(), kShaBytes);
  store<std::uint32_t>(b, 100, static_cast<std::uint32_t>(h.description.size()));
  std::memcpy(out.data() + kKldFixedHeaderBytes, h.description.data(), h.description.size());
  const std::size_t tokens_at = kKldFixedHeaderBytes + h.description.size();
  std::memcpy(out.data() + tokens_at, h.tokens.data(), h.tokens.size() * sizeof(std::int32_t));
  const std::size_t sum_at = out.size() - 8;
  store<std::uint64_t>(b, sum_at, fnv1a64(b.first(sum_at)));
  return out;
}

KldBaseHeader parse_header(std::span<const std::byte> bytes, std::uint64_t file_size, std::string_view name) {
  const auto fail = [&](std::string_view field, const std::string& problem) {
    raise(ErrorCode::kInvalidArgument, "{}: KL-divergence base file field '{}': {}", name, field, problem);
  };
  if (bytes.size() < kKldFixedHeaderBytes) {
    fail("header",
         fmt::format("truncated: {} bytes, the fixed header alone is {}", bytes.size(), kKldFixedHeaderBytes));
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    fail("magic", "not a sitsrt KL-divergence base file (write one with sitsrt perplexity --kl-divergence-base)");
  }
  KldBaseHeader h;
  h.version = load<std::uint32_t>(bytes, 8);
  h.n_vocab = load<std::uint32_t>(bytes, 12);
  h.n_ctx = load<std::uint32_t>(bytes, 16);
  h.n_chunks = load<std::uint32_t>(bytes, 20);
  h.first_scored = load<std::uint32_t>(bytes, 24);
  const auto flags = load<std::uint32_t>(bytes, 28);
  if ((flags & ~kKnownFlags) != 0) fail("flags", fmt::format("unknown bits 0x{:x}", flags & ~kKnownFlags));
  h.add_bos = (flags & kFlagAddBos) != 0;
  h.decode_scored = (flags & kFlagDecodeScored) != 0;
  h.bos = load<std::int32_t>(bytes, 32);
  h.model_sha256.assign(reinterpret_cast<const char*>(bytes.data() + kShaOffset), kShaBytes);
  const auto description_bytes = load<std::uint32_t>(bytes, 100);
  if (description_bytes > kKldMaxDescriptionBytes) {
    fail("description", fmt::format("{} bytes, over the limit of {}", description_bytes, kKldMaxDescriptionBytes));
  }
  validate_fields(h, name);  // before n_ctx · n_chunks sizes anything
  const std::uint64_t header_bytes =
      kKldFixedHeaderBytes + description_bytes + 4 * std::uint64_t{h.n_ctx} * h.n_chunks + 8;
  if (header_bytes > bytes.size()) {
    fail("tokens", fmt::format("truncated: the header of {} chunks of {} tokens needs {} bytes, the file has {}",
                               h.n_chunks, h.n_ctx, header_bytes, std::min<std::uint64_t>(bytes.size(), file_size)));
  }
  h.description.assign(reinterpret_cast<const char*>(bytes.data() + kKldFixedHeaderBytes), description_bytes);
  h.tokens.resize(static_cast<std::size_t>(std::uint64_t{h.n_ctx} * h.n_chunks));
  std::memcpy(h.tokens.data(), bytes.data() + kKldFixedHeaderBytes + description_bytes,
              h.tokens.size() * sizeof(std::int32_t));
  const std::size_t sum_at = static_cast<std::size_t>(header_bytes - 8);
  if (load<std::uint64_t>(bytes, sum_at) != fnv1a64(bytes.first(sum_at))) {
    fail("header_checksum", "does not match the header (the file is corrupted)");
  }
  validate_header(h, name);
  if (file_size != h.file_bytes()) {
    fail("rows", fmt::format("the file has {} bytes but its header describes {} ({} rows of {} bytes after {} header "
                             "bytes): {}",
                             file_size, h.file_bytes(), h.rows(), h.row_bytes(), header_bytes,
                             file_size < h.file_bytes() ? "truncated" : "trailing bytes"));
  }
  return h;
}

void serialize_row(const KldBaseHeader& h, const QuantizedRow& row, std::span<const std::uint16_t> codes,
                   std::span<std::byte> out) {
  SITSRT_ASSERT(codes.size() == h.n_vocab && out.size() == h.row_bytes());
  store<float>(out, 8, row.min_log_prob);
  store<float>(out, 12, row.scale);
  store<float>(out, 16, row.target_log_prob);
  store<std::int32_t>(out, 20, row.top_token);
  std::memcpy(out.data() + kKldRowPrefixBytes, codes.data(), codes.size_bytes());
  std::fill(out.begin() + static_cast<std::ptrdiff_t>(kKldRowPrefixBytes + codes.size_bytes()), out.end(),
            std::byte{0});
  store<std::uint64_t>(out, 0, fnv1a64(out.subspan(8)));
}

QuantizedRow parse_row(std::span<const std::byte> bytes, const KldBaseHeader& h, std::uint64_t index,
                       std::string_view name, std::span<std::uint16_t> codes) {
  SITSRT_ASSERT(codes.size() == h.n_vocab);
  const std::uint64_t chunk = index / h.rows_per_chunk(), position = h.first_scored + index % h.rows_per_chunk();
  const auto fail = [&](std::string_view field, const std::string& problem) {
    raise(ErrorCode::kInvalidArgument, "{}: KL-divergence base file row {} (chunk {}, position {}) field '{}': {}",
          name, index, chunk, position, field, problem);
  };
  if (bytes.size() != h.row_bytes()) fail("row", fmt::format("truncated: {} of {} bytes", bytes.size(), h.row_bytes()));
  if (load<std::uint64_t>(bytes, 0) != fnv1a64(bytes.subspan(8)))
    fail("checksum", "does not match the row (corrupted)");
  QuantizedRow row;
  row.min_log_prob = load<float>(bytes, 8);
  row.scale = load<float>(bytes, 12);
  row.target_log_prob = load<float>(bytes, 16);
  row.top_token = load<std::int32_t>(bytes, 20);
  // The top token's log-probability is in [−log n_vocab, 0] and the codes span at most
  // kQuantizedRange below it.
  const double lowest_top = -std::log(static_cast<double>(h.n_vocab)) - kLogProbSlack;
  if (!std::isfinite(row.min_log_prob) || row.min_log_prob > kLogProbSlack ||
      row.min_log_prob < lowest_top - kQuantizedRange) {
    fail("min_log_prob", fmt::format("{} is not in [{:.3f}, 0]", row.min_log_prob, lowest_top - kQuantizedRange));
  }
  const double top = static_cast<double>(row.min_log_prob) + 65535.0 * static_cast<double>(row.scale);
  if (!std::isfinite(row.scale) || row.scale < 0.0f || top > kLogProbSlack || top < lowest_top) {
    fail("scale",
         fmt::format("{} puts the top log-probability at {}, outside [{:.3f}, 0]", row.scale, top, lowest_top));
  }
  if (std::isnan(row.target_log_prob) || row.target_log_prob > kLogProbSlack) {
    fail("target_log_prob", fmt::format("{} is not a log-probability", row.target_log_prob));
  }
  if (row.top_token < 0 || row.top_token >= static_cast<std::int64_t>(h.n_vocab)) {
    fail("top_token", fmt::format("{} is outside the vocabulary [0, {})", row.top_token, h.n_vocab));
  }
  std::memcpy(codes.data(), bytes.data() + kKldRowPrefixBytes, codes.size_bytes());
  return row;
}

KldBaseWriter::KldBaseWriter(std::string path, KldBaseHeader header)
    : path_(std::move(path)), part_path_(path_ + ".part"), header_(std::move(header)) {
  const std::vector<std::byte> bytes = serialize_header(header_);
  out_.open(part_path_, std::ios::binary | std::ios::trunc);
  if (!out_) raise(ErrorCode::kIo, "{}: cannot create (writing the KL-divergence base {})", part_path_, path_);
  write(bytes);
  row_buffer_.resize(static_cast<std::size_t>(header_.row_bytes()));
}

KldBaseWriter::~KldBaseWriter() {
  if (finished_) return;
  out_.close();
  std::error_code ignored;
  std::filesystem::remove(part_path_, ignored);
}

void KldBaseWriter::write(std::span<const std::byte> bytes) {
  out_.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out_) raise(ErrorCode::kIo, "{}: write failed (disk full?)", part_path_);
}

void KldBaseWriter::write_row(const QuantizedRow& row, std::span<const std::uint16_t> codes) {
  if (rows_written_ >= header_.rows()) {
    raise(ErrorCode::kInvalidArgument, "{}: all {} rows are already written", path_, header_.rows());
  }
  serialize_row(header_, row, codes, row_buffer_);
  write(row_buffer_);
  ++rows_written_;
}

void KldBaseWriter::finish() {
  if (rows_written_ != header_.rows()) {
    raise(ErrorCode::kInvalidArgument, "{}: {} of {} rows written", path_, rows_written_, header_.rows());
  }
  out_.close();
  if (!out_) raise(ErrorCode::kIo, "{}: closing failed", part_path_);
  std::error_code ec;
  std::filesystem::rename(part_path_, path_, ec);
  if (ec) raise(ErrorCode::kIo, "{}: cannot rename {} to it: {}", path_, part_path_, ec.message());
  finished_ = true;
}

KldBaseReader::KldBaseReader(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path_, ec);
  if (ec) raise(ErrorCode::kIo, "{}: cannot read the KL-divergence base file: {}", path_, ec.message());
  in_.open(path_, std::ios::binary);
  if (!in_) raise(ErrorCode::kIo, "{}: cannot open the KL-divergence base file", path_);
  // The fixed part says how long the whole header is (bounded by the file size before allocating).
  std::vector<std::byte> bytes(std::min<std::size_t>(kKldFixedHeaderBytes, size));
  in_.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (bytes.size() == kKldFixedHeaderBytes && std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0) {
    const std::uint64_t description = load<std::uint32_t>(std::span<const std::byte>(bytes), 100);
    const std::uint64_t n_tokens = std::uint64_t{load<std::uint32_t>(std::span<const std::byte>(bytes), 16)} *
                                   load<std::uint32_t>(std::span<const std::byte>(bytes), 20);
    const std::uint64_t wanted = kKldFixedHeaderBytes + description + 4 * n_tokens + 8;
    const std::size_t total = static_cast<std::size_t>(std::min<std::uint64_t>(wanted, size));
    bytes.resize(total);
    in_.read(reinterpret_cast<char*>(bytes.data() + kKldFixedHeaderBytes),
             static_cast<std::streamsize>(total - kKldFixedHeaderBytes));
  }
  if (!in_) raise(ErrorCode::kIo, "{}: reading the header failed", path_);
  header_ = parse_header(bytes, size, path_);
  row_buffer_.resize(static_cast<std::size_t>(header_.row_bytes()));
}

QuantizedRow KldBaseReader::next_row(std::span<std::uint16_t> codes) {
  if (rows_read_ >= header_.rows()) {
    raise(ErrorCode::kInvalidArgument, "{}: all {} rows are already read", path_, header_.rows());
  }
  in_.read(reinterpret_cast<char*>(row_buffer_.data()), static_cast<std::streamsize>(row_buffer_.size()));
  if (!in_) raise(ErrorCode::kIo, "{}: reading row {} failed (the file changed while it was read?)", path_, rows_read_);
  return parse_row(row_buffer_, header_, rows_read_++, path_, codes);
}

}  // namespace sitsrt::eval
