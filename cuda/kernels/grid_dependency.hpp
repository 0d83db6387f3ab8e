// Programmatic dependent launch (Hopper, sm_90 and later): the backend's kernels are launched with
// programmatic stream serialization, so a kernel's blocks are scheduled while its predecessor's
// last ones still run, instead of after it drains and the launch goes through (a decode step is
// ~10 launches a layer, each otherwise leaving the GPU idle for that latency). Every kernel waits
// for its predecessors' completion and memory (griddepcontrol.wait) before it reads or writes
// anything, so the results are those of serial launches; then it lets the next grid launch.
// Off (plain launches) on older devices, for kernels built without the wait, and with
// SITSRT_CUDA_PDL=0 in the environment (to measure what it saves).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

namespace sitsrt::cuda {

// The first statement of every kernel launched through launch_kernel.
__device__ __forceinline__ void begin_dependent_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether launches on the current device may be programmatic: a device of compute capability 9+
// running code compiled from this build's sm_90+ PTX (`kernel`'s ptxVersion: where the driver
// compiles an older PTX just in time, e.g. compute_89 on a newer GPU, the wait is not in it),
// and not switched off. Every kernel of the backend is built for the same architectures, so the
// first kernel launched on a device decides for all.
inline std::atomic<int>& programmatic_launch_state(int device) noexcept {
  constexpr int kDevices = 64;
  static std::atomic<int> decided[kDevices] = {};  // 0: not yet, 1: on, 2: off
  return decided[device];
}

inline bool programmatic_launch_enabled(const void* kernel, int* device_out) noexcept {
  static const bool allowed = [] {
    const char* setting = std::getenv("SITSRT_CUDA_PDL");
    return setting == nullptr || std::strcmp(setting, "0") != 0;
  }();
  int device = 0;
  if (!allowed || cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return false;
  *device_out = device;
  std::atomic<int>& decided = programmatic_launch_state(device);
  int state = decided.load(std::memory_order_relaxed);
  if (state == 0) {
    int major = 0;
    cudaFuncAttributes attributes{};
    const bool capable = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                         major >= 9 && cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess &&
                         attributes.ptxVersion >= 90;
    state = capable ? 1 : 2;
    decided.store(state, std::memory_order_relaxed);
  }
  return state == 1;
}

// kernel<<<grid, block, shared, stream>>>(args...), programmatic where enabled. A programmatic
// launch the runtime refuses is made again plainly, and the device's launches stay plain from
// then on; other launch errors are left for the caller's cudaGetLastError check, as with <<<>>>.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared, cudaStream_t stream,
                   Args&&... args) {
#if defined(SITSRT_CUDA_EMULATION)  // the CPU emulator of the tests (tests/cuda_emulator): no PDL there
  cuda_emulator::launch(reinterpret_cast<const void*>(kernel), grid, block, shared, stream,
                        [kernel, params = std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)] {
                          std::apply(kernel, params);
                        });
#else
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  int device = 0;
  if (programmatic_launch_enabled(reinterpret_cast<const void*>(kernel), &device)) {
    config.attrs = &attribute;
    config.numAttrs = 1;
    if (cudaLaunchKernelEx(&config, kernel, args...) == cudaSuccess) return;
    static_cast<void>(cudaGetLastError());  // this error is answered by the plain launch below
    programmatic_launch_state(device).store(2, std::memory_order_relaxed);
    config.attrs = nullptr;
    config.numAttrs = 0;
  }
  static_cast<void>(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
#endif
}

}  // namespace sitsrt::cuda
