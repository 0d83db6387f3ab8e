// [cuda] test cases skip visibly (support/skip.hpp) where the CUDA runtime sees no device.
#pragma once

#include "cuda_backend/cuda_backend_factory.hpp"
#include "support/skip.hpp"

#include <cstdlib>
#include <string>

// The emulated builds of these tests (tests/cuda_emulator) always have their one device: none
// means the real runtime was linked instead of the emulator's, a failure.
#if defined(SITSRT_CUDA_EMULATION)
#define SITSRT_NO_CUDA_DEVICE(why) \
  FAIL("[cuda] the CUDA emulator's device is missing (the real runtime linked?): " << why)
#else
#define SITSRT_NO_CUDA_DEVICE(why) SITSRT_SKIP("[cuda] no CUDA device: " << why)
#endif
#define SITSRT_SKIP_WITHOUT_CUDA()                                  \
  do {                                                              \
    std::string sitsrt_cuda_why;                                    \
    if (::sitsrt::cuda::cuda_device_count(&sitsrt_cuda_why) == 0) { \
      SITSRT_NO_CUDA_DEVICE(sitsrt_cuda_why);                       \
    }                                                               \
  } while (false)

// What the emulator cannot run (models too large for the CPU to run thread by thread) skips
// there, with the reason; on a GPU it runs.
#if defined(SITSRT_CUDA_EMULATION)
#define SITSRT_SKIP_IN_CUDA_EMULATOR(reason) SITSRT_SKIP("[cuda] in the CPU emulator (tests/cuda_emulator): " << reason)
#else
#define SITSRT_SKIP_IN_CUDA_EMULATOR(reason) \
  do {                                       \
  } while (false)
#endif

namespace sitsrt::test {

// SITSRT_TEST_SMALL_SHAPES=1 (benchmarks/gpu/device_check.sh sets it for compute-sanitizer,
// which slows kernels ~100x): the kernel tests leave out their largest shapes and repeated
// variants, keeping every kernel, format and code path.
// Whether this build of the [cuda] tests runs on the CPU emulator (tests/cuda_emulator).
constexpr bool cuda_emulated() {
#if defined(SITSRT_CUDA_EMULATION)
  return true;
#else
  return false;
#endif
}

// The CUDA emulator runs every thread on the CPU, ~10^4x slower than the device: small shapes.
inline bool cuda_small_shapes() {
#if defined(SITSRT_CUDA_EMULATION)
  return true;
#endif
  const char* env = std::getenv("SITSRT_TEST_SMALL_SHAPES");
  return env != nullptr && std::string(env) == "1";
}

}  // namespace sitsrt::test
