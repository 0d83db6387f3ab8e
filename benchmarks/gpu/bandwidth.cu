// The ceilings bench_cuda compares the kernels with: device read bandwidth (a grid-stride sum of
// 16-byte loads over a buffer far larger than L2) and a BF16 GEMM through cuBLASLt.
#include "gpu/ceilings.hpp"
#include "gpu/event_timer.hpp"

#include "cuda_backend/cuda_check.hpp"

#include <cublasLt.h>

#include <stdexcept>
#include <string>

namespace sitsrt::bench {
namespace {

__global__ void read_kernel(const float4* __restrict__ data, std::size_t n, float* __restrict__ sink) {
  float acc = 0.0f;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float4 v = data[i];
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 123.456f) sink[0] = acc;  // keeps the loads; never true for the memset data
}

void check_lt(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLASLt: ") + what + " failed with status " + std::to_string(status));
  }
}

}  // namespace

double measure_read_bandwidth(std::size_t bytes, int repeats) {
  void* buffer = nullptr;
  float* sink = nullptr;
  SITSRT_CUDA_CHECK(cudaMalloc(&buffer, bytes));
  SITSRT_CUDA_CHECK(cudaMalloc(&sink, sizeof(float)));
  SITSRT_CUDA_CHECK(cudaMemset(buffer, 0x11, bytes));
  int sms = 0;
  SITSRT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const std::size_t n = bytes / sizeof(float4);
  read_kernel<<<sms * 8, 512>>>(static_cast<const float4*>(buffer), n, sink);
  const double seconds = seconds_per_call(
      repeats, [&](int) { read_kernel<<<sms * 8, 512>>>(static_cast<const float4*>(buffer), n, sink); });
  SITSRT_CUDA_CHECK(cudaFree(buffer));
  SITSRT_CUDA_CHECK(cudaFree(sink));
  return static_cast<double>(bytes) / seconds / 1e9;
}

double measure_bf16_gemm_tflops(int m, int n, int k, int repeats) {
  cublasLtHandle_t handle;
  check_lt(cublasLtCreate(&handle), "cublasLtCreate");
  void *a = nullptr, *b = nullptr, *c = nullptr, *workspace = nullptr;
  const std::size_t workspace_bytes = 64u << 20;
  SITSRT_CUDA_CHECK(cudaMalloc(&a, static_cast<std::size_t>(m) * k * 2));
  SITSRT_CUDA_CHECK(cudaMalloc(&b, static_cast<std::size_t>(k) * n * 2));
  SITSRT_CUDA_CHECK(cudaMalloc(&c, static_cast<std::size_t>(m) * n * 2));
  SITSRT_CUDA_CHECK(cudaMalloc(&workspace, workspace_bytes));
  SITSRT_CUDA_CHECK(cudaMemset(a, 0x11, static_cast<std::size_t>(m) * k * 2));
  SITSRT_CUDA_CHECK(cudaMemset(b, 0x11, static_cast<std::size_t>(k) * n * 2));
  cublasLtMatmulDesc_t desc;
  check_lt(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
  cublasLtMatrixLayout_t la, lb, lc;
  check_lt(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, m, k, m), "layout A");
  check_lt(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k), "layout B");
  check_lt(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, m, n, m), "layout C");
  cublasLtMatmulPreference_t preference;
  check_lt(cublasLtMatmulPreferenceCreate(&preference), "PreferenceCreate");
  check_lt(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                                sizeof(workspace_bytes)),
           "workspace preference");
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  check_lt(cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, lc, preference, 1, &heuristic, &found),
           "AlgoGetHeuristic");
  if (found == 0) throw std::runtime_error("cuBLASLt: no BF16 GEMM algorithm");
  const float alpha = 1.0f, beta = 0.0f;
  const auto run = [&] {
    check_lt(cublasLtMatmul(handle, desc, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &heuristic.algo, workspace,
                            workspace_bytes, nullptr),
             "Matmul");
  };
  run();
  const double seconds = seconds_per_call(repeats, [&](int) { run(); });
  cublasLtMatmulPreferenceDestroy(preference);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(handle);
  for (void* p : {a, b, c, workspace}) SITSRT_CUDA_CHECK(cudaFree(p));
  return 2.0 * m * n * static_cast<double>(k) / seconds / 1e12;
}

}  // namespace sitsrt::bench
