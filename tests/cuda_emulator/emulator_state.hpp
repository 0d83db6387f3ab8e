// What the emulator's runtime (runtime_api.cpp) and its device threads (device_threads.cpp)
// share: the error state, stream capture, and the limits a launch is checked against.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <string>

namespace sitsrt::cuda_emulator {

// The emulated device: an H100's limits (sm_90, 132 multiprocessors).
inline constexpr int kMultiprocessors = 132;
inline constexpr std::size_t kDefaultSharedBytes = 48 * 1024;  // without the opt-in attribute
inline constexpr std::size_t kMaxSharedBytesOptin = 227 * 1024;

// Records `status` (cudaGetLastError returns and clears it); a sticky one (a kernel that failed)
// is returned by every later call, as a device whose context is lost. Prints `what`.
void set_error(cudaError_t status, const std::string& what, bool sticky = false);
cudaError_t sticky_error() noexcept;

// Where `stream` is being captured, `operation` is recorded into its graph (true); otherwise
// the caller runs it now (false).
bool capture(cudaStream_t stream, const std::function<void()>& operation);

// The dynamic shared memory a kernel may take (cudaFuncSetAttribute raises it above 48 KiB).
std::size_t max_dynamic_shared(const void* kernel);

// Runs the grid now (the launch checked and not captured).
void run_grid(dim3 grid, dim3 block, std::size_t shared, const std::function<void()>& body);

}  // namespace sitsrt::cuda_emulator
