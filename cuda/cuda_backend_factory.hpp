// How the backend registry (runtime/backend_registry.cpp) makes the CUDA backend without seeing
// the CUDA runtime's headers: this header includes none.
#pragma once

#include "backend/backend.hpp"

#include <cstdint>
#include <memory>

namespace sitsrt::cuda {

struct CudaBackendOptions {
  int device = 0;
  std::uint64_t budget_bytes = 0;  // weights + buffers; 0: 95% of the device's free memory
  bool graphs = true;              // replay decode steps as CUDA graphs (decode_graphs.hpp)
  bool batch_invariant = false;    // rows independent of their step (deterministic serving)
  bool decode_fusion = true;       // decode fusions (backend/decode_fusion.hpp) as one launch each
};

// Throws kUnsupported when the device is not there (no driver, no GPU, index out of range).
[[nodiscard]] std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options);

// CUDA devices usable now; 0 (with `why`) when none.
[[nodiscard]] int cuda_device_count(std::string* why = nullptr) noexcept;

}  // namespace sitsrt::cuda
