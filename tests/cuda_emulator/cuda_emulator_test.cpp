// The CUDA emulator itself (tests/cuda_emulator), which runs the [cuda] tests on the CPU: its
// barriers and warp collectives give the device's results, and a kernel the device would run
// wrongly or refuse fails here too (a read of shared memory another thread has not written yet,
// a barrier not every thread can reach, a shuffle with an exited lane, a launch beyond the
// device's limits), so a passing emulated test means something.
#include "cuda_emulator/cuda_emulator.hpp"
#include "cuda_emulator/emulator_state.hpp"

#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

namespace {

// --- kernels ----------------------------------------------------------------------------------

// Sum of x per block: a warp sum by shuffles, warps' sums through shared memory.
__global__ void block_sum_kernel(const float* x, float* out) {
  __shared__ float warp_sums[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float v = x[blockIdx.x * blockDim.x + threadIdx.x];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) total += warp_sums[w];
    out[blockIdx.x] = total;
  }
}

// Reads its neighbour's slot of shared memory with (or without) a barrier between.
__global__ void neighbour_kernel(int* out, bool barrier) {
  __shared__ int slots[64];
  slots[threadIdx.x] = static_cast<int>(threadIdx.x) + 1;
  if (barrier) __syncthreads();
  out[threadIdx.x] = slots[(threadIdx.x + 1) % blockDim.x];
}

// Lanes 0-15 leave; the rest shuffle with the full mask.
__global__ void exited_lanes_kernel(int* out) {
  if (threadIdx.x < 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

// Warp 0 and lane 0 of warp 1 wait at a barrier while the rest of warp 1 waits at a shuffle
// with the full mask: neither can complete.
__global__ void divergent_kernel(int* out) {
  if (threadIdx.x <= 32) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1, 1);
  }
}

// A ballot, a down-shuffle at the segment's edge, and __syncthreads_or.
__global__ void collectives_kernel(unsigned* ballots, int* downs, int* any) {
  const unsigned lane = threadIdx.x % 32;
  ballots[threadIdx.x] = __ballot_sync(0xffffffffu, lane % 3 == 0);
  downs[threadIdx.x] = __shfl_down_sync(0xffffffffu, static_cast<int>(threadIdx.x), 2, 8);
  any[threadIdx.x] = __syncthreads_or(threadIdx.x == 37);
}

__global__ void dynamic_shared_kernel(float* out) {
  float* buf = static_cast<float*>(::sitsrt::cuda_emulator::dynamic_shared_memory());
  buf[threadIdx.x] = static_cast<float>(blockIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}

template <typename... Params, typename... Args>
cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared, Args... args) {
  static_cast<void>(cudaGetLastError());
  sitsrt::cuda_emulator::launch(reinterpret_cast<const void*>(kernel), grid, block, shared, nullptr,
                                [=] { kernel(args...); });
  return cudaGetLastError();
}

}  // namespace

TEST_CASE("cuda emulator: shuffles, shared memory and barriers give the device's results", "[cuda_emulator]") {
  std::vector<float> x(4 * 128);
  std::iota(x.begin(), x.end(), 1.0f);
  std::vector<float> sums(4, -1.0f);
  REQUIRE(launch(block_sum_kernel, 4, 128, 0, x.data(), sums.data()) == cudaSuccess);
  for (int b = 0; b < 4; ++b) {
    float expected = 0.0f;
    for (int i = 0; i < 128; ++i) expected += x[b * 128 + i];
    CHECK(sums[b] == expected);
  }

  std::vector<unsigned> ballots(64);
  std::vector<int> downs(64), any(64);
  REQUIRE(launch(collectives_kernel, 1, 64, 0, ballots.data(), downs.data(), any.data()) == cudaSuccess);
  unsigned expected_ballot = 0;
  for (unsigned lane = 0; lane < 32; lane += 3) expected_ballot |= 1u << lane;
  for (int t = 0; t < 64; ++t) {
    CHECK(ballots[t] == expected_ballot);
    CHECK(downs[t] == (t % 8 < 6 ? t + 2 : t));  // past its segment of 8, a lane keeps its own value
    CHECK(any[t] == 1);
  }

  std::vector<float> out(3 * 64);
  REQUIRE(launch(dynamic_shared_kernel, 3, 64, 64 * sizeof(float), out.data()) == cudaSuccess);
  for (int i = 0; i < 3 * 64; ++i) CHECK(out[i] == static_cast<float>(i / 64));
}

TEST_CASE("cuda emulator: a read of shared memory without the barrier sees what is not written yet",
          "[cuda_emulator]") {
  std::vector<int> out(64, 0);
  REQUIRE(launch(neighbour_kernel, 1, 64, 0, out.data(), true) == cudaSuccess);
  for (int t = 0; t < 64; ++t) CHECK(out[t] == (t + 1) % 64 + 1);
  // Threads run one after another to their barriers: without one, the first to run reads a
  // neighbour's slot before the neighbour writes it.
  REQUIRE(launch(neighbour_kernel, 1, 64, 0, out.data(), false) == cudaSuccess);
  int stale = 0;
  for (int t = 0; t < 64; ++t) stale += out[t] != (t + 1) % 64 + 1;
  CHECK(stale > 0);
}

TEST_CASE("cuda emulator: kernels and launches the device would not run fail with a message", "[cuda_emulator]") {
  using sitsrt::cuda_emulator::reset_device;
  std::vector<int> out(64, 0);
  std::vector<float> f(64);
  SECTION("a shuffle with exited lanes") {
    CHECK(launch(exited_lanes_kernel, 1, 32, 0, out.data()) == cudaErrorLaunchFailure);
    CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);  // sticky, as a lost context
  }
  SECTION("a barrier and a shuffle their threads cannot all reach") {
    CHECK(launch(divergent_kernel, 1, 64, 0, out.data()) == cudaErrorLaunchFailure);
  }
  SECTION("an empty grid") {
    CHECK(launch(dynamic_shared_kernel, 0, 64, 0, f.data()) == cudaErrorInvalidConfiguration);
  }
  SECTION("a block of more than 1024 threads") {
    CHECK(launch(dynamic_shared_kernel, 1, 2048, 0, f.data()) == cudaErrorInvalidConfiguration);
  }
  SECTION("dynamic shared memory past 48 KiB without the kernel's attribute, and past the opt-in limit") {
    CHECK(launch(dynamic_shared_kernel, 1, 64, 64 * 1024, f.data()) == cudaErrorInvalidValue);
    const void* kernel = reinterpret_cast<const void*>(&dynamic_shared_kernel);
    REQUIRE(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) == cudaSuccess);
    CHECK(launch(dynamic_shared_kernel, 1, 64, 64 * 1024, f.data()) == cudaSuccess);
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024) ==
          cudaErrorInvalidValue);
  }
  reset_device();
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("cuda emulator: stream capture records launches and copies; graph launches replay them", "[cuda_emulator]") {
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  float* device = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&device), 128 * sizeof(float)) == cudaSuccess);
  std::vector<float> host(128, 2.0f), sums(1, 0.0f);
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(device, host.data(), 128 * sizeof(float), cudaMemcpyHostToDevice, stream) == cudaSuccess);
  sitsrt::cuda_emulator::launch(reinterpret_cast<const void*>(&block_sum_kernel), 1, 128, 0, stream,
                                [d = device, s = sums.data()] { block_sum_kernel(d, s); });
  // A synchronous copy while capturing is refused (it would invalidate the capture on a device).
  void* scratch = nullptr;
  CHECK(cudaMalloc(&scratch, 16) == cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  CHECK(sums[0] == 0.0f);  // captured, not run
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
  CHECK(sums[0] == 256.0f);
  host.assign(128, 3.0f);  // the replay copies from the same host buffer at launch time
  REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
  CHECK(sums[0] == 384.0f);
  static_cast<void>(cudaGraphExecDestroy(exec));
  static_cast<void>(cudaGraphDestroy(graph));
  static_cast<void>(cudaFree(device));
  static_cast<void>(cudaStreamDestroy(stream));
  sitsrt::cuda_emulator::reset_device();
}
