// The committed malformed-model corpus (tests/data/malformed, written by make_corpus.py): every
// bad GGUF file or safetensors checkpoint is refused with its expected error code and a message
// naming the field at fault, and loading allocates at most a small multiple of the file size
// before refusing (a declared count or length is never trusted for an allocation).
#include "formats/safetensors.hpp"

#include <sitsrt/engine.hpp>
#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>
#include <sstream>

// Counts live heap bytes of this test process (each unit test is its own executable) so a case
// can bound what a failed load allocated. malloc_usable_size keeps delete exact without a header.
#include <malloc.h>

namespace {
std::atomic<std::size_t> g_live{0};
std::atomic<std::size_t> g_peak{0};

void note_alloc(void* p) noexcept {
  if (p == nullptr) return;
  const std::size_t now = g_live.fetch_add(malloc_usable_size(p)) + malloc_usable_size(p);
  std::size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}
void* counted_alloc(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  note_alloc(p);
  return p;
}
void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  g_live.fetch_sub(malloc_usable_size(p));
  std::free(p);
}
}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n); }
void* operator new[](std::size_t n) { return counted_alloc(n); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }
// The nothrow forms too, so every plain new pairs with these deletes (sanitizers check pairing).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  void* p = std::malloc(n == 0 ? 1 : n);
  note_alloc(p);
  return p;
}
void* operator new[](std::size_t n, const std::nothrow_t& tag) noexcept { return operator new(n, tag); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }

namespace {

namespace fs = std::filesystem;
const fs::path kCorpus = fs::path(SITSRT_SOURCE_DIR) / "tests" / "data" / "malformed";

struct Case {
  std::string file, loader, code, message;
};

std::vector<Case> read_cases() {
  std::ifstream in(kCorpus / "expected.tsv");
  REQUIRE(in);
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Case c;
    std::getline(fields, c.file, '\t');
    std::getline(fields, c.loader, '\t');
    std::getline(fields, c.code, '\t');
    std::getline(fields, c.message, '\t');
    cases.push_back(c);
  }
  return cases;
}

std::string code_name(sitsrt::ErrorCode code) {
  switch (code) {
    case sitsrt::ErrorCode::kInvalidModel: return "invalid_model";
    case sitsrt::ErrorCode::kUnsupported: return "unsupported";
    case sitsrt::ErrorCode::kIo: return "io";
    case sitsrt::ErrorCode::kInvalidArgument: return "invalid_argument";
    case sitsrt::ErrorCode::kOutOfMemory: return "out_of_memory";
    default: return sitsrt::to_string(code);
  }
}

std::uintmax_t case_bytes(const fs::path& path) {
  if (!fs::is_directory(path)) return fs::file_size(path);
  std::uintmax_t total = 0;
  for (const auto& entry : fs::directory_iterator(path)) total += entry.file_size();
  return total;
}

void load(const Case& c) {
  const std::string path = (kCorpus / c.file).string();
  if (c.loader == "engine") {
    sitsrt::EngineOptions options;
    options.model_path = path;
    options.threads = 1;
    options.context_length = 64;
    sitsrt::Engine engine(std::move(options));
  } else {
    REQUIRE(c.loader == "safetensors");
    (void)sitsrt::safetensors::Checkpoint::open(path);
  }
}

}  // namespace

TEST_CASE("every file of the malformed corpus fails with its expected error", "[malformed][corpus]") {
  const auto cases = read_cases();
  REQUIRE(cases.size() >= 30);
  int refused = 0;
  double worst_ratio = 0, worst_bytes = 0;
  std::string worst;
  for (const Case& c : cases) {
    INFO("case " << c.file << " (expected " << c.code << ": '" << c.message << "')");
    const std::uintmax_t bytes = case_bytes(kCorpus / c.file);
    const std::size_t baseline = g_live.load();
    g_peak.store(baseline);
    if (c.code == "none") {
      CHECK_NOTHROW(load(c));
      continue;
    }
    try {
      load(c);
      FAIL("loaded without an error");
    } catch (const sitsrt::Error& e) {
      INFO("got " << code_name(e.code()) << ": " << e.what());
      CHECK(code_name(e.code()) == c.code);
      CHECK(std::string(e.what()).find(c.message) != std::string::npos);
      // The message starts with the path, so a user knows which file (of several shards) is bad.
      CHECK(std::string(e.what()).find(c.file) != std::string::npos);
      ++refused;
    }
    const double allocated = static_cast<double>(g_peak.load() - baseline);
    const double ratio = allocated / static_cast<double>(std::max<std::uintmax_t>(bytes, 1));
    if (bytes >= 4096 && ratio > worst_ratio) {  // tiny files only measure fixed overhead
      worst_ratio = ratio;
      worst = c.file;
    }
    worst_bytes = std::max(worst_bytes, allocated);
    // A failed load may allocate what the file's real contents need (metadata strings, the
    // tokenizer's tables) plus fixed overhead, never what a hostile count declares.
    CHECK(allocated <= 16.0 * static_cast<double>(bytes) + (1 << 20));
  }
  WARN(refused << " malformed cases refused; largest allocation before refusing: " << worst_bytes
                << " bytes; largest ratio (files >= 4 KiB): " << worst_ratio << " x the file size (" << worst
                << ")");
}
