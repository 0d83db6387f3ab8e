// Matmuls of many rows (prompt chunks) on the tensor cores, through cuBLASLt with float
// accumulation and float output:
//  - FP8 x FP8, for FP8 E4M3 weights with one scale per output channel (DeviceWeight::
//    channel_scales: checkpoints quantized per channel, and `--weights fp8-channel`): the
//    activations quantized to E4M3 per token (a scale per row, launch_floats_to_fp8_rows), the
//    weights read in place, both scale vectors applied by cuBLASLt (outer-vector scaling); or with
//    one scale per 128 x 128 block (DeviceWeight::block_scales: DeepSeek-V3 / Qwen3-FP8
//    checkpoints, `--weights fp8-block`): the activations quantized per block of 128 of a row
//    (launch_floats_to_fp8_blocks), cuBLASLt's 128-element x 128 x 128 block scaling. Both
//    cuBLASLt 12.9+ on Hopper (sm_90). Each activation within 2^-4 of its value (E4M3's 3
//    mantissa bits). (`fp8` scales each block of 64 apart, which no cuBLASLt scale mode takes.)
//  - BF16 otherwise (and where cuBLASLt offers no FP8 algorithm): the weights decoded to BF16 a
//    chunk of rows at a time, the activations rounded to BF16 (each product within 2^-8 of its
//    exact value).
// The decode kernels (planar_matmul.cu, matmul.cu) are exact products summed in float; decode
// steps below kMinRows rows keep those. Algorithms are chosen by cuBLASLt's heuristic once per
// shape and kept. Unavailable (returns false) when libcublasLt cannot be loaded or its buffers do
// not fit the budget: callers then run the decode kernels.
#pragma once

#include "cuda_backend/cublaslt_library.hpp"
#include "cuda_backend/cuda_context.hpp"
#include "cuda_backend/device_allocator.hpp"
#include "cuda_backend/fp8_activation_plan.hpp"

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
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

  // y[m x n] = x[m x k] * W^T queued on the stream; false (nothing queued) when unavailable. y
  // must not overlap x (chunks of x are read after earlier chunks' rows of y are written; the
  // backend's memory plan never places a matmul's output over its input).
  // Loads the library and allocates its buffers on first use: not to be called first inside a
  // stream capture (a decode graph captures a shape only after running it eagerly once).
  bool run(const DeviceWeight& w, const float* x, std::int64_t ldx, std::int64_t m, float* y, std::int64_t ldy);
  // Why the last run() returned false ("" when it did not).
  [[nodiscard]] const std::string& unavailable_reason() const noexcept { return why_; }
  // Which GEMM the last successful run() took, and why it did not take FP8 x FP8 ("" when it did).
  enum class Path { kNone, kBf16, kFp8, kFp8Blocks };  // kFp8Blocks: 128 x 128 block-scaled weights
  [[nodiscard]] Path last_path() const noexcept { return last_path_; }
  [[nodiscard]] const std::string& fp8_unavailable_reason() const noexcept { return fp8_why_; }

  // FP8 activations kept for the next FP8 x FP8 GEMMs over the same x (Q, K and V read one
  // normalised x; gate and up another), when the owner turns it on (keep_fp8_activations: off by
  // default, so a caller that rewrites x between runs gets x quantized every time): the E4M3 rows
  // and per-token scales of x (m rows of k, ldx apart) stay x's until forget_fp8_activations(),
  // which the owner owes after anything else may write x (CudaKernels / CudaBackend: nodes other
  // than matmuls and RMSNorm, writes, copies, steps, graph modes). A GEMM whose output overlaps x
  // keeps nothing.
  void keep_fp8_activations(bool on) noexcept {
    keep_fp8_ = on;
    fp8_x_ = {};
  }
  struct Fp8Rows {
    std::uint8_t* codes = nullptr;  // m rows of k E4M3 codes, packed
    float* scales = nullptr;        // m per-token scales
  };
  // For a fused producer (launch_rms_norm_fp8): the buffers x's rows go to, where activations are
  // kept, the FP8 x FP8 GEMM is available and m rows of k fit one chunk; null codes otherwise.
  // Forgets what they held; fp8_activations_written records them as x's once the producer is
  // queued. Not inside a stream capture (buffers are allocated on first use).
  Fp8Rows fp8_activation_buffers(std::int64_t m, std::int64_t k);
  void fp8_activations_written(const float* x, std::int64_t ldx, std::int64_t m, std::int64_t k) noexcept;
  void forget_fp8_activations() noexcept { fp8_x_ = {}; }
  void forget_fp8_activations_under(const float* y, std::int64_t ldy, std::int64_t rows, std::int64_t cols) noexcept;
  // GEMMs that found their FP8 activations in place (no quantization launched).
  [[nodiscard]] std::uint64_t fp8_activation_reuses() const noexcept {
    return fp8_reuses_.load(std::memory_order_relaxed);
  }

 private:
  bool ensure();
  // How a GEMM's operands are typed and scaled.
  enum class Kind : std::uint8_t { kBf16, kFp8Channel, kFp8Blocks };
  // The FP8 x FP8 GEMM; false (nothing queued, fp8_why_ set) where it does not apply.
  bool run_fp8(const DeviceWeight& w, const float* x, std::int64_t ldx, std::int64_t m, float* y, std::int64_t ldy);
  bool ensure_fp8(Kind kind);
  // The heuristic's algorithm for a shape of `kind`'s descriptor, y's and x's operand alignments
  // (bytes), cached; null (why_ or fp8_why_ set) when it has none.
  const cublasLtMatmulAlgo_t* algorithm(Kind kind, std::int64_t rows_w, std::int64_t rows_x, std::int64_t k,
                                        std::int64_t ldy, std::uint32_t y_alignment, std::uint32_t x_alignment = 256);

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
  // FP8 x FP8: a descriptor per scaling (scale modes; scale pointers set per call: index
  // Kind - 1) and the activations' scales, per token or per block of 128 of a row (the E4M3
  // codes go in activations_).
  cublasLtMatmulDesc_t fp8_desc_[2] = {nullptr, nullptr};
  bool fp8_tried_[2] = {false, false};
  std::string fp8_refused_[2];  // why a descriptor could not be made
  float* token_scales_ = nullptr;
  std::string fp8_why_;
  Path last_path_ = Path::kNone;
  // Whose rows activations_ / token_scales_ hold as E4M3, and scaled how (x null: none known).
  struct Fp8Source {
    const float* x = nullptr;
    std::int64_t ldx = 0, m = 0, k = 0;
    Kind kind = Kind::kFp8Channel;
  };
  Fp8Source fp8_x_;
  bool keep_fp8_ = false;
  std::atomic<std::uint64_t> fp8_reuses_{0};  // read by queue_stats from any thread
  // Per shape: the heuristic's algorithm, or none (it had none: not asked again).
  std::map<std::tuple<Kind, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::uint32_t, std::uint32_t>,
           std::optional<cublasLtMatmulAlgo_t>>
      algorithms_;
};

}  // namespace sitsrt::cuda
