// The backends this build can make, by name. The engine asks here for a Backend and never names
// a concrete one; each registered backend describes itself through Backend::info().
#pragma once

#include "backend/backend.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace sitsrt {

// Everything any backend may be configured with; each takes what applies to it.
struct BackendOptions {
  std::string device = "cpu";      // NAME or NAME:INDEX ("cpu", "cpu:0"; "cuda:1" once built in)
  int threads = 0;                 // host worker threads (<= 0: all)
  std::string cpu_isa = "auto";    // CPU instruction-set level
  std::uint64_t budget_bytes = 0;  // weights + buffers; 0: unlimited
  bool int8_activations = false;
  bool resident_weights = false;
  bool decode_fusion = true;
  bool device_graphs = true;  // GPU backends: decode steps replayed as graphs
  // Each row's results independent of the other rows of its step (deterministic serving): a
  // one-row step runs the kernels of many-row steps, never a one-row special case.
  bool batch_invariant = false;
};

struct RegisteredBackend {
  std::string_view name;
  std::string_view summary;
};

// In registration order; the first is the default.
[[nodiscard]] std::span<const RegisteredBackend> registered_backends() noexcept;

// Throws kInvalidArgument for a malformed device string, kUnsupported for a backend this build
// does not have (naming the registered ones) or a device index it does not offer.
[[nodiscard]] std::unique_ptr<Backend> make_backend(const BackendOptions& options);

}  // namespace sitsrt
