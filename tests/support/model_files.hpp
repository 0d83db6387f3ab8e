// Model files for tests: small random-weight models written on demand into a per-process
// temporary folder, and the real shared models (cases that need them skip when they are absent).
#pragma once

#include "formats/gguf.hpp"
#include "model/random_model.hpp"
#include "support/skip.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <initializer_list>
#include <string>
#include <unistd.h>

namespace sitsrt::test {

inline std::filesystem::path temp_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / fmt::format("sitsrt-test-{}", ::getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// A small llama of the given weight type (cached per options within the process).
inline std::string random_model(const RandomModelOptions& options, const std::string& tag) {
  const auto path = temp_dir() / fmt::format("{}-{}.gguf", tag, name(options.type));
  if (!std::filesystem::exists(path)) write_random_model(options, path.string());
  return path.string();
}

// EngineOptions::cpu_isa for tests that hold prefill to float rounding: the best level whose
// prefill is float (at "amx", the default on CPUs with AMX, prefill rounds its matmul operands to
// bf16; see cpu/matmul/amx_prefill.hpp). Clamped to the CPU like any level. Prefill of quantized
// weights is float only with EngineOptions::int8_activations = false (else the int8 GEMM).
inline constexpr const char* kFloatPrefillIsa = "avx512vnni";

inline RandomModelOptions tiny_options(DType type) {
  RandomModelOptions o;
  o.dim = 64;
  o.layers = 2;
  o.heads = 4;
  o.kv_heads = 2;
  o.ffn = 96;
  o.vocab = 300;
  o.context = 256;
  o.type = type;
  o.seed = 99;
  o.threads = 1;
  return o;
}

// The bytes of every tensor in a GGUF file, summed from its tensor table (the format reader, not
// the engine): an expectation independent of what the engine reports.
inline std::uint64_t file_tensor_bytes(const std::string& path) {
  const gguf::File file = gguf::File::open(path);  // alive through the loop: tensors() points into it
  std::uint64_t bytes = 0;
  for (const gguf::TensorInfo& t : file.tensors()) bytes += t.bytes;
  return bytes;
}

// The shared folder: $SITSRT_SHARED_DIR when set (a test bundle run on another machine,
// benchmarks/gpu/device_check.sh), else the one beside the checkout this build was made from.
inline std::string shared_path(const std::string& relative) {
  const char* env = std::getenv("SITSRT_SHARED_DIR");
  return std::string(env != nullptr && *env != '\0' ? env : SITSRT_SHARED_DIR) + "/" + relative;
}

// Why a case needing these shared files cannot run: the first absent one; empty when all exist.
inline std::string missing_shared(std::initializer_list<std::string> relative) {
  for (const std::string& r : relative) {
    if (!std::filesystem::exists(shared_path(r))) {
      return shared_path(r) + " is absent (the shared test models are not available here)";
    }
  }
  return "";
}

// Skips the running case (a [gated] one, support/skip.hpp) unless every listed shared file exists.
#define SITSRT_REQUIRE_SHARED(...)                                                     \
  do {                                                                                 \
    const std::string sitsrt_missing = ::sitsrt::test::missing_shared({__VA_ARGS__}); \
    if (!sitsrt_missing.empty()) SITSRT_SKIP(sitsrt_missing);                          \
  } while (false)

}  // namespace sitsrt::test
