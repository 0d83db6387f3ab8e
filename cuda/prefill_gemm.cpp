#include "cuda_backend/prefill_gemm.hpp"

#include "core/check.hpp"
#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/cuda_kernels.hpp"
#include "cuda_backend/kernels/launch.hpp"

#include <algorithm>
#include <utility>

namespace sitsrt::cuda {
namespace {

constexpr std::size_t kWeightBytes = 64u << 20;      // BF16 weight rows per GEMM (a 4096-wide row: 8192)
constexpr std::size_t kActivationBytes = 16u << 20;  // BF16 rows of x per GEMM (4096 wide: 2048)
constexpr std::size_t kWorkspaceBytes = 32u << 20;
constexpr std::int64_t kBf16Bytes = 2;

// Floats of the activations' FP8 scales: a row's (per token) or a block of 128 of a row's (16 MiB
// of codes need 2^17 of those, a window of 8 rows more).
constexpr std::int64_t kScaleFloats = 1 << 18;

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
    allocator_.deallocate(reinterpret_cast<std::byte*>(token_scales_), kScaleFloats * sizeof(float));
  }
  if (lt_ != nullptr && desc_ != nullptr) static_cast<void>(lt_->matmul_desc_destroy(desc_));
  for (cublasLtMatmulDesc_t d : fp8_desc_) {
    if (lt_ != nullptr && d != nullptr) static_cast<void>(lt_->matmul_desc_destroy(d));
  }
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

bool PrefillGemm::ensure_fp8(Kind kind) {
  const auto i = static_cast<std::size_t>(kind) - 1;
  if (fp8_tried_[i]) {
    if (fp8_desc_[i] == nullptr) fp8_why_ = fp8_refused_[i];
    return fp8_desc_[i] != nullptr && token_scales_ != nullptr;
  }
  fp8_tried_[i] = true;
  // cuBLASLt's outer-vector and 128-element / 128 x 128 block FP8 scaling run on Hopper only (Ada
  // has no scaled FP8 kernels of those modes, Blackwell takes other block modes).
  if (context_.compute_capability() / 10 != 9) {
    fp8_why_ = fp8_refused_[i] =
        fmt::format("cuBLASLt scales FP8 {} on sm_90 only, not sm_{}",
                    kind == Kind::kFp8Channel ? "per channel and token" : "per block", context_.compute_capability());
    return false;
  }
  try {
    SITSRT_CUBLASLT_CHECK(lt_->matmul_desc_create(&fp8_desc_[i], CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transpose = CUBLAS_OP_T;  // FP8 GEMMs take A transposed ("TN") only
    SITSRT_CUBLASLT_CHECK(
        lt_->matmul_desc_set_attribute(fp8_desc_[i], CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
    // A = the weights: per-channel vector or 128 x 128 grid; B = the activations: per-token
    // vector or 128-element blocks (cuBLASLt 12.9+; an older library refuses the attribute, and
    // the BF16 path runs).
    const bool channel = kind == Kind::kFp8Channel;
    const auto a_mode = static_cast<std::int32_t>(channel ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
                                                          : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F);
    const auto b_mode = static_cast<std::int32_t>(channel ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
                                                          : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F);
    SITSRT_CUBLASLT_CHECK(
        lt_->matmul_desc_set_attribute(fp8_desc_[i], CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)));
    SITSRT_CUBLASLT_CHECK(
        lt_->matmul_desc_set_attribute(fp8_desc_[i], CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)));
    if (token_scales_ == nullptr) {
      token_scales_ = reinterpret_cast<float*>(
          allocator_.allocate(kScaleFloats * sizeof(float), "prefill GEMM FP8 activation scales"));
    }
  } catch (const Error& e) {
    fp8_why_ = fp8_refused_[i] = e.what();
    if (fp8_desc_[i] != nullptr) static_cast<void>(lt_->matmul_desc_destroy(fp8_desc_[i]));
    fp8_desc_[i] = nullptr;
    return false;
  }
  return true;
}

namespace {

const char* gemm_name(std::uint8_t kind) {
  constexpr const char* kNames[] = {"BF16", "FP8 (per-channel x per-token scales)",
                                    "FP8 (128 x 128 block x 128-element block scales)"};
  return kNames[kind];
}

}  // namespace

const cublasLtMatmulAlgo_t* PrefillGemm::algorithm(Kind kind, std::int64_t rows_w, std::int64_t rows_x, std::int64_t k,
                                                   std::int64_t ldy, std::uint32_t y_alignment,
                                                   std::uint32_t x_alignment) {
  const bool fp8 = kind != Kind::kBf16;
  const char* what = gemm_name(static_cast<std::uint8_t>(kind));
  const auto key = std::make_tuple(kind, rows_w, rows_x, k, ldy, y_alignment, x_alignment);
  if (const auto it = algorithms_.find(key); it != algorithms_.end()) {
    if (it->second) return &*it->second;
    (fp8 ? fp8_why_ : why_) =
        fmt::format("cuBLASLt has no {} GEMM for {} x {} x {} (asked before)", what, rows_w, rows_x, k);
    return nullptr;
  }
  cublasLtMatmulDesc_t desc = fp8 ? fp8_desc_[static_cast<std::size_t>(kind) - 1] : desc_;
  const Layouts l(*lt_, fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF, rows_w, rows_x, k, ldy);
  cublasLtMatmulPreference_t preference = nullptr;
  SITSRT_CUBLASLT_CHECK(lt_->preference_create(&preference));
  const std::uint64_t workspace = kWorkspaceBytes;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  // y's rows may sit anywhere in the arena and a chunk of x's E4M3 rows anywhere in its buffer
  // (x_alignment): only algorithms that take their alignments (cuBLASLt assumes 256 bytes
  // otherwise); the weights and the BF16 buffers are 256-byte aligned.
  cublasStatus_t set = lt_->preference_set_attribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                     sizeof(workspace));
  for (const auto& [attribute, bytes] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, y_alignment},
                                         std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, y_alignment},
                                         std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, x_alignment}}) {
    if (set == CUBLAS_STATUS_SUCCESS) set = lt_->preference_set_attribute(preference, attribute, &bytes, sizeof(bytes));
  }
  const cublasStatus_t asked = set == CUBLAS_STATUS_SUCCESS ? lt_->algo_get_heuristic(handle_, desc, l.a, l.b, l.c, l.c,
                                                                                      preference, 1, &result, &found)
                                                            : set;
  static_cast<void>(lt_->preference_destroy(preference));
  if (asked != CUBLAS_STATUS_SUCCESS || found == 0) {
    (fp8 ? fp8_why_ : why_) = fmt::format("cuBLASLt has no {} GEMM for {} x {} x {} (status {})", what, rows_w, rows_x,
                                          k, static_cast<int>(asked));
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
  if (run_fp8(w, x, ldx, m, y, ldy)) return true;  // last_path_ set
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
      if (nw > 0 && mx > 0 && algorithm(Kind::kBf16, nw, mx, k, ldy, y_alignment) == nullptr) return false;
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
                                        l.c, algorithm(Kind::kBf16, nw, mx, k, ldy, y_alignment), workspace_,
                                        kWorkspaceBytes, stream));
    }
  }
  last_path_ = Path::kBf16;
  return true;
}

bool PrefillGemm::run_fp8(const DeviceWeight& w, const float* x, std::int64_t ldx, std::int64_t m, float* y,
                          std::int64_t ldy) {
  if (w.format != DType::kFP8_E4M3 || !w.planar || (w.channel_scales == nullptr && w.block_scales == nullptr)) {
    fp8_why_ = "the weights are not FP8 E4M3 with one scale per output channel or per 128 x 128 block";
    return false;
  }
  const Kind kind = w.channel_scales != nullptr ? Kind::kFp8Channel : Kind::kFp8Blocks;
  const bool blocks = kind == Kind::kFp8Blocks;
  const std::int64_t n = w.rows, k = w.cols;  // k: whole blocks of 64 (planar), as FP8 GEMMs need (16)
  if (n % 16 != 0) {  // the weights' dimensions (k, n) multiples of 16 for cuBLASLt's FP8 kernels
    fp8_why_ = fmt::format("{} output channels are not a multiple of 16", n);
    return false;
  }
  if (blocks && k % 128 != 0) {  // block grids are made for whole blocks only (fp8_block128_scales)
    fp8_why_ = fmt::format("rows of {} values are not whole blocks of 128", k);
    return false;
  }
  // Scaled FP8 kernels need 16-byte aligned operands and leading dimensions (float y: ldy % 4).
  if (ldy % 4 != 0 || reinterpret_cast<std::uintptr_t>(y) % 16 != 0) {
    fp8_why_ = fmt::format("the output rows ({} apart) are not 16-byte aligned", ldy);
    return false;
  }
  if (!ensure_fp8(kind)) return false;  // fp8_why_ says why not, for every later call
  fp8_why_.clear();
  cublasLtMatmulDesc_t desc = fp8_desc_[static_cast<std::size_t>(kind) - 1];
  const Fp8ActivationPlan plan =
      plan_fp8_activations(blocks, m, k, static_cast<std::int64_t>(kActivationBytes), kScaleFloats);
  if (plan.chunks.empty()) {
    fp8_why_ = fmt::format("{} rows of {} values make no chunk of the FP8 activation buffers{}", m, k,
                           blocks ? " (block scaling takes whole 8 rows)" : "");
    return false;
  }
  // The scale pointers before the heuristic: cuBLASLt refuses scale modes without them (the
  // activations' set again per chunk).
  const void* weight_scales = blocks ? w.block_scales : w.channel_scales;
  const auto set_activation_scales = [&](const float* scales) {
    const void* p = scales;
    SITSRT_CUBLASLT_CHECK(lt_->matmul_desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p, sizeof(p)));
  };
  SITSRT_CUBLASLT_CHECK(lt_->matmul_desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &weight_scales,
                                                       sizeof(weight_scales)));
  set_activation_scales(token_scales_);
  const std::uint32_t y_alignment = output_alignment(y, ldy, n);
  // A chunk's codes start where its rows do in a resident plan (activations_ is 256-byte aligned).
  const auto x_alignment = [](const Fp8ActivationChunk& c) {
    const auto bits = static_cast<std::uint64_t>(c.codes_offset) | 256u;
    return static_cast<std::uint32_t>(bits & (~bits + 1));  // the lowest set bit
  };
  for (const Fp8ActivationChunk& c : plan.chunks) {
    if (algorithm(kind, n, c.rows, k, ldy, y_alignment, x_alignment(c)) == nullptr) return false;
  }
  cudaStream_t stream = context_.stream();
  const float alpha = 1.0f, beta = 0.0f;
  // x's codes and scales may be in place already (an earlier GEMM over x, or the fused norm).
  const bool reused = keep_fp8_ && plan.resident && fp8_x_.x == x && fp8_x_.ldx == ldx && fp8_x_.m == m &&
                      fp8_x_.k == k && fp8_x_.kind == kind;
  if (!reused) fp8_x_ = {};
  // The weights' codes plane is the n x k E4M3 matrix itself (planar_weights.hpp).
  for (const Fp8ActivationChunk& c : plan.chunks) {
    std::uint8_t* codes = reinterpret_cast<std::uint8_t*>(activations_) + c.codes_offset;
    float* scales = token_scales_ + c.scales_offset;
    if (!reused) {
      if (blocks) {
        launch_floats_to_fp8_blocks(x + c.first * ldx, ldx, c.rows, k, codes, scales, c.rows, stream);
      } else {
        launch_floats_to_fp8_rows(x + c.first * ldx, ldx, c.rows, k, codes, scales, stream);
      }
      SITSRT_CUDA_CHECK_LAUNCH("fp8 activation kernel");
    }
    set_activation_scales(scales);
    const Layouts l(*lt_, CUDA_R_8F_E4M3, n, c.rows, k, ldy);
    float* out = y + c.first * ldy;
    const cublasStatus_t status = lt_->matmul(handle_, desc, &alpha, w.data, l.a, codes, l.b, &beta, out, l.c, out, l.c,
                                              algorithm(kind, n, c.rows, k, ldy, y_alignment, x_alignment(c)),
                                              workspace_, kWorkspaceBytes, stream);
    if (status != CUBLAS_STATUS_SUCCESS) {
      // A scale setting cuBLASLt refuses only here: this shape takes the BF16 path from now on,
      // which rewrites every row of y (the chunks done so far included).
      algorithms_[std::make_tuple(kind, n, c.rows, k, ldy, y_alignment, x_alignment(c))] = std::nullopt;
      fp8_x_ = {};  // the BF16 path takes activations_ over
      fp8_why_ = fmt::format("cublasLtMatmul refused the {} GEMM {} x {} x {} (status {})",
                             gemm_name(static_cast<std::uint8_t>(kind)), n, c.rows, k, static_cast<int>(status));
      return false;
    }
  }
  if (reused) fp8_reuses_.fetch_add(1, std::memory_order_relaxed);
  if (!reused && plan.resident && keep_fp8_) fp8_x_ = {x, ldx, m, k, kind};  // recorded once queued
  forget_fp8_activations_under(y, ldy, m, n);  // an output over x: x's rows are not x's anymore
  last_path_ = blocks ? Path::kFp8Blocks : Path::kFp8;
  return true;
}

PrefillGemm::Fp8Rows PrefillGemm::fp8_activation_buffers(std::int64_t m, std::int64_t k) {
  fp8_x_ = {};  // the caller overwrites them
  // As run_fp8 would quantize them per token: rows of whole 16-value multiples, one chunk at the
  // buffers' starts.
  if (!keep_fp8_ || m <= 0 || k <= 0 || k % 16 != 0 || !ensure() || !ensure_fp8(Kind::kFp8Channel)) return {};
  const Fp8ActivationPlan plan =
      plan_fp8_activations(false, m, k, static_cast<std::int64_t>(kActivationBytes), kScaleFloats);
  if (!plan.resident || plan.chunks.size() != 1) return {};
  return {reinterpret_cast<std::uint8_t*>(activations_), token_scales_};
}

void PrefillGemm::fp8_activations_written(const float* x, std::int64_t ldx, std::int64_t m, std::int64_t k) noexcept {
  if (keep_fp8_) fp8_x_ = {x, ldx, m, k, Kind::kFp8Channel};
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
