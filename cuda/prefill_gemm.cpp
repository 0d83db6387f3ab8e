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

constexpr std::int64_t kMaxTokenScales = 1 << 16;  // rows of x per FP8 GEMM, at most

// The three matrix layouts of one GEMM, column-major as cuBLASLt sees them: W chunk (k x rows_w,
// used transposed), x chunk (k x rows_x), both of `type` (BF16 or E4M3), y (rows_w x rows_x, ldy
// apart, float).
class Layouts {
 public:
  Layouts(const CublasLt& lt, cudaDataType_t type, std::int64_t rows_w, std::int64_t rows_x, std::int64_t k,
          std::int64_t ldy)
      : lt_(lt) {
    const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
    try {
      SITSRT_CUBLASLT_CHECK(lt.matrix_layout_create(&a, type, u(k), u(rows_w), k));
      SITSRT_CUBLASLT_CHECK(lt.matrix_layout_create(&b, type, u(k), u(rows_x), k));
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
  if (token_scales_ != nullptr) {
    allocator_.deallocate(reinterpret_cast<std::byte*>(token_scales_), kMaxTokenScales * sizeof(float));
  }
  if (lt_ != nullptr && desc_ != nullptr) static_cast<void>(lt_->matmul_desc_destroy(desc_));
  if (lt_ != nullptr && fp8_desc_ != nullptr) static_cast<void>(lt_->matmul_desc_destroy(fp8_desc_));
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

bool PrefillGemm::ensure_fp8() {
  if (fp8_tried_) return fp8_desc_ != nullptr && token_scales_ != nullptr;
  fp8_tried_ = true;
  // cuBLASLt's outer-vector FP8 scaling runs on Hopper only (Ada has no scaled FP8 kernels of that
  // mode, Blackwell takes block modes instead).
  if (context_.compute_capability() / 10 != 9) {
    fp8_why_ = fmt::format("cuBLASLt scales FP8 per channel and token on sm_90 only, not sm_{}",
                           context_.compute_capability());
    return false;
  }
  try {
    SITSRT_CUBLASLT_CHECK(lt_->matmul_desc_create(&fp8_desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transpose = CUBLAS_OP_T;  // FP8 GEMMs take A transposed ("TN") only
    SITSRT_CUBLASLT_CHECK(
        lt_->matmul_desc_set_attribute(fp8_desc_, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
    // Per-channel and per-token scale vectors (outer-vector scaling: cuBLASLt 12.9+; an older
    // library refuses the attribute, and the BF16 path runs).
    const auto mode = static_cast<std::int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F);
    SITSRT_CUBLASLT_CHECK(
        lt_->matmul_desc_set_attribute(fp8_desc_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
    SITSRT_CUBLASLT_CHECK(
        lt_->matmul_desc_set_attribute(fp8_desc_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
    token_scales_ = reinterpret_cast<float*>(
        allocator_.allocate(kMaxTokenScales * sizeof(float), "prefill GEMM per-token FP8 scales"));
  } catch (const Error& e) {
    fp8_why_ = e.what();
    if (fp8_desc_ != nullptr) static_cast<void>(lt_->matmul_desc_destroy(fp8_desc_));
    fp8_desc_ = nullptr;
    return false;
  }
  return true;
}

const cublasLtMatmulAlgo_t* PrefillGemm::algorithm(bool fp8, std::int64_t rows_w, std::int64_t rows_x, std::int64_t k,
                                                   std::int64_t ldy, std::uint32_t y_alignment) {
  const auto key = std::make_tuple(fp8, rows_w, rows_x, k, ldy, y_alignment);
  if (const auto it = algorithms_.find(key); it != algorithms_.end()) {
    if (it->second) return &*it->second;
    (fp8 ? fp8_why_ : why_) = fmt::format("cuBLASLt has no {} GEMM for {} x {} x {} (asked before)",
                                          fp8 ? "FP8 (per-channel x per-token scales)" : "BF16", rows_w, rows_x, k);
    return nullptr;
  }
  const Layouts l(*lt_, fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF, rows_w, rows_x, k, ldy);
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
  const cublasStatus_t asked = set == CUBLAS_STATUS_SUCCESS
                                   ? lt_->algo_get_heuristic(handle_, fp8 ? fp8_desc_ : desc_, l.a, l.b, l.c, l.c,
                                                             preference, 1, &result, &found)
                                   : set;
  static_cast<void>(lt_->preference_destroy(preference));
  if (asked != CUBLAS_STATUS_SUCCESS || found == 0) {
    (fp8 ? fp8_why_ : why_) =
        fmt::format("cuBLASLt has no {} GEMM for {} x {} x {} (status {})",
                    fp8 ? "FP8 (per-channel x per-token scales)" : "BF16", rows_w, rows_x, k, static_cast<int>(asked));
    algorithms_.emplace(key, std::nullopt);  // not asked again
    return nullptr;
  }
  return &*algorithms_.emplace(key, result.algo).first->second;
}

namespace {

// The alignment every chunk's output start keeps: y's, and its steps of rows and of columns.
std::uint32_t output_alignment(const float* y, std::int64_t ldy, std::int64_t rows_w) {
  const auto bits = reinterpret_cast<std::uintptr_t>(y) | static_cast<std::uintptr_t>(ldy * 4) |
                    static_cast<std::uintptr_t>(rows_w * 4) | 256u;
  return static_cast<std::uint32_t>(bits & (~bits + 1));  // the lowest set bit
}

}  // namespace

bool PrefillGemm::run(const DeviceWeight& w, const float* x, std::int64_t ldx, std::int64_t m, float* y,
                      std::int64_t ldy) {
  why_.clear();
  last_path_ = Path::kNone;
  if (m <= 0 || !ensure()) return false;
  if (run_fp8(w, x, ldx, m, y, ldy)) {
    last_path_ = Path::kFp8;
    return true;
  }
  const std::int64_t n = w.rows, k = w.cols;
  const std::int64_t rows_w = std::min<std::int64_t>(n, static_cast<std::int64_t>(kWeightBytes) / (kBf16Bytes * k));
  const std::int64_t rows_x = std::min<std::int64_t>(m, static_cast<std::int64_t>(kActivationBytes) / (kBf16Bytes * k));
  if (rows_w < 1 || rows_x < 1) {
    why_ = fmt::format("rows of {} values do not fit the BF16 buffers", k);
    return false;
  }
  const std::uint32_t y_alignment = output_alignment(y, ldy, rows_w);
  fp8_x_ = {};  // activations_ takes BF16 rows below
  // Every shape's algorithm first, so nothing is queued for a GEMM that cannot run.
  for (const std::int64_t nw : {rows_w, n % rows_w}) {
    for (const std::int64_t mx : {rows_x, m % rows_x}) {
      if (nw > 0 && mx > 0 && algorithm(false, nw, mx, k, ldy, y_alignment) == nullptr) return false;
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
      const Layouts l(*lt_, CUDA_R_16BF, nw, mx, k, ldy);
      float* out = y + x0 * ldy + r0;
      SITSRT_CUBLASLT_CHECK(lt_->matmul(handle_, desc_, &alpha, weights_, l.a, activations_, l.b, &beta, out, l.c, out,
                                        l.c, algorithm(false, nw, mx, k, ldy, y_alignment), workspace_, kWorkspaceBytes,
                                        stream));
    }
  }
  last_path_ = Path::kBf16;
  return true;
}

bool PrefillGemm::run_fp8(const DeviceWeight& w, const float* x, std::int64_t ldx, std::int64_t m, float* y,
                          std::int64_t ldy) {
  if (w.format != DType::kFP8_E4M3 || !w.planar || w.channel_scales == nullptr) {
    fp8_why_ = "the weights are not FP8 E4M3 with one scale per output channel";
    return false;
  }
  const std::int64_t n = w.rows, k = w.cols;  // k: whole blocks of 64 (planar), as FP8 GEMMs need (16)
  if (n % 16 != 0) {  // the weights' dimensions (k, n) multiples of 16 for cuBLASLt's FP8 kernels
    fp8_why_ = fmt::format("{} output channels are not a multiple of 16", n);
    return false;
  }
  // Scaled FP8 kernels need 16-byte aligned operands and leading dimensions (float y: ldy % 4).
  if (ldy % 4 != 0 || reinterpret_cast<std::uintptr_t>(y) % 16 != 0) {
    fp8_why_ = fmt::format("the output rows ({} apart) are not 16-byte aligned", ldy);
    return false;
  }
  if (!ensure_fp8()) return false;  // fp8_why_ keeps why not, for every later call
  fp8_why_.clear();
  // The scale pointers before the heuristic: cuBLASLt refuses scale modes without them.
  const void* channel_scales = w.channel_scales;
  const void* token_scales = token_scales_;
  SITSRT_CUBLASLT_CHECK(lt_->matmul_desc_set_attribute(fp8_desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &channel_scales,
                                                       sizeof(channel_scales)));
  SITSRT_CUBLASLT_CHECK(lt_->matmul_desc_set_attribute(fp8_desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &token_scales,
                                                       sizeof(token_scales)));
  const std::int64_t rows_x = fp8_chunk_rows(m, k);
  if (rows_x < 1) {
    fp8_why_ = fmt::format("rows of {} values do not fit the FP8 activation buffer", k);
    return false;
  }
  const std::uint32_t y_alignment = output_alignment(y, ldy, n);
  for (const std::int64_t mx : {rows_x, m % rows_x}) {
    if (mx > 0 && algorithm(true, n, mx, k, ldy, y_alignment) == nullptr) return false;
  }
  cudaStream_t stream = context_.stream();
  const float alpha = 1.0f, beta = 0.0f;
  // The weights' codes plane is the n x k E4M3 matrix itself (planar_weights.hpp).
  for (std::int64_t x0 = 0; x0 < m; x0 += rows_x) {
    const std::int64_t mx = std::min(rows_x, m - x0);
    // One chunk: x's rows may be in place already (an earlier GEMM over x, or the fused norm).
    const bool whole = mx == m;
    const bool reused = keep_fp8_ && whole && fp8_x_.x == x && fp8_x_.ldx == ldx && fp8_x_.m == m && fp8_x_.k == k;
    if (!reused) {
      fp8_x_ = {};
      launch_floats_to_fp8_rows(x + x0 * ldx, ldx, mx, k, reinterpret_cast<std::uint8_t*>(activations_), token_scales_,
                                stream);
      SITSRT_CUDA_CHECK_LAUNCH("fp8 activation kernel");
      if (whole) fp8_activations_written(x, ldx, m, k);
    }
    const Layouts l(*lt_, CUDA_R_8F_E4M3, n, mx, k, ldy);
    float* out = y + x0 * ldy;
    const cublasStatus_t status =
        lt_->matmul(handle_, fp8_desc_, &alpha, w.data, l.a, activations_, l.b, &beta, out, l.c, out, l.c,
                    algorithm(true, n, mx, k, ldy, y_alignment), workspace_, kWorkspaceBytes, stream);
    if (status != CUBLAS_STATUS_SUCCESS) {
      // A scale setting cuBLASLt refuses only here: this shape takes the BF16 path from now on,
      // which rewrites every row of y (the chunks done so far included).
      algorithms_[std::make_tuple(true, n, mx, k, ldy, y_alignment)] = std::nullopt;
      fp8_x_ = {};  // the BF16 path takes activations_ over
      fp8_why_ = fmt::format("cublasLtMatmul refused the FP8 GEMM {} x {} x {} (status {})", n, mx, k,
                             static_cast<int>(status));
      return false;
    }
    if (reused) fp8_reuses_.fetch_add(1, std::memory_order_relaxed);
  }
  forget_fp8_activations_under(y, ldy, m, n);  // an output over x: x's rows are not x's anymore
  return true;
}

std::int64_t PrefillGemm::fp8_chunk_rows(std::int64_t m, std::int64_t k) const noexcept {
  return std::min({m, static_cast<std::int64_t>(kActivationBytes) / k, kMaxTokenScales});
}

PrefillGemm::Fp8Rows PrefillGemm::fp8_activation_buffers(std::int64_t m, std::int64_t k) {
  fp8_x_ = {};  // the caller overwrites them
  // As run_fp8 would quantize them: rows of whole 16-value multiples, one chunk.
  if (!keep_fp8_ || m <= 0 || k <= 0 || k % 16 != 0 || !ensure() || !ensure_fp8() || fp8_chunk_rows(m, k) < m) {
    return {};
  }
  return {reinterpret_cast<std::uint8_t*>(activations_), token_scales_};
}

void PrefillGemm::fp8_activations_written(const float* x, std::int64_t ldx, std::int64_t m, std::int64_t k) noexcept {
  if (keep_fp8_) fp8_x_ = {x, ldx, m, k};
}

void PrefillGemm::forget_fp8_activations_under(const float* y, std::int64_t ldy, std::int64_t rows,
                                               std::int64_t cols) noexcept {
  if (fp8_x_.x == nullptr || rows <= 0 || cols <= 0) return;
  const auto begin = [](const float* p) { return reinterpret_cast<std::uintptr_t>(p); };
  const std::uintptr_t x0 = begin(fp8_x_.x), x1 = begin(fp8_x_.x + (fp8_x_.m - 1) * fp8_x_.ldx + fp8_x_.k);
  const std::uintptr_t y0 = begin(y), y1 = begin(y + (rows - 1) * ldy + cols);
  if (y0 < x1 && x0 < y1) fp8_x_ = {};
}

}  // namespace sitsrt::cuda
