#include "cuda_backend/prefill_gemm.hpp"

#include "core/check.hpp"
#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/cuda_kernels.hpp"
#include "cuda_backend/kernels/launch.hpp"

#include <algorithm>

namespace sitsrt::cuda {
namespace {

constexpr std::size_t kWeightBytes = 64u << 20;      // BF16 weight rows per GEMM (a 4096-wide row: 8192)
constexpr std::size_t kActivationBytes = 16u << 20;  // BF16 rows of x per GEMM (4096 wide: 2048)
constexpr std::size_t kWorkspaceBytes = 32u << 20;
constexpr std::int64_t kBf16Bytes = 2;

// The three matrix layouts of one GEMM, column-major as cuBLASLt sees them: W chunk (k x rows_w,
// used transposed), x chunk (k x rows_x), y (rows_w x rows_x, ldy apart).
class Layouts {
 public:
  Layouts(const CublasLt& lt, std::int64_t rows_w, std::int64_t rows_x, std::int64_t k, std::int64_t ldy) : lt_(lt) {
    const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
    try {
      SITSRT_CUBLASLT_CHECK(lt.matrix_layout_create(&a, CUDA_R_16BF, u(k), u(rows_w), k));
      SITSRT_CUBLASLT_CHECK(lt.matrix_layout_create(&b, CUDA_R_16BF, u(k), u(rows_x), k));
      SITSRT_CUBLASLT_CHECK(lt.matrix_layout_create(&c, CUDA_R_32F, u(rows_w), u(rows_x), ldy));
    } catch (...) {
      release();
      throw;
    }
  }
  ~Layouts() { release(); }
  Layouts(const Layouts&) = delete;
  Layouts& operator=(const Layouts&) = delete;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;

 private:
  void release() noexcept {
    for (cublasLtMatrixLayout_t l : {a, b, c}) {
      if (l != nullptr) static_cast<void>(lt_.matrix_layout_destroy(l));
    }
  }
  const CublasLt& lt_;
};

}  // namespace

PrefillGemm::PrefillGemm(const CudaContext& context, DeviceAllocator& allocator)
    : context_(context), allocator_(allocator) {}

PrefillGemm::~PrefillGemm() {
  if (weights_ != nullptr || activations_ != nullptr || workspace_ != nullptr) {
    static_cast<void>(cudaSetDevice(context_.device()));
    static_cast<void>(cudaStreamSynchronize(context_.stream()));
  }
  if (weights_ != nullptr) allocator_.deallocate(weights_, kWeightBytes);
  if (activations_ != nullptr) allocator_.deallocate(activations_, kActivationBytes);
  if (workspace_ != nullptr) allocator_.deallocate(workspace_, kWorkspaceBytes);
  if (lt_ != nullptr && desc_ != nullptr) static_cast<void>(lt_->matmul_desc_destroy(desc_));
  if (lt_ != nullptr && handle_ != nullptr) static_cast<void>(lt_->destroy(handle_));
}

bool PrefillGemm::ensure() {
  if (tried_) return handle_ != nullptr && workspace_ != nullptr;
  tried_ = true;
  lt_ = CublasLt::load(&why_);
  if (lt_ == nullptr) return false;
  try {
    SITSRT_CUBLASLT_CHECK(lt_->create(&handle_));
    SITSRT_CUBLASLT_CHECK(lt_->matmul_desc_create(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transpose = CUBLAS_OP_T;
    SITSRT_CUBLASLT_CHECK(
        lt_->matmul_desc_set_attribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
    weights_ = allocator_.allocate(kWeightBytes, "prefill GEMM weight rows (bf16)");
    activations_ = allocator_.allocate(kActivationBytes, "prefill GEMM activations (bf16)");
    workspace_ = allocator_.allocate(kWorkspaceBytes, "cuBLASLt workspace");
  } catch (const Error& e) {  // out of budget, or cuBLASLt refused: the decode kernels run instead
    why_ = e.what();
    if (workspace_ == nullptr) {
      if (weights_ != nullptr) allocator_.deallocate(weights_, kWeightBytes);
      if (activations_ != nullptr) allocator_.deallocate(activations_, kActivationBytes);
      weights_ = activations_ = nullptr;
    }
    return false;
  }
  return true;
}

const cublasLtMatmulAlgo_t* PrefillGemm::algorithm(std::int64_t rows_w, std::int64_t rows_x, std::int64_t k,
                                                   std::int64_t ldy, std::uint32_t y_alignment) {
  const auto key = std::make_tuple(rows_w, rows_x, k, ldy, y_alignment);
  if (const auto it = algorithms_.find(key); it != algorithms_.end()) return &it->second;
  const Layouts l(*lt_, rows_w, rows_x, k, ldy);
  cublasLtMatmulPreference_t preference = nullptr;
  SITSRT_CUBLASLT_CHECK(lt_->preference_create(&preference));
  const std::uint64_t workspace = kWorkspaceBytes;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  // y's rows may sit anywhere in the arena: only algorithms that take its alignment (cuBLASLt
  // assumes 256 bytes otherwise); the BF16 buffers are 256-byte aligned.
  cublasStatus_t set = lt_->preference_set_attribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                     sizeof(workspace));
  for (const cublasLtMatmulPreferenceAttributes_t attribute :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (set == CUBLAS_STATUS_SUCCESS) {
      set = lt_->preference_set_attribute(preference, attribute, &y_alignment, sizeof(y_alignment));
    }
  }
  const cublasStatus_t asked =
      set == CUBLAS_STATUS_SUCCESS
          ? lt_->algo_get_heuristic(handle_, desc_, l.a, l.b, l.c, l.c, preference, 1, &result, &found)
          : set;
  static_cast<void>(lt_->preference_destroy(preference));
  if (asked != CUBLAS_STATUS_SUCCESS || found == 0) {
    why_ = fmt::format("cuBLASLt has no BF16 GEMM for {} x {} x {} (status {})", rows_w, rows_x, k,
                       static_cast<int>(asked));
    return nullptr;
  }
  return &algorithms_.emplace(key, result.algo).first->second;
}

bool PrefillGemm::run(const DeviceWeight& w, const float* x, std::int64_t ldx, std::int64_t m, float* y,
                      std::int64_t ldy) {
  why_.clear();
  if (m <= 0 || !ensure()) return false;
  const std::int64_t n = w.rows, k = w.cols;
  const std::int64_t rows_w = std::min<std::int64_t>(n, static_cast<std::int64_t>(kWeightBytes) / (kBf16Bytes * k));
  const std::int64_t rows_x = std::min<std::int64_t>(m, static_cast<std::int64_t>(kActivationBytes) / (kBf16Bytes * k));
  if (rows_w < 1 || rows_x < 1) {
    why_ = fmt::format("rows of {} values do not fit the BF16 buffers", k);
    return false;
  }
  // The alignment every chunk's output start keeps: y's, and its steps of rows and of columns.
  const auto bits = reinterpret_cast<std::uintptr_t>(y) | static_cast<std::uintptr_t>(ldy * 4) |
                    static_cast<std::uintptr_t>(rows_w * 4) | 256u;
  const auto y_alignment = static_cast<std::uint32_t>(bits & (~bits + 1));  // the lowest set bit
  // Every shape's algorithm first, so nothing is queued for a GEMM that cannot run.
  for (const std::int64_t nw : {rows_w, n % rows_w}) {
    for (const std::int64_t mx : {rows_x, m % rows_x}) {
      if (nw > 0 && mx > 0 && algorithm(nw, mx, k, ldy, y_alignment) == nullptr) return false;
    }
  }
  cudaStream_t stream = context_.stream();
  const float alpha = 1.0f, beta = 0.0f;
  for (std::int64_t x0 = 0; x0 < m; x0 += rows_x) {
    const std::int64_t mx = std::min(rows_x, m - x0);
    launch_floats_to_bf16(x + x0 * ldx, ldx, mx, k, activations_, stream);
    SITSRT_CUDA_CHECK_LAUNCH("bf16 activation kernel");
    for (std::int64_t r0 = 0; r0 < n; r0 += rows_w) {
      const std::int64_t nw = std::min(rows_w, n - r0);
      launch_weights_to_bf16(w.format, w.planar, w.data, w.row_bytes, n, k, r0, nw, weights_, stream);
      SITSRT_CUDA_CHECK_LAUNCH("bf16 weight kernel");
      const Layouts l(*lt_, nw, mx, k, ldy);
      float* out = y + x0 * ldy + r0;
      SITSRT_CUBLASLT_CHECK(lt_->matmul(handle_, desc_, &alpha, weights_, l.a, activations_, l.b, &beta, out, l.c, out,
                                        l.c, algorithm(nw, mx, k, ldy, y_alignment), workspace_, kWorkspaceBytes,
                                        stream));
    }
  }
  return true;
}

}  // namespace sitsrt::cuda
