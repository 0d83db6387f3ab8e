// KL-divergence base files (lib/eval/kld_base_file): round trip, and every kind of damage
// (truncation, corruption, bad fields, trailing bytes) is an Error naming the file and field.
#include "eval/kld_base_file.hpp"

#include <sitsrt/error.hpp>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

using namespace sitsrt;
using namespace sitsrt::eval;
using Catch::Matchers::Contains;

namespace {

std::filesystem::path temp_dir() {
  static const auto dir = [] {
    auto d = std::filesystem::temp_directory_path() / fmt::format("sitsrt-kld-test-{}", ::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

KldBaseHeader small_header() {
  KldBaseHeader h;
  h.n_vocab = 7;  // odd: the rows carry padding
  h.n_ctx = 8;
  h.n_chunks = 2;
  h.first_scored = 4;
  h.add_bos = true;
  h.bos = 1;
  h.model_sha256 = std::string(64, 'a');
  h.description = "test base";
  for (std::int32_t i = 0; i < 16; ++i) h.tokens.push_back((i * 3) % 7);
  return h;
}

struct Row {
  QuantizedRow row;
  std::vector<std::uint16_t> codes;
};

std::vector<Row> small_rows(const KldBaseHeader& h) {
  std::mt19937 rng(1);
  std::vector<Row> rows;
  for (std::uint64_t r = 0; r < h.rows(); ++r) {
    std::vector<float> logits(h.n_vocab);
    for (float& v : logits) v = static_cast<float>(rng() % 1000) / 100.0f;
    Row row;
    row.codes.resize(h.n_vocab);
    row.row = quantize_row(logits, log_softmax(logits), h.target(r), row.codes);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string write_file(const std::string& name, const KldBaseHeader& h, const std::vector<Row>& rows) {
  const std::string path = (temp_dir() / name).string();
  KldBaseWriter w(path, h);
  for (const Row& r : rows) w.write_row(r.row, r.codes);
  w.finish();
  return path;
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string write_bytes(const std::string& name, const std::vector<char>& bytes) {
  const std::string path = (temp_dir() / name).string();
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

// Reads the whole file; throws like the perplexity command would.
void read_all(const std::string& path) {
  KldBaseReader reader(path);
  std::vector<std::uint16_t> codes(reader.header().n_vocab);
  for (std::uint64_t r = 0; r < reader.header().rows(); ++r) (void)reader.next_row(codes);
}

// Recomputes the header checksum after an edit, so that the field checks behind it are reached.
void fix_header_checksum(std::vector<char>& bytes, const KldBaseHeader& h) {
  const std::size_t at = static_cast<std::size_t>(h.header_bytes() - 8);
  const std::uint64_t sum = fnv1a64(std::as_bytes(std::span(bytes.data(), at)));
  std::memcpy(bytes.data() + at, &sum, 8);
}

void fix_row_checksum(std::vector<char>& bytes, const KldBaseHeader& h, std::uint64_t row) {
  const std::size_t at = static_cast<std::size_t>(h.header_bytes() + row * h.row_bytes());
  const std::uint64_t sum = fnv1a64(std::as_bytes(std::span(bytes.data() + at + 8, h.row_bytes() - 8)));
  std::memcpy(bytes.data() + at, &sum, 8);
}

template <typename T>
void poke(std::vector<char>& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

void check_fails(const std::string& path, const std::string& field) {
  INFO("expecting a complaint about '" << field << "'");
  CHECK_THROWS_WITH(read_all(path), Contains(path) && Contains(field));
}

}  // namespace

TEST_CASE("base files round-trip header and rows", "[eval]") {
  const KldBaseHeader h = small_header();
  const std::vector<Row> rows = small_rows(h);
  const std::string path = write_file("round.kld", h, rows);
  CHECK(std::filesystem::file_size(path) == h.file_bytes());
  CHECK_FALSE(std::filesystem::exists(path + ".part"));
  CHECK(h.row_bytes() % 8 == 0);
  KldBaseReader reader(path);
  const KldBaseHeader& got = reader.header();
  CHECK(got.n_vocab == 7);
  CHECK(got.n_ctx == 8);
  CHECK(got.n_chunks == 2);
  CHECK(got.first_scored == 4);
  CHECK(got.add_bos);
  CHECK_FALSE(got.decode_scored);
  CHECK(got.bos == 1);
  CHECK(got.model_sha256 == h.model_sha256);
  CHECK(got.description == "test base");
  CHECK(got.tokens == h.tokens);
  CHECK(got.rows() == 6);  // 2 chunks x positions 4, 5, 6
  CHECK(got.target(0) == h.tokens[5]);
  CHECK(got.target(3) == h.tokens[8 + 5]);
  std::vector<std::uint16_t> codes(7);
  for (const Row& r : rows) {
    const QuantizedRow q = reader.next_row(codes);
    CHECK(q.min_log_prob == r.row.min_log_prob);
    CHECK(q.scale == r.row.scale);
    CHECK(q.target_log_prob == r.row.target_log_prob);
    CHECK(q.top_token == r.row.top_token);
    CHECK(codes == r.codes);
  }
  CHECK_THROWS_AS(reader.next_row(codes), Error);  // past the last row
}

TEST_CASE("an unfinished writer leaves no file behind; finish needs every row", "[eval]") {
  const KldBaseHeader h = small_header();
  const std::vector<Row> rows = small_rows(h);
  const std::string path = (temp_dir() / "unfinished.kld").string();
  {
    KldBaseWriter w(path, h);
    w.write_row(rows[0].row, rows[0].codes);
    CHECK_THROWS_WITH(w.finish(), Contains("1 of 6 rows"));
  }
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK_FALSE(std::filesystem::exists(path + ".part"));
  KldBaseHeader bad = h;
  bad.tokens[3] = 7;
  CHECK_THROWS_WITH(KldBaseWriter(path, bad), Contains("tokens"));
}

TEST_CASE("truncated, padded and corrupted base files are errors naming the file and field", "[eval]") {
  const KldBaseHeader h = small_header();
  const std::string good = write_file("good.kld", h, small_rows(h));
  const std::vector<char> bytes = read_bytes(good);
  const std::size_t rows_at = static_cast<std::size_t>(h.header_bytes());

  SECTION("truncations at every length are refused") {
    for (const std::size_t keep :
         {std::size_t{0}, std::size_t{50}, kKldFixedHeaderBytes, rows_at - 3, rows_at, bytes.size() - 1}) {
      const std::vector<char> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(keep));
      const std::string path = write_bytes(fmt::format("cut{}.kld", keep), cut);
      INFO("kept " << keep << " bytes");
      CHECK_THROWS_WITH(read_all(path), Contains(path) && (Contains("truncated") || Contains("magic")));
    }
  }
  SECTION("trailing bytes") {
    std::vector<char> longer = bytes;
    longer.push_back(0);
    check_fails(write_bytes("long.kld", longer), "trailing bytes");
  }
  SECTION("magic and version") {
    std::vector<char> b = bytes;
    b[0] = 'X';
    check_fails(write_bytes("magic.kld", b), "magic");
    b = bytes;
    poke<std::uint32_t>(b, 8, 2);
    const std::string path = write_bytes("version.kld", b);
    check_fails(path, "version");
    try {
      read_all(path);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kUnsupported);
    }
  }
  SECTION("a corrupted header byte fails its checksum") {
    std::vector<char> b = bytes;
    b[rows_at - 20] ^= 1;  // inside the token ids
    check_fails(write_bytes("header_sum.kld", b), "header_checksum");
  }
  SECTION("fields behind a valid checksum are still checked") {
    const std::vector<std::pair<std::size_t, std::uint32_t>> edits = {{12, 1}, {16, 2}, {20, 0}, {24, 7},
                                                                      {24, 0}, {28, 4}, {32, 9}, {100, 5000}};
    const std::vector<std::string> fields = {"n_vocab",      "n_ctx", "n_chunks", "first_scored",
                                             "first_scored", "flags", "bos",      "description"};
    for (std::size_t i = 0; i < edits.size(); ++i) {
      std::vector<char> b = bytes;
      poke<std::uint32_t>(b, edits[i].first, edits[i].second);
      fix_header_checksum(b, h);
      check_fails(write_bytes(fmt::format("field{}.kld", i), b), fields[i]);
    }
    std::vector<char> b = bytes;
    b[40] = 'Z';  // not hex
    fix_header_checksum(b, h);
    check_fails(write_bytes("sha.kld", b), "model_sha256");
    b = bytes;
    poke<std::int32_t>(b, kKldFixedHeaderBytes + h.description.size() + 4 * 5, 7);  // tokens[5] = n_vocab
    fix_header_checksum(b, h);
    check_fails(write_bytes("token.kld", b), "tokens[5]");
    b = bytes;
    poke<std::int32_t>(b, 32, -1);  // bos -1 while add_bos
    fix_header_checksum(b, h);
    check_fails(write_bytes("nobos.kld", b), "flags");
  }
  SECTION("a corrupted row fails its checksum; bad row fields behind a valid one are named") {
    std::vector<char> b = bytes;
    b[rows_at + h.row_bytes() + 30] ^= 4;  // row 1's codes
    CHECK_THROWS_WITH(read_all(write_bytes("row_sum.kld", b)), Contains("row 1") && Contains("checksum"));
    const std::vector<std::pair<std::size_t, float>> edits = {
        {8, std::numeric_limits<float>::quiet_NaN()}, {8, 1.0f}, {8, -1000.0f}, {12, -1.0f}, {12, 1.0f}, {16, 0.5f},
        {16, std::numeric_limits<float>::quiet_NaN()}};
    const std::vector<std::string> fields = {"min_log_prob", "min_log_prob",    "min_log_prob",   "scale",
                                             "scale",        "target_log_prob", "target_log_prob"};
    for (std::size_t i = 0; i < edits.size(); ++i) {
      b = bytes;
      poke<float>(b, rows_at + 2 * h.row_bytes() + edits[i].first, edits[i].second);
      fix_row_checksum(b, h, 2);
      const std::string path = write_bytes(fmt::format("rowfield{}.kld", i), b);
      CHECK_THROWS_WITH(read_all(path), Contains(path) && Contains("row 2") && Contains(fields[i]));
    }
    b = bytes;
    poke<std::int32_t>(b, rows_at + 20, 7);
    fix_row_checksum(b, h, 0);
    check_fails(write_bytes("top.kld", b), "top_token");
  }
  SECTION("a missing file is an I/O error naming it") {
    const std::string path = (temp_dir() / "absent.kld").string();
    CHECK_THROWS_WITH(KldBaseReader(path), Contains(path));
  }
}
