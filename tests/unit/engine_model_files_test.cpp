// Which model an audit record names when the model's files change under the engine: the hash is
// of the files as they were loaded (pinned before the load), a file rewritten during the load
// fails the load, a path renamed over after the load changes nothing, and mmapped weights whose
// file changed are refused before a request reads them (a truncation during a request is SIGBUS:
// documented, and shown here in a child process).
#include "audit/hash.hpp"
#include "audit/log_reader.hpp"
#include "formats/gguf.hpp"
#include "formats/gguf_writer.hpp"
#include "support/audit_logs.hpp"
#include "support/skip.hpp"

#include <sitsrt/audit.hpp>
#include <sitsrt/engine.hpp>
#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <cstring>
#include <limits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace sitsrt;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// Two different small models (other seeds, so other bytes and other tokens).
std::string model_a() { return test::random_model(test::tiny_options(DType::kQ8_0), "pins-a"); }
std::string model_b() {
  RandomModelOptions o = test::tiny_options(DType::kQ8_0);
  o.seed = 4321;
  return test::random_model(o, "pins-b");
}

// A copy dated an hour back, so a rewrite in the test changes its modification time even on a
// file system whose clock ticks in milliseconds.
std::string scratch_copy(const std::string& source, const std::string& name) {
  const fs::path path = test::temp_dir() / name;
  fs::copy_file(source, path, fs::copy_options::overwrite_existing);
  fs::last_write_time(path, fs::file_time_type::clock::now() - std::chrono::hours(1));
  return path.string();
}

// Overwrites the file in place (same inode) with other bytes of the same size.
void rewrite_in_place(const std::string& path, const std::string& with) {
  std::string bytes = test::read_file(with);
  bytes.resize(fs::file_size(path));
  std::ofstream(path, std::ios::binary | std::ios::in | std::ios::out) << bytes;
}

// Generates 4 tokens with a JSONL audit log; returns the recorded model hash.
std::string audited_hash(const Engine& engine) {
  const std::string log = test::fresh_log_path("pins");
  GenerationConfig c;
  c.max_new_tokens = 4;
  c.seed = 1;
  c.audit.sinks.push_back(make_jsonl_audit_sink({log}));
  (void)engine.generate("Once", c);
  c.audit.sinks.clear();
  return audit::read_recorded_requests({log}).at(0).record.model_sha256;
}

// AddressSanitizer reserves terabytes of address space and turns SIGBUS into its own report, so
// the address-space limit and the SIGBUS cases cannot run under it.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif

template <typename Fn>
std::string io_error(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kIo);
    return e.what();
  }
  FAIL("expected sitsrt::Error(kIo)");
  return {};
}

}  // namespace

TEST_CASE("a model path renamed over after the load: the record names the weights in use", "[engine][audit]") {
  const std::string path = scratch_copy(model_a(), "pins-renamed.gguf");
  const std::string hash_a = audit::sha256_file_hex(path);
  EngineOptions o;
  o.model_path = path;
  const Engine engine(o);
  fs::rename(scratch_copy(model_b(), "pins-other.gguf"), path);  // the name now gives model B
  CHECK(audit::sha256_file_hex(path) != hash_a);
  CHECK(audited_hash(engine) == hash_a);  // before: B's hash beside A's tokens
  CHECK(engine.model_sha256() == hash_a);
}

TEST_CASE("a model file rewritten while it loads fails the load", "[engine][audit]") {
  const std::string path = scratch_copy(model_a(), "pins-rewritten.gguf");
  EngineOptions o;
  o.model_path = path;
  bool rewritten = false;
  o.on_progress = [&](std::string_view stage, double) {
    if (stage != "load" || rewritten) return;
    rewritten = true;
    rewrite_in_place(path, model_b());  // while the resident copy is being made
  };
  const std::string message = io_error([&] { (void)Engine(o); });
  CHECK(rewritten);
  CHECK_THAT(message, Contains(path) && Contains("the model file changed while it was loaded") &&
                          Contains("rewritten"));
}

TEST_CASE("a Hugging Face directory whose config.json is replaced while it loads fails the load",
          "[engine][audit]") {
  const fs::path dir = test::temp_dir() / "pins-hf";
  fs::remove_all(dir);
  fs::copy(fs::path(SITSRT_SOURCE_DIR) / "tests/data/malformed/hf_valid_llama", dir);
  fs::last_write_time(dir / "config.json", fs::file_time_type::clock::now() - std::chrono::hours(1));
  EngineOptions o;
  o.model_path = dir.string();
  bool replaced = false;
  o.on_progress = [&](std::string_view stage, double) {
    if (stage != "load" || replaced) return;
    replaced = true;
    const fs::path other = dir / "config.json.new";
    fs::copy_file(dir / "config.json", other);
    fs::rename(other, dir / "config.json");  // same bytes, another file
  };
  const std::string message = io_error([&] { (void)Engine(o); });
  CHECK(replaced);
  CHECK_THAT(message, Contains("config.json: the model file changed while it was loaded: replaced by another file"));
  // Unchanged, the directory hash is the digest of its files, read from the pinned descriptors.
  o.on_progress = nullptr;
  const Engine engine(o);
  const std::string expected = audit::sha256_hex(
      fmt::format("config.json {}\nmodel.safetensors {}\n", audit::sha256_file_hex((dir / "config.json").string()),
                  audit::sha256_file_hex((dir / "model.safetensors").string())));
  CHECK(engine.model_sha256() == expected);
}

TEST_CASE("a model file changed after the load: mmapped weights are refused, the hash is refused",
          "[engine][audit]") {
  for (const bool mmap : {true, false}) {
    const std::string path = scratch_copy(model_a(), mmap ? "pins-mmap.gguf" : "pins-resident.gguf");
    EngineOptions o;
    o.model_path = path;
    o.mmap_weights = mmap;
    const Engine engine(o);
    GenerationConfig c;
    c.max_new_tokens = 2;
    c.seed = 3;
    const std::string before = engine.generate("Once", c).text;
    fs::resize_file(path, fs::file_size(path) / 2);
    if (mmap) {  // the mapping lost half its pages: refused before any is read (not SIGBUS)
      CHECK_THAT(io_error([&] { (void)engine.generate("Once", c); }),
                 Contains(path) && Contains("changed after it was loaded") && Contains("size changed"));
      CHECK_THAT(io_error([&] { (void)engine.logits(std::vector<std::int32_t>{1, 2}); }), Contains("size changed"));
    } else {  // resident weights were copied: requests run as before
      CHECK(engine.generate("Once", c).text == before);
    }
    // Either way the hash can no longer name what was loaded.
    CHECK_THAT(io_error([&] { (void)engine.model_sha256(); }), Contains("changed after it was loaded"));
  }
}

TEST_CASE("mmapped weights truncated during a request end the process with SIGBUS (documented)",
          "[engine][audit][gated]") {
  if (kAddressSanitizer) SITSRT_SKIP("under AddressSanitizer (it handles SIGBUS itself)");
  const std::string path = scratch_copy(model_a(), "pins-sigbus.gguf");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    try {
      EngineOptions o;
      o.model_path = path;
      o.mmap_weights = true;
      o.threads = 1;
      const Engine engine(o);
      GenerationConfig c;
      c.max_new_tokens = 8;
      c.stop_at_end_of_sequence = false;
      (void)engine.generate("Once", c, [&](const TokenEvent&) {
        ::truncate(path.c_str(), 0);  // the next step reads weight pages that no longer exist
        return true;
      });
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGBUS);
}

TEST_CASE("an allocation that fails while loading is kOutOfMemory naming the stage, not std::bad_alloc",
          "[engine][memory][gated]") {
  if (kAddressSanitizer) SITSRT_SKIP("under AddressSanitizer (an address-space limit breaks its shadow memory)");
  RandomModelOptions big_vocab = test::tiny_options(DType::kQ8_0);
  big_vocab.dim = 32;
  big_vocab.ffn = 32;
  big_vocab.heads = 2;
  big_vocab.kv_heads = 1;
  big_vocab.layers = 1;
  big_vocab.vocab = 300000;  // 300k metadata strings: the reader's vectors, not an AlignedBuffer
  const std::string path = test::random_model(big_vocab, "pins-vocab");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Address space: what this process uses now plus 40 MiB: the 27 MB mapping fits, the
    // vocabulary's strings and tables do not.
    std::ifstream statm("/proc/self/statm");
    std::uint64_t pages = 0;
    statm >> pages;
    const rlim_t bytes = pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) + (std::uint64_t{40} << 20);
    const rlimit limit{bytes, bytes};
    ::setrlimit(RLIMIT_AS, &limit);
    int code = 1;
    try {
      EngineOptions o;
      o.model_path = path;
      o.threads = 1;
      (void)Engine(o);
    } catch (const Error& e) {
      const std::string what = e.what();
      code = e.code() == ErrorCode::kOutOfMemory && what.starts_with(path + ": out of memory while ") ? 0 : 2;
      if (code != 0) std::fprintf(stderr, "unexpected: %s\n", e.what());
    } catch (const std::bad_alloc&) {
      code = 3;
    } catch (...) {
      code = 4;
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("NaN weights: the error names the file and the tensor, not just 'no finite logit'", "[engine]") {
  const gguf::File source = gguf::File::open(test::random_model(test::tiny_options(DType::kF32), "pins-f32"));
  gguf::Writer w(source.alignment());
  for (const auto& kv : source.metadata()) w.set(kv.key, kv.value);
  for (const auto& t : source.tensors()) {
    std::vector<std::byte> bytes(source.tensor_data(t).begin(), source.tensor_data(t).end());
    if (t.name == "blk.1.ffn_down.weight") {  // row 3, column 5
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::memcpy(bytes.data() + (3 * static_cast<std::size_t>(t.dims[0]) + 5) * sizeof(float), &nan, sizeof nan);
    }
    w.add_tensor(t.name, t.dims, t.type, [bytes](std::span<std::byte> out) {
      std::memcpy(out.data(), bytes.data(), out.size());
    });
  }
  const std::string path = (test::temp_dir() / "pins-nan.gguf").string();
  w.write(path);
  for (const bool mmap : {false, true}) {
    EngineOptions o;
    o.model_path = path;
    o.mmap_weights = mmap;
    const Engine engine(o);
    GenerationConfig c;
    c.max_new_tokens = 2;
    try {
      (void)engine.generate("Once", c);
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidModel);
      CHECK_THAT(e.what(), Contains(path + ": the model produced no finite logit at step 0") &&
                               Contains("tensor 'blk.1.ffn_down.weight' holds NaN (row 3, column 5)"));
    }
  }
}
