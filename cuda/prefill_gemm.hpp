// Matmuls of many rows (prompt chunks) on the tensor cores: the weights decoded to BF16 a chunk of
// rows at a time, the activations rounded to BF16, and a cuBLASLt GEMM with float accumulation
// and float output. Roughly the precision of BF16 inputs (each product within 2^-8 of its exact
// value), where the decode kernels (planar_matmul.cu, matmul.cu) are exact products summed in
// float; decode steps below kMinRows rows keep those. Algorithms are chosen by cuBLASLt's
// heuristic once per shape and kept. Unavailable (returns false) when libcublasLt cannot be
// loaded or its buffers do not fit the budget: callers then run the decode kernels.
#pragma once

#include "cuda_backend/cublaslt_library.hpp"
#include "cuda_backend/cuda_context.hpp"
#include "cuda_backend/device_allocator.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

namespace sitsrt::cuda {

struct DeviceWeight;

class PrefillGemm {
 public:
  // Matmuls with at least this many rows of x take the GEMM.
  static constexpr std::int64_t kMinRows = 48;

  PrefillGemm(const CudaContext& context, DeviceAllocator& allocator);
  ~PrefillGemm();
  PrefillGemm(const PrefillGemm&) = delete;
  PrefillGemm& operator=(const PrefillGemm&) = delete;

  // y[m x n] = x[m x k] * W^T queued on the stream; false (nothing queued) when unavailable.
  // Loads the library and allocates its buffers on first use: not to be called first inside a
  // stream capture (a decode graph captures a shape only after running it eagerly once).
  bool run(const DeviceWeight& w, const float* x, std::int64_t ldx, std::int64_t m, float* y, std::int64_t ldy);
  // Why the last run() returned false ("" when it did not).
  [[nodiscard]] const std::string& unavailable_reason() const noexcept { return why_; }

 private:
  bool ensure();
  const cublasLtMatmulAlgo_t* algorithm(std::int64_t rows_w, std::int64_t rows_x, std::int64_t k, std::int64_t ldy,
                                        std::uint32_t y_alignment);

  const CudaContext& context_;
  DeviceAllocator& allocator_;
  const CublasLt* lt_ = nullptr;
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  std::byte* weights_ = nullptr;      // BF16 rows of one weight chunk
  std::byte* activations_ = nullptr;  // BF16 rows of x
  std::byte* workspace_ = nullptr;
  bool tried_ = false;
  std::string why_;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::uint32_t>, cublasLtMatmulAlgo_t>
      algorithms_;
};

}  // namespace sitsrt::cuda
