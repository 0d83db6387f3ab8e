// The CUDA backend's OpKernels: each op's neutral views turned into device pointers and the
// kernels of kernels/launch.hpp queued on the context's stream. Host-side inputs (token ids,
// positions, output rows, block tables, rope frequencies) go up through the staging ring, or
// into a replayed graph's input image (decode_graphs.hpp); the K centering offsets and channel
// scales, constant for an engine's life, are copied once per host array and kept.
#pragma once

#include "backend/backend.hpp"
#include "cuda_backend/cuda_context.hpp"
#include "cuda_backend/device_allocator.hpp"
#include "cuda_backend/kernels/launch.hpp"
#include "cuda_backend/prefill_gemm.hpp"
#include "cuda_backend/staging_ring.hpp"
#include "cuda_backend/step_inputs.hpp"
#include "ops/op_kernels.hpp"

#include <atomic>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace sitsrt::cuda {

// A weight as bound in device memory, in its stored format (rows of row_bytes).
struct DeviceWeight {
  const std::uint8_t* data = nullptr;
  DType format = DType::kF32;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t row_bytes = 0;
  bool planar = false;           // in the planar layout (planar_weights.hpp)
  std::vector<float> host_copy;  // f32 vectors the host needs (rope frequency factors)
  // FP8 E4M3 whose every row has one scale for all its blocks (per-channel checkpoints): the rows'
  // scales, contiguous on the device (the FP8 x FP8 prefill GEMM's); null otherwise.
  const float* channel_scales = nullptr;
  // FP8 E4M3 scaled per 128 x 128 block (and not per channel): the grid of block scales
  // (fp8_block128_scales: ld fp8_block128_scales_ld(cols)) on the device; null otherwise.
  const float* block_scales = nullptr;
};

class CudaKernels final : public ops::OpKernels {
 public:
  // batch_invariant: every row's results independent of its step's other rows (no BF16 GEMM
  // for many-row steps).
  CudaKernels(const CudaContext& context, DeviceAllocator& allocator, StagingRing& staging,
              const std::vector<DeviceWeight>& weights, bool batch_invariant);
  ~CudaKernels() override;
  CudaKernels(const CudaKernels&) = delete;
  CudaKernels& operator=(const CudaKernels&) = delete;

  // How ops reach the device: kEager queues every launch with its inputs through the staging
  // ring; kCapture puts inputs into `inputs` and launches (inside a stream capture: no copy or
  // wait may happen); kFillInputs only fills `inputs` for a replayed graph, launching nothing.
  enum class Mode { kEager, kCapture, kFillInputs };
  void use(StepInputs& inputs, Mode mode) noexcept;
  void use_staging() noexcept;  // kEager through the staging ring
  // Bumped whenever a device constant (K centering offsets, scales) is copied or would be: the
  // addresses a captured graph holds may have changed.
  [[nodiscard]] std::uint64_t constants_generation() const noexcept { return constants_generation_; }

  // Allocates the flash-decoding partials for attention of this shape (the backend's prepare, so
  // the first decode step finds them in place).
  void reserve_attention_partials(const ops::AttentionShape& shape) {
    static_cast<void>(attention_partials(kAttentionSplitMaxRows, shape));
    static_cast<void>(attention_counters(shape));
  }
  // Allocates the f16 copies of a step's K and V rows that windowed caches keep (steps of up to
  // `rows` rows of `width` values), likewise ahead of the first step.
  void reserve_exact_rows(std::int64_t rows, std::int64_t width) {
    static_cast<void>(exact_rows(static_cast<std::size_t>(rows * width) * 2));
  }
  // Whether a matmul of `rows` rows takes the planar decode kernels (not the prefill GEMM).
  [[nodiscard]] bool planar_rows(std::int64_t rows) const noexcept {
    return batch_invariant_ || rows < PrefillGemm::kMinRows;
  }
  // The planar kernels' choice: the tensor-core decode for many-row steps, but under batch
  // invariance (its rows' bits depend on their tile's kernel).
  [[nodiscard]] PlanarPath planar_path() const noexcept {
    return batch_invariant_ ? PlanarPath::kExact : PlanarPath::kTensorCores;
  }
  // The matmuls queued so far by path (read from any thread: atomics).
  [[nodiscard]] KernelPathCounters kernel_paths() const noexcept;
  // A decode fusion's matmuls (backend/decode_fusion.hpp) over planar weights of one format and
  // width, reading x, in one launch; with kAdd also out = y + residual, with kSwiGlu (gate, up)
  // also out = swiglu(gate, up). Each output has the bits of the unfused node.
  struct FusedMatmul {
    std::size_t weight;  // the graph's weight id
    ops::TensorRef y;
  };
  void fused_matmuls(std::span<const FusedMatmul> matmuls, const ops::TensorRef& x, PlanarEpilogue epilogue,
                     const ops::TensorRef* residual, const ops::TensorRef* out);
  // Two rope nodes of one setting (Q and K: a decode fusion) in one launch, as rope() each; with
  // into_attention, no launch: the next attention_batch, whose q and k must be a and b, rotates
  // them in its KV store kernel (the same bits, one launch fewer a layer).
  void rope_pair(const ops::TensorRef& a, std::int64_t a_heads, const ops::TensorRef& b, std::int64_t b_heads,
                 std::span<const std::int32_t> positions, const graph::RopeAttrs& rope,
                 const ops::WeightRef* freq_factors, bool into_attention = false);
  // Forgets a rope pair left for an attention that did not come (the backend calls it before
  // every other node).
  void clear_deferred_rope() noexcept { deferred_rope_.reset(); }
  // Forgets the prefill GEMM's FP8 activations (PrefillGemm::forget_fp8_activations): the
  // backend calls it before every node but matmuls and RMSNorm, and before its writes and copies.
  void forget_fp8_activations() noexcept { prefill_.forget_fp8_activations(); }
  void forget_fp8_activations_under(const ops::TensorRef& written) noexcept;
  // Whether the next rms_norm feeds FP8 x FP8 GEMMs (CudaBackend::prepare marks those nodes): a
  // prompt chunk's norm then also writes its rows as E4M3 for them.
  void next_norm_feeds_fp8(bool yes) noexcept { next_norm_feeds_fp8_ = yes; }
  // Prefill GEMMs that found their FP8 activations in place (from the norm or an earlier GEMM).
  [[nodiscard]] std::uint64_t fp8_activation_reuses() const noexcept { return prefill_.fp8_activation_reuses(); }

  [[nodiscard]] Device device() const noexcept override { return {DeviceKind::kCuda, context_.device()}; }
  void embed(const ops::WeightRef& table, std::span<const std::int32_t> ids, const ops::TensorRef& out) override;
  void rms_norm(const ops::TensorRef& x, const ops::WeightRef& weight, float eps, const ops::TensorRef& y) override;
  void head_rms_norm(const ops::TensorRef& x, std::int64_t n_heads, const ops::WeightRef& weight, float eps,
                     const ops::TensorRef& y) override;
  void matmul(const ops::WeightRef& w, const ops::TensorRef& x, const ops::TensorRef& y) override;
  void rope(const ops::TensorRef& x, std::int64_t n_heads, std::span<const std::int32_t> positions,
            const graph::RopeAttrs& rope, const ops::WeightRef* freq_factors) override;
  void attention_batch(const ops::TensorRef& q, const ops::TensorRef& k, const ops::TensorRef& v,
                       std::span<const ops::AttentionSequenceRef> sequences, const ops::AttentionShape& shape,
                       const ops::TensorRef& out) override;
  void attention(const ops::TensorRef& q, const ops::TensorRef& k, const ops::TensorRef& v, const ops::KvLayerRef& kv,
                 std::int64_t pos0, const ops::AttentionShape& shape, const ops::TensorRef& out) override;
  void swiglu(const ops::TensorRef& gate, const ops::TensorRef& up, const ops::TensorRef& out) override;
  void geglu_tanh(const ops::TensorRef& gate, const ops::TensorRef& up, const ops::TensorRef& out) override;
  void add_bias(const ops::TensorRef& x, const ops::WeightRef& bias, const ops::TensorRef& out) override;
  void scale(const ops::TensorRef& x, float factor, const ops::TensorRef& out) override;
  void soft_cap(const ops::TensorRef& x, float cap, const ops::TensorRef& out) override;
  void add(const ops::TensorRef& a, const ops::TensorRef& b, const ops::TensorRef& out) override;
  void gather_rows(const ops::TensorRef& x, std::span<const std::int32_t> rows, const ops::TensorRef& out) override;

 private:
  [[nodiscard]] const DeviceWeight& weight(const ops::WeightRef& w) const;
  // The device copy of `n` floats the host keeps at `host` (null for null); copied on first use
  // and again when the values change.
  [[nodiscard]] const float* device_floats(const float* host, std::int64_t n);
  // The flash-decoding scratch for a step of `rows` rows (null: the step attends in one pass).
  [[nodiscard]] float* attention_partials(std::int64_t rows, const ops::AttentionShape& shape);
  // The split path's counters (AttentionLaunch::split_counters), zero between launches (null
  // while capturing a graph that would need them to grow).
  [[nodiscard]] unsigned* attention_counters(const ops::AttentionShape& shape);
  // Grows scratch that captured graphs hold the address of (data, bytes) to `need` bytes; false,
  // with nothing changed, while capturing (the capture is then discarded).
  bool grow_scratch(std::byte*& data, std::size_t& bytes, std::size_t need, const char* what);
  // The split tensor-core decode's scratch for a planar launch (kernels/planar_mma_split.cu),
  // grown to its need; null outside the tensor-core path and while capturing a graph that would
  // need it to grow (the launch takes the unsplit kernels; the capture is discarded).
  [[nodiscard]] const PlanarSplitScratch* split_scratch(DType format, std::span<const PlanarTarget> targets,
                                                        std::int64_t k, std::int64_t m, PlanarEpilogue kind);
  // The step's exact K copies, then (exact_bytes_ / 2 on) its V copies: at least side_bytes each
  // (null while capturing a graph that would need them to grow).
  [[nodiscard]] std::byte* exact_rows(std::size_t side_bytes);
  // The inverse frequencies and magnitude scale of a rope setting, computed once (pow per pair).
  struct RopeFrequencies {
    graph::RopeAttrs attrs;
    const float* factors = nullptr;  // the frequency factors' host copy, or null
    std::vector<double> inv_freq;
    double mscale = 1.0;
  };
  [[nodiscard]] const RopeFrequencies& rope_frequencies(const graph::RopeAttrs& r, const ops::WeightRef* freq_factors);
  // Uploads the rope inputs and launches the rope kernel; with `defer`, records the launch's
  // arguments in deferred_rope_ instead.
  void rope_targets(const RopeTargets& targets, std::int64_t rows, std::span<const std::int32_t> positions,
                    const graph::RopeAttrs& r, const ops::WeightRef* freq_factors, bool defer = false);
  struct DeferredRope {
    RopeTargets targets;
    std::int64_t rows = 0;
    std::int64_t head_dim = 0;
    std::int64_t rot_dims = 0;
    bool neox = false;
    const std::int32_t* positions = nullptr;  // device
    const double* inv_freq = nullptr;         // device
    double mscale = 1.0;
  };
  std::optional<DeferredRope> deferred_rope_;
  void elementwise(Elementwise op, const ops::TensorRef& a, const float* b, std::int64_t ldb, float scalar,
                   const ops::TensorRef& out);

  const CudaContext& context_;
  DeviceAllocator& allocator_;
  StagingRing& staging_;
  StepInputs* inputs_;
  bool launching_ = true;
  bool capturing_ = false;
  std::uint64_t constants_generation_ = 0;
  const std::vector<DeviceWeight>& weights_;
  bool batch_invariant_;
  PrefillGemm prefill_;
  bool next_norm_feeds_fp8_ = false;
  std::atomic<std::uint64_t> prefill_fp8_{0}, prefill_bf16_{0}, decode_tensor_cores_{0}, decode_cuda_cores_{0};
  std::atomic<std::uint64_t> prefill_fp8_blocks_{0};
  std::atomic<std::uint64_t> attention_tiled_{0}, attention_rows_{0};
  struct Constant {
    std::vector<float> values;
    std::byte* device = nullptr;
  };
  std::unordered_map<const float*, Constant> constants_;
  std::deque<RopeFrequencies> rope_cache_;  // deque: references stay valid as it grows
  RopeFrequencies rope_scratch_;
  std::vector<std::byte> blob_;    // attention's descriptors, row map and block tables, reused
  std::byte* partials_ = nullptr;  // attention_partials
  std::size_t partials_bytes_ = 0;
  std::byte* counters_ = nullptr;  // attention_counters
  std::size_t counters_bytes_ = 0;
  std::byte* split_partials_ = nullptr;  // split_scratch
  std::size_t split_partials_bytes_ = 0;
  std::byte* split_counters_ = nullptr;
  std::size_t split_counters_bytes_ = 0;
  PlanarSplitScratch split_;
  std::byte* exact_ = nullptr;   // exact_rows
  std::size_t exact_bytes_ = 0;  // K copies, then V copies: half each
};

}  // namespace sitsrt::cuda
