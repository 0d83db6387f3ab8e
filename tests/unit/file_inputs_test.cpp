// Files a user points the library at that are not what they seem: a FIFO (no writer), a device
// (/dev/zero), a directory, or a regular file far larger than its kind may be. Each is refused at
// once with sitsrt::Error naming the file; nothing blocks and nothing is read without bound. An
// alarm turns a hang (the behaviour before) into a failure.
#include "audit/key_file.hpp"
#include "audit/log_reader.hpp"
#include "audit/records.hpp"
#include "audit/verify.hpp"
#include "core/file_io.hpp"
#include "core/mapped_file.hpp"
#include "model/hf_model.hpp"
#include "tokenizer/tokenizer.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace sitsrt;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// A scratch folder with a FIFO, a directory and helpers; an alarm fails a test that blocks.
class Scratch {
 public:
  Scratch() : path_(fs::temp_directory_path() / ("sitsrt_inputs_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_ / "dir");
    REQUIRE(::mkfifo(file("fifo").c_str(), 0644) == 0);
    ::alarm(30);
  }
  ~Scratch() {
    ::alarm(0);
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }
  // A sparse file of `bytes` (no disk blocks): as large as a hostile file, instantly.
  [[nodiscard]] std::string sparse(const std::string& name, std::uint64_t bytes) const {
    const std::string p = file(name);
    std::ofstream(p).close();
    fs::resize_file(p, bytes);
    return p;
  }

 private:
  fs::path path_;
};

template <typename Fn>
std::string refusal(Fn&& fn, ErrorCode code) {
  const auto start = std::chrono::steady_clock::now();
  try {
    fn();
  } catch (const Error& e) {
    CHECK(e.code() == code);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
    return e.what();
  }
  FAIL("expected a sitsrt::Error");
  return {};
}

}  // namespace

TEST_CASE("open_regular_file and read_regular_file refuse FIFOs, devices and directories at once", "[files]") {
  const Scratch s;
  const std::string fifo = s.file("fifo");
  CHECK_THAT(refusal([&] { (void)open_regular_file(fifo); }, ErrorCode::kIo), Contains(fifo) && Contains("is a FIFO"));
  CHECK_THAT(refusal([&] { (void)read_regular_file("/dev/zero", 1 << 20, "thing"); }, ErrorCode::kIo),
             Contains("/dev/zero: is a character device, not a regular file"));
  CHECK_THAT(refusal([&] { (void)read_regular_file(s.file("dir"), 1 << 20, "thing"); }, ErrorCode::kIo),
             Contains("is a directory"));
  CHECK_THAT(refusal([&] { (void)MappedFile(fifo); }, ErrorCode::kIo), Contains("is a FIFO"));
  const std::string big = s.sparse("big", (std::uint64_t{1} << 20) + 1);
  CHECK_THAT(refusal([&] { (void)read_regular_file(big, 1 << 20, "widget"); }, ErrorCode::kInvalidArgument),
             Contains("1048577 bytes is larger than the 1 MiB (1048576 bytes) a widget may have"));
  std::ofstream(s.file("small")) << "hello";
  CHECK(read_regular_file(s.file("small"), 5, "widget") == "hello");
  CHECK_THROWS_WITH(read_regular_file(s.file("small"), 4, "widget"), Contains("5 bytes is larger"));
}

TEST_CASE("key files: bounded, type-checked, one trailing newline dropped", "[files][audit]") {
  const Scratch s;
  CHECK_THAT(refusal([&] { (void)audit::read_key_file("/dev/zero"); }, ErrorCode::kIo), Contains("character device"));
  CHECK_THAT(refusal([&] { (void)audit::read_key_file(s.file("fifo")); }, ErrorCode::kIo), Contains("is a FIFO"));
  const std::string big = s.sparse("key", audit::kMaxKeyFileBytes + 1);
  CHECK_THAT(refusal([&] { (void)audit::read_key_file(big); }, ErrorCode::kInvalidArgument),
             Contains("a key file may have"));
  std::ofstream(s.file("k")) << "k3y\n\n";
  CHECK(audit::read_key_file(s.file("k")) == "k3y\n");
  CHECK_THROWS_WITH(audit::key_from_file_contents("\n", "k"), Contains("is empty"));
  CHECK(audit::key_from_file_contents(std::string(audit::kMaxKeyFileBytes, 'x'), "k").size() == audit::kMaxKeyFileBytes);
}

TEST_CASE("audit log readers: FIFOs, devices and directories refused, lines bounded", "[files][audit]") {
  const Scratch s;
  for (const std::string& path : {s.file("fifo"), std::string("/dev/zero"), s.file("dir")}) {
    CHECK_THAT(refusal([&] { (void)audit::verify_log({path}, ""); }, ErrorCode::kIo), Contains(path));
    CHECK_THAT(refusal([&] { (void)audit::read_recorded_requests({path}); }, ErrorCode::kIo), Contains(path));
  }
  // A 65 MiB line without a newline (sparse zeros) is refused after reading just past the bound.
  const std::string long_line = s.sparse("long.jsonl", audit::kMaxRecordBytes + (1 << 20));
  CHECK_THAT(refusal([&] { (void)audit::read_recorded_requests({long_line}); }, ErrorCode::kInvalidArgument),
             Contains("long.jsonl:1: a line longer than 64 MiB is not an audit record"));
  // A record whose type is not a string is an error naming the line, not std::terminate
  // (found by the audit_reader fuzz target).
  std::ofstream(s.file("type.jsonl")) << "{\"type\":\"file\"}\n{\"type\":1}\n";
  CHECK_THAT(refusal([&] { (void)audit::read_recorded_requests({s.file("type.jsonl")}); }, ErrorCode::kInvalidArgument),
             Contains("type.jsonl:2: ") && Contains("type must be string"));
  // Numbers out of a field's range are errors naming the field, never an undefined conversion
  // (1.8e29 as the int64 timestamp: found by the audit_reader fuzz target under UBSan).
  std::ofstream(s.file("range.jsonl")) << "{\"type\":\"file\"}\n{\"type\":\"request\",\"req\":\"r\",\"ts_ns\":1.8e29}\n";
  CHECK_THAT(refusal([&] { (void)audit::read_recorded_requests({s.file("range.jsonl")}); }, ErrorCode::kInvalidArgument),
             Contains("range.jsonl:2: ") && Contains("field 'ts_ns' has the wrong type or is out of range"));
  const auto j = nlohmann::json::parse(R"({"id": 1099511627776, "lp": 1e300, "n": -1, "ok": 7, "v": [1, 2.5]})");
  CHECK_THROWS_WITH(audit::record_field<std::int32_t>(j, "id"), Contains("'id' has the wrong type or is out of range"));
  CHECK_THROWS_WITH(audit::record_field<float>(j, "lp"), Contains("'lp'"));
  CHECK_THROWS_WITH(audit::record_field<std::uint64_t>(j, "n"), Contains("'n'"));
  CHECK_THROWS_WITH(audit::record_field<std::vector<std::int32_t>>(j, "v"), Contains("'v'"));
  CHECK(audit::record_field<std::int64_t>(j, "id") == 1099511627776);
  CHECK(audit::record_field<double>(j, "ok") == 7.0);
  std::ofstream(s.file("lines")) << "a\n\nbc";
  audit::LogLineReader reader(s.file("lines"));
  std::string line;
  bool complete = false;
  REQUIRE(reader.next(line, complete));
  CHECK((line == "a" && complete && reader.line_number() == 1));
  REQUIRE(reader.next(line, complete));
  CHECK((line.empty() && complete));
  REQUIRE(reader.next(line, complete));
  CHECK((line == "bc" && !complete && reader.line_number() == 3));
  CHECK_FALSE(reader.next(line, complete));
}

TEST_CASE("model inputs: a FIFO as model, shard or tokenizer.json is refused; configs are bounded", "[files][model]") {
  const Scratch s;
  CHECK_THAT(refusal([&] { (void)load_tokenizer(s.file("fifo")); }, ErrorCode::kIo), Contains("is a FIFO"));
  const fs::path valid = fs::path(SITSRT_SOURCE_DIR) / "tests/data/malformed/hf_valid_llama";
  const fs::path dir = s.file("hf");
  fs::create_directories(dir);
  fs::copy_file(valid / "config.json", dir / "config.json");
  REQUIRE(::mkfifo((dir / "model.safetensors").c_str(), 0644) == 0);
  CHECK_THAT(refusal([&] { (void)open_hf_model(dir.string()); }, ErrorCode::kIo),
             Contains("model.safetensors: is a FIFO"));
  fs::remove(dir / "model.safetensors");
  fs::copy_file(valid / "model.safetensors", dir / "model.safetensors");
  CHECK(open_hf_model(dir.string()).config.spec.n_layer > 0);
  // config.json of 17 MiB (sparse): refused by size before a byte is read.
  fs::resize_file(dir / "config.json", std::uint64_t{17} << 20);
  CHECK_THAT(refusal([&] { (void)open_hf_model(dir.string()); }, ErrorCode::kInvalidModel),
             Contains("config.json: 17825792 bytes is larger than the 16 MiB"));
  // tokenizer.json of 300 MiB, tokenizer_config.json of 17 MiB (sparse).
  const std::string tok = s.sparse("tokenizer.json", std::uint64_t{300} << 20);
  CHECK_THAT(refusal([&] { (void)load_tokenizer(tok); }, ErrorCode::kInvalidModel),
             Contains("bytes is larger than the 256 MiB") && Contains("a tokenizer.json may have"));
  std::ofstream(tok, std::ios::trunc) << "{}";
  (void)s.sparse("tokenizer_config.json", std::uint64_t{17} << 20);
  CHECK_THAT(refusal([&] { (void)load_tokenizer(tok); }, ErrorCode::kInvalidModel),
             Contains("a tokenizer_config.json may have"));
  fs::remove(s.file("tokenizer_config.json"));
  REQUIRE(::mkfifo(s.file("tokenizer_config.json").c_str(), 0644) == 0);
  CHECK_THAT(refusal([&] { (void)load_tokenizer(tok); }, ErrorCode::kIo), Contains("tokenizer_config.json: is a FIFO"));
}
