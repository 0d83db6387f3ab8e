// CUDA kernel benchmark: the measured ceilings (read bandwidth, a cuBLASLt BF16 GEMM), then every
// decode matmul format on Llama-3-8B layer shapes at batch 1 and 16, in GB/s of weights and %
// of the measured read bandwidth (the floor of a decode matmul is its weight bytes / bandwidth),
// and the prefill path at 512 rows (what the backend runs from PrefillGemm::kMinRows rows: weights
// decoded to BF16 + a cuBLASLt GEMM) in TFLOP/s against the BF16 GEMM. Weights cycle over
// enough copies to exceed L2 so every call streams from HBM. Prints a markdown table (--json: one
// JSON object).
#include "core/dtype.hpp"
#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/cuda_context.hpp"
#include "cuda_backend/cuda_kernels.hpp"
#include "cuda_backend/device_allocator.hpp"
#include "cuda_backend/kernels/launch.hpp"
#include "cuda_backend/planar_weights.hpp"
#include "cuda_backend/prefill_gemm.hpp"
#include "gpu/ceilings.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

using namespace sitsrt;

namespace {

struct Shape {
  const char* name;
  std::int64_t n, k;  // outputs, inputs
};

constexpr Shape kShapes[] = {{"attn qkvo 4096x4096", 4096, 4096},
                             {"ffn up 14336x4096", 14336, 4096},
                             {"ffn down 4096x14336", 4096, 14336},
                             {"lm head 128256x4096", 128256, 4096}};
constexpr DType kFormats[] = {DType::kFP8_E4M3, DType::kQ4_G128, DType::kQ8_0, DType::kQ4_0, DType::kBF16, DType::kF16};

// Seconds per call of the matmul at m rows, weights cycling over copies totalling >= 512 MiB.
// planar: the FP8 / INT4 g128 kernels over the layout the backend uploads (planar_weights.hpp);
// otherwise the stored-block kernels (matmul.cu).
// Rows from PrefillGemm::kMinRows take the BF16 tensor-core GEMM, as in the backend.
double time_matmul(DType format, const Shape& s, std::int64_t m, int repeats, bool planar, cuda::PrefillGemm& gemm) {
  const std::size_t stride = row_bytes(format, s.k);
  const std::size_t bytes = stride * static_cast<std::size_t>(s.n);
  const std::size_t copies = std::max<std::size_t>(1, ((512u << 20) + bytes - 1) / bytes);
  std::vector<void*> weights(copies);
  for (void*& w : weights) {
    SITSRT_CUDA_CHECK(cudaMalloc(&w, bytes));
    SITSRT_CUDA_CHECK(cudaMemset(w, 0x11, bytes));  // finite values in every format
  }
  void *x = nullptr, *y = nullptr;
  SITSRT_CUDA_CHECK(cudaMalloc(&x, static_cast<std::size_t>(m * s.k) * 4));
  SITSRT_CUDA_CHECK(cudaMalloc(&y, static_cast<std::size_t>(m * s.n) * 4));
  SITSRT_CUDA_CHECK(cudaMemset(x, 0x11, static_cast<std::size_t>(m * s.k) * 4));
  const auto call = [&](std::size_t i) {
    const auto* w = static_cast<const std::uint8_t*>(weights[i % copies]);
    if (m >= cuda::PrefillGemm::kMinRows) {
      const cuda::DeviceWeight dw{w, format, s.n, s.k, static_cast<std::int64_t>(stride), planar, {}};
      if (!gemm.run(dw, static_cast<const float*>(x), s.k, m, static_cast<float*>(y), s.n)) {
        throw std::runtime_error("prefill GEMM unavailable: " + gemm.unavailable_reason());
      }
    } else if (planar) {
      cuda::launch_planar_matmul(format, w, s.n, s.k, static_cast<const float*>(x), s.k, m, static_cast<float*>(y), s.n,
                                 nullptr);
    } else {
      cuda::launch_matmul(format, w, static_cast<std::int64_t>(stride), s.n, s.k, static_cast<const float*>(x), s.k, m,
                          static_cast<float*>(y), s.n, nullptr);
    }
  };
  for (std::size_t i = 0; i < copies; ++i) call(i);
  SITSRT_CUDA_CHECK(cudaGetLastError());
  cudaEvent_t start, stop;
  SITSRT_CUDA_CHECK(cudaEventCreate(&start));
  SITSRT_CUDA_CHECK(cudaEventCreate(&stop));
  SITSRT_CUDA_CHECK(cudaEventRecord(start));
  for (int i = 0; i < repeats; ++i) call(static_cast<std::size_t>(i));
  SITSRT_CUDA_CHECK(cudaEventRecord(stop));
  SITSRT_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  SITSRT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  for (void* w : weights) SITSRT_CUDA_CHECK(cudaFree(w));
  SITSRT_CUDA_CHECK(cudaFree(x));
  SITSRT_CUDA_CHECK(cudaFree(y));
  return ms * 1e-3 / repeats;
}

}  // namespace

int main(int argc, char** argv) {
  const bool json = argc > 1 && std::strcmp(argv[1], "--json") == 0;
  try {
    cudaDeviceProp props{};
    SITSRT_CUDA_CHECK(cudaGetDeviceProperties(&props, 0));
    const double bandwidth = bench::measure_read_bandwidth(std::size_t{4} << 30, 10);
    const double bf16_tflops = bench::measure_bf16_gemm_tflops(8192, 8192, 8192, 10);
    cuda::CudaContext context(0);
    cuda::DeviceAllocator allocator(context, 0);
    cuda::PrefillGemm gemm(context, allocator);
    std::string rows;
    if (!json) {
      fmt::print("device: {} (sm_{}{}), {} SMs\n", props.name, props.major, props.minor, props.multiProcessorCount);
      fmt::print("ceilings: read bandwidth {:.0f} GB/s; cuBLASLt BF16 GEMM 8192^3 {:.0f} TFLOP/s\n\n", bandwidth,
                 bf16_tflops);
      fmt::print("| format | layout | shape | rows | us/call | weight GB/s | % of read bandwidth | TFLOP/s |\n");
      fmt::print("|---|---|---|---|---|---|---|---|\n");
    }
    for (const DType format : kFormats) {
      // The backend's layout first; FP8 / INT4 g128 also in stored blocks at one row, the gain.
      const bool planar_format = cuda::planar_supports(format, 4096);
      for (const bool planar : planar_format ? std::vector<bool>{true, false} : std::vector<bool>{false}) {
        for (const Shape& s : kShapes) {
          for (const std::int64_t m : {1, 16, 512}) {
            if (m == 512 && s.n > 14336) continue;  // the prefill shape: the layer matmuls only
            if (planar_format && !planar && m != 1) continue;
            const double seconds = time_matmul(format, s, m, m == 512 ? 5 : 50, planar, gemm);
            const char* layout = planar ? "planar" : "blocks";
            const double weight_bytes = static_cast<double>(row_bytes(format, s.k)) * static_cast<double>(s.n);
            const double gbs = weight_bytes / seconds / 1e9;
            const double tflops = 2.0 * static_cast<double>(m * s.n * s.k) / seconds / 1e12;
            if (json) {
              rows += fmt::format(
                  "{}{{\"format\":\"{}\",\"layout\":\"{}\",\"shape\":\"{}\",\"rows\":{},\"us\":{:.2f},"
                  "\"gbs\":{:.1f},\"pct_bandwidth\":{:.1f},\"tflops\":{:.3f}}}",
                  rows.empty() ? "" : ",", name(format), layout, s.name, m, seconds * 1e6, gbs, 100.0 * gbs / bandwidth,
                  tflops);
            } else {
              fmt::print("| {} | {} | {} | {} | {:.1f} | {:.0f} | {:.1f}% | {:.2f} |\n", name(format), layout, s.name,
                         m, seconds * 1e6, gbs, 100.0 * gbs / bandwidth, tflops);
            }
          }
        }
      }
    }
    if (json) {
      fmt::print("{{\"device\":\"{}\",\"read_gbs\":{:.1f},\"bf16_gemm_tflops\":{:.1f},\"kernels\":[{}]}}\n", props.name,
                 bandwidth, bf16_tflops, rows);
    } else {
      fmt::print("\nfloor: a decode matmul takes at least weight bytes / {:.0f} GB/s\n", bandwidth);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_cuda: {}\n", e.what());
    return 1;
  }
  return 0;
}
