// Host entry points of the CUDA kernels: free functions on device pointers and dimensions, each
// enqueuing its kernels on `stream` (kernels/*.cu). No model, graph or backend types; the
// backend (cuda_kernels.cpp) maps op views onto these. Launch errors are thrown as sitsrt::Error
// (cuda_check.hpp) by the callers' check after each launch.
#pragma once

#include "core/dtype.hpp"
#include "cuda_backend/kernels/attention_desc.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

namespace sitsrt::cuda {

// The weight formats the matmul and embedding kernels decode (device_formats.hpp).
[[nodiscard]] bool kernel_supports(DType format) noexcept;

// y[m x n] = x[m x k] * W^T, W's row i (k elements of `format`, row_bytes apart) the weights of
// output i. Rows of x are taken 8 at a time: each weight row is read once per 8 rows.
void launch_matmul(DType format, const std::uint8_t* w, std::int64_t row_bytes, std::int64_t n, std::int64_t k,
                   const float* x, std::int64_t ldx, std::int64_t m, float* y, std::int64_t ldy, cudaStream_t stream);

// Which kernels a planar matmul may take. kExact: the CUDA-core kernels, exact products summed in
// float, each row's bits independent of the rows beside it (batch invariance). kTensorCores: also
// the tensor-core kernels (kernels/planar_mma.cu) for steps of kMmaMinRows rows and more over
// every planar format (F16 / BF16 rows of whole 16-element steps; each x within 2^-16 of its
// value); SITSRT_CUDA_MMA_DECODE=0
// in the environment keeps kExact (to compare).
enum class PlanarPath { kExact, kTensorCores };
inline constexpr std::int64_t kMmaMinRows = 5;

// Device scratch of the split tensor-core decode (kernels/planar_mma_split.cu; every format of the
// tensor-core decode at kMmaMinRows+ rows): blocks of 256 weight rows each summing a slice of the row (split-K
// across blocks), the last slice of a block of rows to finish adding the slices' partial sums in
// slice order. Without it (or with SITSRT_CUDA_MMA_SPLIT=0 in the environment) the tensor-core
// decode takes planar_mma.cu's blocks of 32 weight rows.
struct PlanarSplitScratch {
  float* partials = nullptr;
  std::int64_t partial_floats = 0;
  unsigned* counters = nullptr;  // zero between launches: each launch leaves its counters zero
  std::int64_t counter_count = 0;
};
struct PlanarSplitNeed {
  std::int64_t partial_floats = 0;
  std::int64_t counters = 0;
};

// launch_matmul over a planar matrix (FP8 E4M3, INT4 g128, Q8_0, Q4_x, Q5_x, K-quants, IQ4_NL,
// F16, BF16) of n rows of k elements, rows of x 16 at a time (planar_weights.hpp:
// planar_supports(format, k) must hold; data 16-byte aligned).
// Both return whether the tensor-core kernels ran it.
bool launch_planar_matmul(DType format, const std::uint8_t* data, std::int64_t n, std::int64_t k, const float* x,
                          std::int64_t ldx, std::int64_t m, float* y, std::int64_t ldy, cudaStream_t stream,
                          PlanarPath path = PlanarPath::kExact, const PlanarSplitScratch* split = nullptr);

// One matrix of a grouped planar launch: n rows (k elements each, the group's), outputs to y.
struct PlanarTarget {
  const std::uint8_t* data = nullptr;
  std::int64_t n = 0;
  float* y = nullptr;
  std::int64_t ldy = 0;
};
inline constexpr int kMaxPlanarTargets = 8;

enum class PlanarEpilogue : int { kNone, kAdd, kSwiGlu, kGeGlu };
struct PlanarEpilogueArgs {
  PlanarEpilogue kind = PlanarEpilogue::kNone;
  const float* residual = nullptr;  // kAdd: out = y + residual (one target)
  std::int64_t ld_residual = 0;
  float* out = nullptr;  // kAdd: the sum; kSwiGlu / kGeGlu: the activation of target 0 = gate, target 1 = up
  std::int64_t ld_out = 0;
};

// The matmuls of up to kMaxPlanarTargets planar matrices (one format, rows of k) reading the same
// m rows of x, in one launch, each output the bits launch_planar_matmul gives it; the epilogue
// also writes the residual sum (kAdd) or the SwiGLU of two equal-sized targets (kSwiGlu) as the
// elementwise kernels would, after the targets' own outputs.
// `split`: the split tensor-core decode's scratch, at least planar_split_need's (else an error);
// null: the unsplit tensor-core kernels.
bool launch_planar_group(DType format, std::span<const PlanarTarget> targets, std::int64_t k, const float* x,
                         std::int64_t ldx, std::int64_t m, const PlanarEpilogueArgs& epilogue, cudaStream_t stream,
                         PlanarPath path = PlanarPath::kExact, const PlanarSplitScratch* split = nullptr);

// The scratch launch_planar_group needs to take this launch split (zeros where no matrix is split
// or the launch does not take the split kernel; a zero scratch still takes it then). Each
// matrix's slices depend only on its own rows, k and the device's multiprocessor count, so an
// output has the same bits alone, grouped, with a residual or SwiGLU.
PlanarSplitNeed planar_split_need(DType format, std::span<const PlanarTarget> targets, std::int64_t k, std::int64_t m,
                                  PlanarEpilogue kind, PlanarPath path);

// launch_embed over a planar matrix of n rows of k elements.
void launch_planar_embed(DType format, const std::uint8_t* data, std::int64_t n, std::int64_t k,
                         const std::int32_t* ids, std::int64_t rows, float* out, std::int64_t ldo, cudaStream_t stream);

// Rows [row0, row0 + rows) of an n x k weight matrix (stored rows of row_bytes, or planar) decoded and rounded to BF16,
// packed: `out` holds rows * k __nv_bfloat16.
void launch_weights_to_bf16(DType format, bool planar, const std::uint8_t* data, std::int64_t row_bytes, std::int64_t n,
                            std::int64_t k, std::int64_t row0, std::int64_t rows, void* out, cudaStream_t stream);

// m rows of k floats (ldx apart) rounded to BF16, packed (m * k __nv_bfloat16 at out).
void launch_floats_to_bf16(const float* x, std::int64_t ldx, std::int64_t m, std::int64_t k, void* out,
                           cudaStream_t stream);

// m rows of k floats (ldx apart) as E4M3 codes with a scale per row (x ~ code * scale; the scale
// is the row's largest |x| / 448): m * k bytes packed at `out`, m floats at `scales`.
void launch_floats_to_fp8_rows(const float* x, std::int64_t ldx, std::int64_t m, std::int64_t k, std::uint8_t* out,
                               float* scales, cudaStream_t stream);
// m rows of k floats (ldx apart; k a multiple of 128) as E4M3 codes with a scale per block of 128
// of a row (x ~ code * scale; the scale is the block's largest |x| / 448, as the rows' above):
// m * k bytes packed at `out`, the scale of row r's block b at scales[b * scales_ld + r] (the
// layout of cuBLASLt's 128-element block scaling: a column of the grid per row).
void launch_floats_to_fp8_blocks(const float* x, std::int64_t ldx, std::int64_t m, std::int64_t k, std::uint8_t* out,
                                 float* scales, std::int64_t scales_ld, cudaStream_t stream);

// out row r = table row ids[r] decoded to float (cols elements).
void launch_embed(DType format, const std::uint8_t* table, std::int64_t row_bytes, std::int64_t cols,
                  const std::int32_t* ids, std::int64_t rows, float* out, std::int64_t ldo, cudaStream_t stream);

// y = x / sqrt(mean(x^2) + eps) * weight, per row of n (slices of n when rows count heads).
void launch_rms_norm(const float* x, std::int64_t ldx, std::int64_t rows, std::int64_t n, const float* weight,
                     float eps, float* y, std::int64_t ldy, cudaStream_t stream);
// launch_rms_norm whose rows are also quantized as launch_floats_to_fp8_rows quantizes y (the
// same bits): n E4M3 codes a row at `codes`, a scale a row at `scales`.
void launch_rms_norm_fp8(const float* x, std::int64_t ldx, std::int64_t rows, std::int64_t n, const float* weight,
                         float eps, float* y, std::int64_t ldy, std::uint8_t* codes, float* scales,
                         cudaStream_t stream);

// A tensor a rope launch rotates: rows ldx apart, n_heads heads each.
struct RopeTarget {
  float* x = nullptr;
  std::int64_t ldx = 0;
  std::int64_t n_heads = 0;
};
struct RopeTargets {  // one, or two (Q and K: a decode fusion) with the same rows and setting
  RopeTarget t[2];
  int count = 1;
};

// Rotates dims [0, rot_dims) of every head of every row of each target in place: pair j of a
// head (normal: (2j, 2j+1), neox: (j, j + rot_dims/2)) by angle positions[row] * inv_freq[j]
// (double), cos/sin scaled by mscale and rounded to float once (as the CPU rope).
void launch_rope(const RopeTargets& targets, std::int64_t rows, std::int64_t head_dim, std::int64_t rot_dims, bool neox,
                 const std::int32_t* positions, const double* inv_freq, double mscale, cudaStream_t stream);

enum class Elementwise : int { kSwiGlu, kGeGluTanh, kAdd, kAddBias, kScale, kSoftCap };
// out = f(a, b) element by element over rows x cols: swiglu / geglu_tanh (a gate, b up), add,
// add_bias (b one row, broadcast), scale and soft_cap (b unused, `scalar` the factor or cap).
void launch_elementwise(Elementwise op, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                        float scalar, std::int64_t rows, std::int64_t cols, float* out, std::int64_t ldo,
                        cudaStream_t stream);

// out row r = x row rows[r] (increasing); `in_place` when out and x overlap (copied in order).
void launch_gather_rows(const float* x, std::int64_t ldx, const std::int32_t* rows, std::int64_t n_rows,
                        std::int64_t cols, float* out, std::int64_t ldo, bool in_place, cudaStream_t stream);

struct AttentionLaunch {
  const float* q = nullptr;
  std::int64_t ldq = 0;
  const float* k = nullptr;  // the step's new K rows (stored first)
  std::int64_t ldk = 0;
  const float* v = nullptr;
  std::int64_t ldv = 0;
  float* out = nullptr;
  std::int64_t ldo = 0;
  std::int64_t n_rows = 0;  // rows of q, k, v, out
  std::int64_t n_heads = 0;
  std::int64_t n_kv_heads = 0;
  std::int64_t head_dim = 0;
  float scale = 0.0f;
  std::int64_t window = 0;
  const AttentionSequenceDesc* sequences = nullptr;  // device
  const std::int32_t* row_sequence = nullptr;        // device: the sequence of each row
  // Device scratch of attention_partials_floats(n_rows, n_heads, head_dim) floats, or null: the
  // rows then attend in one pass each (no split over the sequence).
  float* partials = nullptr;
  // One counter per (row, KV head) of the split path, zero between launches, or null: the last
  // split of a (row, KV head) to finish merges its heads (no merge launch); null: the merge kernel.
  unsigned* split_counters = nullptr;
  // The widest K and V types of the sequences (ops::KvType codes, f32 = 0 the widest; a windowed
  // side counts as f16, its copies' type), which size the split kernel's staged rows.
  int widest_k_type = 0;
  int widest_v_type = 0;
  // The step's rows as f16 copies (n_rows rows of n_kv_heads * head_dim halves each), written by
  // the store for the sequences whose side keeps an exact window, then moved into their rings
  // after attention; null when no sequence of the step has a windowed side.
  std::uint8_t* k_exact = nullptr;
  std::uint8_t* v_exact = nullptr;
  // A rope pair folded into this attention (count > 0): the store kernel rotates each row of these
  // targets (Q and K, in place) as launch_rope would, before it reads K; positions and inverse
  // frequencies in device memory. count 0: Q and K arrive rotated.
  RopeTargets rope{{}, 0};
  std::int64_t rope_head_dim = 0;
  std::int64_t rope_rot_dims = 0;
  bool rope_neox = false;
  const std::int32_t* rope_positions = nullptr;
  const double* rope_inv_freq = nullptr;
  double rope_mscale = 1.0;
  // Whether the staged GQA kernels (split, or one split per row and KV head) may run: their
  // compact K/V head slices need int4 heads of whole 32-value scale groups, which the caller
  // checks. false: every row takes the one-pass kernel per (row, head), partials unused.
  bool staged = true;
  // The first step row of each tile of the tiled prompt attention (kernels/attention_tiled.cu:
  // attention_tile_positions rows of one sequence each, a sequence's rows in tiles from its
  // first), or null: the kernels above. Set by the caller where tiled_attention_applies.
  const std::int32_t* tile_rows = nullptr;
  std::int64_t n_tiles = 0;
};

// Flash-decoding: steps of up to kAttentionSplitMaxRows rows attend in kAttentionSplits parts of
// each row's positions, the query heads of a KV head's group (up to kSplitMaxGroup, head_dim up to
// kSplitMaxHeadDim) together, then merge.
inline constexpr int kAttentionSplits = 8;
inline constexpr std::int64_t kAttentionSplitMaxRows = 64;
inline constexpr std::int64_t kSplitMaxGroup = 8;
inline constexpr std::int64_t kSplitMaxHeadDim = 256;
inline bool attention_group_fits(std::int64_t n_heads, std::int64_t n_kv_heads, std::int64_t head_dim) {
  return n_kv_heads > 0 && n_heads % n_kv_heads == 0 && n_heads / n_kv_heads <= kSplitMaxGroup &&
         head_dim <= kSplitMaxHeadDim;
}
inline bool attention_splits_apply(std::int64_t n_rows, std::int64_t n_heads, std::int64_t n_kv_heads,
                                   std::int64_t head_dim) {
  return n_rows <= kAttentionSplitMaxRows && attention_group_fits(n_heads, n_kv_heads, head_dim);
}
inline std::int64_t attention_partials_floats(std::int64_t n_rows, std::int64_t n_heads, std::int64_t head_dim) {
  return n_rows * n_heads * kAttentionSplits * (head_dim + 2);
}
// The split counters (AttentionLaunch::split_counters) of up to n_rows rows.
inline std::int64_t attention_split_counters(std::int64_t n_rows, std::int64_t n_kv_heads) {
  return n_rows * n_kv_heads;
}

// The tiled prompt attention on the tensor cores (kernels/attention_tiled.cu): steps of more
// rows than the split takes, head_dim 64, 128 or 256, a GQA group of up to 64 heads; scores and
// weights within ~2^-15 of the exact ones (BF16 hi + lo operands, kernels/attention_tiles.hpp),
// so not under batch invariance (the caller's choice). SITSRT_CUDA_MMA_ATTENTION=0 in the
// environment turns it off (to compare).
bool tiled_attention_applies(std::int64_t n_rows, std::int64_t n_heads, std::int64_t n_kv_heads, std::int64_t head_dim);
// Positions of one sequence a tile takes (64 query rows: the positions times the group's heads).
std::int64_t attention_tile_positions(std::int64_t n_heads, std::int64_t n_kv_heads);
// Queues the tiled kernel for a.tile_rows (the rows' K and V stored already); false, with
// nothing queued, where it cannot run (no tiles, another head_dim, its shared memory refused).
bool launch_attention_tiled(const AttentionLaunch& a, cudaStream_t stream);

// Largest head_dim the attention kernels take.
inline constexpr std::int64_t kMaxHeadDim = 512;

// Stores every row's K and V (centered, scaled, rotated and quantized as each side asks), then
// attends each row over its sequence's positions 0 .. its own (or the window's last ones). true
// where the tiled kernel ran.
bool launch_attention(const AttentionLaunch& a, cudaStream_t stream);

// Summaries of `rows` rows of `vocab` float logits (row after row), each with its k best
// (1 <= k <= kMaxSummaryBest, vocab < 2^31, rows <= 65535; the caller checks), into records of summary_record_bytes(k)
// bytes (logit_summary_record.hpp); `chunk_records` is device scratch for rows * logit_summary_chunks(vocab) records of
// that size (kernels/logit_summary.cu).
std::int64_t logit_summary_chunks(std::int64_t vocab);
void launch_logit_summaries(const float* logits, std::int64_t rows, std::int64_t vocab, std::int64_t k,
                            std::byte* chunk_records, std::byte* records, cudaStream_t stream);

}  // namespace sitsrt::cuda
