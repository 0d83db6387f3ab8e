// [cuda] test cases skip visibly (support/skip.hpp) where the CUDA runtime sees no device.
#pragma once

#include "cuda_backend/cuda_backend_factory.hpp"
#include "support/skip.hpp"

#include <cstdlib>
#include <string>

#define SITSRT_SKIP_WITHOUT_CUDA()                                  \
  do {                                                              \
    std::string sitsrt_cuda_why;                                    \
    if (::sitsrt::cuda::cuda_device_count(&sitsrt_cuda_why) == 0) { \
      SITSRT_SKIP("[cuda] no CUDA device: " << sitsrt_cuda_why);    \
    }                                                               \
  } while (false)

namespace sitsrt::test {

// SITSRT_TEST_SMALL_SHAPES=1 (benchmarks/gpu/device_check.sh sets it for compute-sanitizer,
// which slows kernels ~100x): the kernel tests leave out their largest shapes and repeated
// variants, keeping every kernel, format and code path.
inline bool cuda_small_shapes() {
  const char* env = std::getenv("SITSRT_TEST_SMALL_SHAPES");
  return env != nullptr && std::string(env) == "1";
}

}  // namespace sitsrt::test
