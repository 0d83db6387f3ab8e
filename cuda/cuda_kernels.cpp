#include "cuda_backend/cuda_kernels.hpp"

#include "core/check.hpp"
#include "core/kv_int4.hpp"
#include "cpu/attention/attention.hpp"  // kMaxRecentWindow
#include "cpu/elementwise/rope.hpp"
#include "cuda_backend/cuda_check.hpp"

#include <array>
#include <cstring>
#include <utility>

namespace sitsrt::cuda {
namespace {

float* f32(const ops::TensorRef& t) {
  return reinterpret_cast<float*>(t.data);
}

template <typename T>
std::span<const std::byte> bytes_of(std::span<const T> values) {
  return std::as_bytes(values);
}

std::size_t align16(std::size_t n) {
  return (n + 15) / 16 * 16;
}

bool power_of_two(std::int64_t n) {
  return n > 0 && (n & (n - 1)) == 0;
}

}  // namespace

CudaKernels::CudaKernels(const CudaContext& context, DeviceAllocator& allocator, StagingRing& staging,
                         const std::vector<DeviceWeight>& weights, bool batch_invariant)
    : context_(context),
      allocator_(allocator),
      staging_(staging),
      inputs_(&staging),
      weights_(weights),
      batch_invariant_(batch_invariant),
      prefill_(context, allocator) {
  prefill_.keep_fp8_activations(true);  // the backend forgets them wherever x may change
}

void CudaKernels::forget_fp8_activations_under(const ops::TensorRef& written) noexcept {
  prefill_.forget_fp8_activations_under(reinterpret_cast<const float*>(written.data), written.ld, written.rows,
                                        written.cols);
}

void CudaKernels::use(StepInputs& inputs, Mode mode) noexcept {
  inputs_ = &inputs;
  launching_ = mode != Mode::kFillInputs;
  capturing_ = mode == Mode::kCapture;
  prefill_.forget_fp8_activations();  // a replayed graph writes what the host does not see
}

void CudaKernels::use_staging() noexcept {
  use(staging_, Mode::kEager);
}

bool CudaKernels::grow_scratch(std::byte*& data, std::size_t& bytes, std::size_t need, const char* what) {
  if (need <= bytes) return true;
  ++constants_generation_;  // a captured graph holding the old address is stale
  if (capturing_) return false;
  if (data != nullptr) {
    context_.synchronize();
    allocator_.deallocate(data, bytes);
    data = nullptr;
    bytes = 0;
  }
  data = allocator_.allocate(need, what);
  bytes = need;
  return true;
}

float* CudaKernels::attention_partials(std::int64_t rows, const ops::AttentionShape& shape) {
  if (!attention_splits_apply(rows, shape.n_heads, shape.n_kv_heads, shape.head_dim)) return nullptr;
  // Sized once for the largest step that splits, so graphs keep one address.
  const auto floats =
      static_cast<std::size_t>(attention_partials_floats(kAttentionSplitMaxRows, shape.n_heads, shape.head_dim));
  if (!grow_scratch(partials_, partials_bytes_, floats * sizeof(float), "attention split partials")) return nullptr;
  return reinterpret_cast<float*>(partials_);
}

unsigned* CudaKernels::attention_counters(const ops::AttentionShape& shape) {
  // One per (row, KV head) of the largest step that splits; zero between launches (the splits
  // reset theirs), so made zero once, when allocated.
  const auto words = static_cast<std::size_t>(attention_split_counters(kAttentionSplitMaxRows, shape.n_kv_heads));
  const std::size_t had = counters_bytes_;
  if (!grow_scratch(counters_, counters_bytes_, words * sizeof(unsigned), "attention split counters")) return nullptr;
  if (counters_bytes_ != had) SITSRT_CUDA_CHECK(cudaMemsetAsync(counters_, 0, counters_bytes_, context_.stream()));
  return reinterpret_cast<unsigned*>(counters_);
}

const PlanarSplitScratch* CudaKernels::split_scratch(DType format, std::span<const PlanarTarget> targets,
                                                     std::int64_t k, std::int64_t m, PlanarEpilogue kind) {
  // (single-row decode steps never take it: no need to size anything)
  if (planar_path() != PlanarPath::kTensorCores || m < kMmaMinRows) return nullptr;
  const PlanarSplitNeed need = planar_split_need(format, targets, k, m, kind, PlanarPath::kTensorCores);
  const std::size_t had = split_counters_bytes_;
  if (!grow_scratch(split_partials_, split_partials_bytes_,
                    static_cast<std::size_t>(need.partial_floats) * sizeof(float), "split decode partials") ||
      !grow_scratch(split_counters_, split_counters_bytes_, static_cast<std::size_t>(need.counters) * sizeof(unsigned),
                    "split decode counters")) {
    return nullptr;
  }
  // zero between launches (each launch leaves its counters zero), so made zero once, when allocated
  if (split_counters_bytes_ != had) {
    SITSRT_CUDA_CHECK(cudaMemsetAsync(split_counters_, 0, split_counters_bytes_, context_.stream()));
  }
  split_ = {reinterpret_cast<float*>(split_partials_), static_cast<std::int64_t>(split_partials_bytes_ / sizeof(float)),
            reinterpret_cast<unsigned*>(split_counters_),
            static_cast<std::int64_t>(split_counters_bytes_ / sizeof(unsigned))};
  return &split_;
}

std::byte* CudaKernels::exact_rows(std::size_t side_bytes) {
  if (!grow_scratch(exact_, exact_bytes_, 2 * side_bytes, "exact recent-window rows")) return nullptr;
  return exact_;
}

CudaKernels::~CudaKernels() {
  for (auto [data, bytes] : {std::pair{partials_, partials_bytes_}, std::pair{counters_, counters_bytes_},
                             std::pair{split_partials_, split_partials_bytes_},
                             std::pair{split_counters_, split_counters_bytes_}, std::pair{exact_, exact_bytes_}}) {
    if (data != nullptr) allocator_.deallocate(data, bytes);
  }
  for (auto& [host, constant] : constants_) {
    allocator_.deallocate(constant.device, constant.values.size() * sizeof(float));
  }
}

const DeviceWeight& CudaKernels::weight(const ops::WeightRef& w) const {
  if (static_cast<std::size_t>(w.id) >= weights_.size()) {
    raise(ErrorCode::kInternal, "cuda kernels: weight #{} is not bound ({} are)", w.id, weights_.size());
  }
  return weights_[static_cast<std::size_t>(w.id)];
}

const float* CudaKernels::device_floats(const float* host, std::int64_t n) {
  if (host == nullptr) return nullptr;
  Constant& c = constants_[host];
  const auto count = static_cast<std::size_t>(n);
  if (c.device != nullptr && c.values.size() == count &&
      std::memcmp(c.values.data(), host, count * sizeof(float)) == 0) {
    return reinterpret_cast<const float*>(c.device);
  }
  ++constants_generation_;         // a captured graph holding the old address is stale
  if (capturing_) return nullptr;  // no copy inside a capture: the caller drops the graph
  if (c.device != nullptr) {
    context_.synchronize();  // queued kernels may still read the old copy
    allocator_.deallocate(c.device, c.values.size() * sizeof(float));
    c.device = nullptr;
  }
  c.values.assign(host, host + count);
  c.device = allocator_.allocate(count * sizeof(float), "K centering constants");
  SITSRT_CUDA_CHECK(
      cudaMemcpyAsync(c.device, c.values.data(), count * sizeof(float), cudaMemcpyHostToDevice, context_.stream()));
  return reinterpret_cast<const float*>(c.device);
}

const CudaKernels::RopeFrequencies& CudaKernels::rope_frequencies(const graph::RopeAttrs& r,
                                                                  const ops::WeightRef* freq_factors) {
  // The CPU's frequency math (double), so both backends rotate by the same angles.
  const float* factors = nullptr;
  if (freq_factors != nullptr) {
    const DeviceWeight& f = weight(*freq_factors);
    if (static_cast<std::int64_t>(f.host_copy.size()) < r.rot_dims / 2) {
      raise(ErrorCode::kInternal, "rope: frequency factors #{} hold {} values, {} needed", freq_factors->id,
            f.host_copy.size(), r.rot_dims / 2);
    }
    factors = f.host_copy.data();
  }
  for (const RopeFrequencies& cached : rope_cache_) {  // a model has one or two rope settings
    if (cached.attrs == r && cached.factors == factors) return cached;
  }
  cpu::RopeParams params{r.head_dim,   r.rot_dims, r.freq_base,
                         r.freq_scale, factors,    r.neox ? cpu::RopeStyle::kNeox : cpu::RopeStyle::kNormal};
  if (r.scaling == graph::RopeScaling::kYarn) {
    params.yarn = {true, r.original_context, r.yarn_beta_fast, r.yarn_beta_slow, r.yarn_attn_factor};
  } else if (r.scaling == graph::RopeScaling::kLlama3) {
    params.llama3 = {true, r.llama3_factor, r.llama3_low_freq_factor, r.llama3_high_freq_factor, r.original_context};
  }
  RopeFrequencies f{r, factors, std::vector<double>(static_cast<std::size_t>(r.rot_dims / 2)), 1.0};
  cpu::rope_inverse_frequencies(params, f.inv_freq.data(), &f.mscale);
  if (rope_cache_.size() >= 16) {  // attributes that never compare equal (a NaN) are not kept
    rope_scratch_ = std::move(f);
    return rope_scratch_;
  }
  rope_cache_.push_back(std::move(f));
  return rope_cache_.back();
}

void CudaKernels::embed(const ops::WeightRef& table, std::span<const std::int32_t> ids, const ops::TensorRef& out) {
  const DeviceWeight& w = weight(table);
  for (const std::int32_t id : ids) {
    if (id < 0 || id >= w.rows)
      raise(ErrorCode::kInvalidArgument, "embed: token id {} outside the vocabulary of {}", id, w.rows);
  }
  const auto* device_ids = reinterpret_cast<const std::int32_t*>(inputs_->upload(bytes_of(ids)));
  const auto count = static_cast<std::int64_t>(ids.size());
  if (!launching_) return;
  if (w.planar) {
    launch_planar_embed(w.format, w.data, w.rows, w.cols, device_ids, count, f32(out), out.ld, context_.stream());
  } else {
    launch_embed(w.format, w.data, w.row_bytes, w.cols, device_ids, count, f32(out), out.ld, context_.stream());
  }
  SITSRT_CUDA_CHECK_LAUNCH("embed kernel");
}

void CudaKernels::rms_norm(const ops::TensorRef& x, const ops::WeightRef& w, float eps, const ops::TensorRef& y) {
  const bool feeds_fp8 = std::exchange(next_norm_feeds_fp8_, false);  // this norm's, whatever happens
  if (!launching_) return;
  prefill_.forget_fp8_activations_under(f32(y), y.ld, y.rows, y.cols);
  const auto* norm = reinterpret_cast<const float*>(weight(w).data);
  // A prompt chunk's norm in front of FP8 x FP8 GEMMs: its rows quantized to E4M3 as the GEMM
  // would quantize them (the same bits), which the GEMMs reading y then find in place. Eager
  // steps only (the GEMM's buffers are allocated on first use).
  if (feeds_fp8 && !batch_invariant_ && !capturing_ && y.rows >= PrefillGemm::kMinRows) {
    const PrefillGemm::Fp8Rows rows = prefill_.fp8_activation_buffers(y.rows, y.cols);
    if (rows.codes != nullptr) {
      launch_rms_norm_fp8(f32(x), x.ld, x.rows, x.cols, norm, eps, f32(y), y.ld, rows.codes, rows.scales,
                          context_.stream());
      SITSRT_CUDA_CHECK_LAUNCH("rms_norm + fp8 kernel");
      prefill_.fp8_activations_written(f32(y), y.ld, y.rows, y.cols);  // queued: now they are y's
      return;
    }
  }
  launch_rms_norm(f32(x), x.ld, x.rows, x.cols, norm, eps, f32(y), y.ld, context_.stream());
  SITSRT_CUDA_CHECK_LAUNCH("rms_norm kernel");
}

void CudaKernels::head_rms_norm(const ops::TensorRef& x, std::int64_t n_heads, const ops::WeightRef& w, float eps,
                                const ops::TensorRef& y) {
  const std::int64_t head_dim = w.cols;
  const auto* norm = reinterpret_cast<const float*>(weight(w).data);
  if (!launching_) return;
  if (x.ld == x.cols && y.ld == y.cols) {  // contiguous rows: one launch over rows * n_heads slices
    launch_rms_norm(f32(x), head_dim, x.rows * n_heads, head_dim, norm, eps, f32(y), head_dim, context_.stream());
  } else {
    for (std::int64_t r = 0; r < x.rows; ++r) {
      launch_rms_norm(f32(x) + r * x.ld, head_dim, n_heads, head_dim, norm, eps, f32(y) + r * y.ld, head_dim,
                      context_.stream());
    }
  }
  SITSRT_CUDA_CHECK_LAUNCH("head_rms_norm kernel");
}

void CudaKernels::matmul(const ops::WeightRef& w, const ops::TensorRef& x, const ops::TensorRef& y) {
  const DeviceWeight& dw = weight(w);
  if (!launching_) return;
  // Prompt chunks on the tensor cores (not under batch invariance: rows would round as their
  // step's row count decides); the decode kernels where cuBLASLt is unavailable.
  // y overwritten: FP8 activations kept for rows under it are no longer theirs.
  prefill_.forget_fp8_activations_under(f32(y), y.ld, y.rows, y.cols);
  if (!batch_invariant_ && x.rows >= PrefillGemm::kMinRows && prefill_.run(dw, f32(x), x.ld, x.rows, f32(y), y.ld)) {
    (prefill_.last_path() == PrefillGemm::Path::kBf16 ? prefill_bf16_ : prefill_fp8_)
        .fetch_add(1, std::memory_order_relaxed);
    if (prefill_.last_path() == PrefillGemm::Path::kFp8Blocks)
      prefill_fp8_blocks_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const bool queued = x.rows > 0 && dw.rows > 0;  // nothing is launched for an empty matmul
  if (dw.planar) {
    const PlanarTarget target{dw.data, dw.rows, f32(y), y.ld};
    const PlanarSplitScratch* split = split_scratch(dw.format, {&target, 1}, dw.cols, x.rows, PlanarEpilogue::kNone);
    const bool tensor_cores = launch_planar_matmul(dw.format, dw.data, dw.rows, dw.cols, f32(x), x.ld, x.rows, f32(y),
                                                   y.ld, context_.stream(), planar_path(), split);
    if (queued) (tensor_cores ? decode_tensor_cores_ : decode_cuda_cores_).fetch_add(1, std::memory_order_relaxed);
  } else {
    if (queued) decode_cuda_cores_.fetch_add(1, std::memory_order_relaxed);
    launch_matmul(dw.format, dw.data, dw.row_bytes, dw.rows, dw.cols, f32(x), x.ld, x.rows, f32(y), y.ld,
                  context_.stream());
  }
  SITSRT_CUDA_CHECK_LAUNCH("matmul kernel");
}

KernelPathCounters CudaKernels::kernel_paths() const noexcept {
  return {prefill_fp8_.load(std::memory_order_relaxed),
          prefill_bf16_.load(std::memory_order_relaxed),
          decode_tensor_cores_.load(std::memory_order_relaxed),
          decode_cuda_cores_.load(std::memory_order_relaxed),
          attention_tiled_.load(std::memory_order_relaxed),
          attention_rows_.load(std::memory_order_relaxed),
          prefill_.fp8_activation_reuses(),
          prefill_fp8_blocks_.load(std::memory_order_relaxed)};
}

void CudaKernels::fused_matmuls(std::span<const FusedMatmul> matmuls, const ops::TensorRef& x, PlanarEpilogue epilogue,
                                const ops::TensorRef* residual, const ops::TensorRef* out) {
  if (!launching_ || matmuls.empty()) return;
  prefill_.forget_fp8_activations();
  std::array<PlanarTarget, kMaxPlanarTargets> targets{};
  const std::size_t count = matmuls.size();
  const bool gated = epilogue == PlanarEpilogue::kSwiGlu || epilogue == PlanarEpilogue::kGeGlu;
  if (count > kMaxPlanarTargets || (gated && count != 2) ||
      (epilogue == PlanarEpilogue::kAdd && (count != 1 || residual == nullptr || out == nullptr))) {
    raise(ErrorCode::kInternal, "cuda: a fused launch of {} matmuls with epilogue {}", count,
          static_cast<int>(epilogue));
  }
  const DeviceWeight* first = nullptr;
  for (std::size_t i = 0; i < count; ++i) {
    const DeviceWeight& w = weights_.at(matmuls[i].weight);
    if (first == nullptr) first = &w;
    if (!w.planar || w.format != first->format || w.cols != first->cols || w.cols != x.cols ||
        matmuls[i].y.cols != w.rows || matmuls[i].y.rows != x.rows) {
      raise(ErrorCode::kInternal, "cuda: a fused matmul of weight #{} does not fit its group", matmuls[i].weight);
    }
    targets[i] = {w.data, w.rows, f32(matmuls[i].y), matmuls[i].y.ld};
  }
  // The epilogue's operands: the outputs' shape (SwiGLU / GeGLU: gate and up alike).
  const auto same_shape = [&](const ops::TensorRef* t) {
    return t != nullptr && t->rows == x.rows && t->cols == matmuls[0].y.cols;
  };
  if ((gated && (matmuls[1].y.cols != matmuls[0].y.cols || !same_shape(out))) ||
      (epilogue == PlanarEpilogue::kAdd && (!same_shape(residual) || !same_shape(out)))) {
    raise(ErrorCode::kInternal, "cuda: a fused matmul epilogue's operands do not match its outputs");
  }
  PlanarEpilogueArgs e;
  e.kind = epilogue;
  if (residual != nullptr) {
    e.residual = f32(*residual);
    e.ld_residual = residual->ld;
  }
  if (out != nullptr) {
    e.out = f32(*out);
    e.ld_out = out->ld;
  }
  const std::span<const PlanarTarget> group{targets.data(), count};
  const PlanarSplitScratch* split = split_scratch(first->format, group, first->cols, x.rows, epilogue);
  const bool tensor_cores = launch_planar_group(first->format, group, first->cols, f32(x), x.ld, x.rows, e,
                                                context_.stream(), planar_path(), split);
  if (x.rows > 0)
    (tensor_cores ? decode_tensor_cores_ : decode_cuda_cores_).fetch_add(count, std::memory_order_relaxed);
  SITSRT_CUDA_CHECK_LAUNCH("fused planar matmul kernel");
}

void CudaKernels::rope(const ops::TensorRef& x, std::int64_t n_heads, std::span<const std::int32_t> positions,
                       const graph::RopeAttrs& r, const ops::WeightRef* freq_factors) {
  RopeTargets targets;
  targets.t[0] = {f32(x), x.ld, n_heads};
  rope_targets(targets, x.rows, positions, r, freq_factors);
}

void CudaKernels::rope_pair(const ops::TensorRef& a, std::int64_t a_heads, const ops::TensorRef& b,
                            std::int64_t b_heads, std::span<const std::int32_t> positions, const graph::RopeAttrs& r,
                            const ops::WeightRef* freq_factors, bool into_attention) {
  if (a.rows != b.rows) raise(ErrorCode::kInternal, "rope pair: {} and {} rows", a.rows, b.rows);
  if (a.cols != a_heads * r.head_dim || b.cols != b_heads * r.head_dim) {
    raise(ErrorCode::kInvalidArgument, "rope pair: {} and {} columns for {} and {} heads of {}", a.cols, b.cols,
          a_heads, b_heads, r.head_dim);
  }
  RopeTargets targets;
  targets.t[0] = {f32(a), a.ld, a_heads};
  targets.t[1] = {f32(b), b.ld, b_heads};
  targets.count = 2;
  rope_targets(targets, a.rows, positions, r, freq_factors, into_attention);
}

void CudaKernels::rope_targets(const RopeTargets& targets, std::int64_t rows, std::span<const std::int32_t> positions,
                               const graph::RopeAttrs& r, const ops::WeightRef* freq_factors, bool defer) {
  deferred_rope_.reset();
  if (r.head_dim <= 0 || r.rot_dims < 0 || r.rot_dims > r.head_dim || r.rot_dims % 2 != 0) {
    raise(ErrorCode::kInvalidArgument, "rope: bad shape head_dim={} rot_dims={}", r.head_dim, r.rot_dims);
  }
  if (!(r.freq_base > 0.0f)) raise(ErrorCode::kInvalidArgument, "rope: freq_base {} <= 0", r.freq_base);
  if (r.scaling == graph::RopeScaling::kYarn && !(r.original_context > 0.0f && r.freq_scale > 0.0f)) {
    raise(ErrorCode::kInvalidArgument, "rope: YaRN needs original_context > 0 and freq_scale > 0");
  }
  if (static_cast<std::int64_t>(positions.size()) != rows) {
    raise(ErrorCode::kInvalidArgument, "rope: {} positions for {} rows", positions.size(), rows);
  }
  const RopeFrequencies& f = rope_frequencies(r, freq_factors);
  const std::vector<double>& inv_freq = f.inv_freq;
  const double mscale = f.mscale;
  if (inv_freq.empty() || rows == 0) return;
  // One slot for both (see StepInputs): the positions, then the frequencies 8-aligned.
  const std::size_t positions_bytes = align16(positions.size_bytes());
  const StepInputs::Slot slot = inputs_->reserve(positions_bytes + inv_freq.size() * sizeof(double));
  std::memcpy(slot.host, positions.data(), positions.size_bytes());
  std::memcpy(slot.host + positions_bytes, inv_freq.data(), inv_freq.size() * sizeof(double));
  inputs_->commit(slot);
  const auto* device_positions = reinterpret_cast<const std::int32_t*>(slot.device);
  const auto* device_freq = reinterpret_cast<const double*>(slot.device + positions_bytes);
  if (defer) {  // the same slot in every mode, so replays find the inputs where the capture put them
    deferred_rope_ = DeferredRope{targets, rows, r.head_dim, r.rot_dims, r.neox, device_positions, device_freq, mscale};
    return;
  }
  if (!launching_) return;
  launch_rope(targets, rows, r.head_dim, r.rot_dims, r.neox, device_positions, device_freq, mscale, context_.stream());
  SITSRT_CUDA_CHECK_LAUNCH("rope kernel");
}

void CudaKernels::attention_batch(const ops::TensorRef& q, const ops::TensorRef& k, const ops::TensorRef& v,
                                  std::span<const ops::AttentionSequenceRef> sequences,
                                  const ops::AttentionShape& shape, const ops::TensorRef& out) {
  const std::int64_t width = shape.n_kv_heads * shape.head_dim;
  if (shape.head_dim > kMaxHeadDim) {
    raise(ErrorCode::kUnsupported, "cuda attention: head_dim {} is above the {} the kernels take", shape.head_dim,
          kMaxHeadDim);
  }
  if (width * static_cast<std::int64_t>(sizeof(float)) > 48 * 1024) {
    raise(ErrorCode::kUnsupported, "cuda attention: {} KV heads of {} are wider than the kernels take",
          shape.n_kv_heads, shape.head_dim);
  }
  // One blob: the descriptors, the sequence of every row, the block tables they point into.
  const std::size_t n_seq = sequences.size();
  const std::size_t desc_bytes = align16(n_seq * sizeof(AttentionSequenceDesc));
  const std::size_t rows_bytes = align16(static_cast<std::size_t>(q.rows) * sizeof(std::int32_t));
  std::size_t table_entries = 0;
  for (const ops::AttentionSequenceRef& s : sequences) {
    const bool rotated = s.kv.k_rotated || s.kv.v_rotated;
    if (rotated && !power_of_two(shape.head_dim)) {
      raise(ErrorCode::kUnsupported, "cuda attention: a rotated cache needs a power-of-two head_dim, not {}",
            shape.head_dim);
    }
    table_entries += s.kv.block_table.size();
  }
  // The tiled prompt attention's tiles (each a run of one sequence's rows) after the tables: in
  // eager steps only, so captured graphs and their refills lay the slot out alike.
  const bool tiled = !batch_invariant_ && launching_ && !capturing_ &&
                     tiled_attention_applies(q.rows, shape.n_heads, shape.n_kv_heads, shape.head_dim);
  std::int64_t n_tiles = 0;
  const std::int64_t tile_positions = tiled ? attention_tile_positions(shape.n_heads, shape.n_kv_heads) : 1;
  if (tiled) {
    for (const ops::AttentionSequenceRef& s : sequences) n_tiles += (s.n_rows + tile_positions - 1) / tile_positions;
  }
  const StepInputs::Slot slot = inputs_->reserve(
      desc_bytes + rows_bytes + (table_entries + static_cast<std::size_t>(n_tiles)) * sizeof(std::int32_t));
  blob_.assign(slot.bytes, std::byte{0});
  auto* descs = reinterpret_cast<AttentionSequenceDesc*>(blob_.data());
  auto* row_sequence = reinterpret_cast<std::int32_t*>(blob_.data() + desc_bytes);
  std::size_t table_at = desc_bytes + rows_bytes;
  bool k_windowed = false, v_windowed = false;
  for (std::size_t i = 0; i < n_seq; ++i) {
    const ops::AttentionSequenceRef& s = sequences[i];
    const ops::KvLayerRef& kv = s.kv;
    if (kv.recent_window < 0 || kv.recent_window > cpu::kMaxRecentWindow || kv.exact_from < 0) {
      raise(ErrorCode::kInvalidArgument, "cuda attention: recent window {} (0 .. {}) from position {}",
            kv.recent_window, cpu::kMaxRecentWindow, kv.exact_from);
    }
    if (kv.k_head_major || kv.v_head_major) {  // its pools are row-major (BackendInfo::head_major_kv)
      raise(ErrorCode::kUnsupported,
            "cuda attention: head-major KV blocks are a CPU layout; the CUDA kernels read "
            "row-major blocks");
    }
    AttentionSequenceDesc& d = descs[i];
    d.k = reinterpret_cast<std::uint8_t*>(kv.k);
    d.v = reinterpret_cast<std::uint8_t*>(kv.v);
    d.k_row_bytes = static_cast<std::int64_t>(kv.k_row_bytes);
    d.v_row_bytes = static_cast<std::int64_t>(kv.v_row_bytes);
    d.block_table = reinterpret_cast<const std::int32_t*>(slot.device + table_at);
    d.k_offset = device_floats(kv.k_offset, width);
    d.k_scale = device_floats(kv.k_scale, width);
    d.block_size = kv.block_size;
    d.row_begin = s.row_begin;
    d.n_rows = s.n_rows;
    d.pos0 = s.pos0;
    d.k_type = static_cast<int>(kv.k_type);
    d.v_type = static_cast<int>(kv.v_type);
    d.k_rotated = kv.k_rotated ? 1 : 0;
    d.v_rotated = kv.v_rotated ? 1 : 0;
    // A side keeps exact copies when it is quantized and the cache has a window (its ring).
    const auto windowed = [&](ops::KvType type, std::byte* ring) {
      const bool quantized = type == ops::KvType::kInt8 || type == ops::KvType::kInt4;
      if (quantized && kv.recent_window > 0 && ring == nullptr) {
        raise(ErrorCode::kInvalidArgument, "cuda attention: a recent window of {} positions without its f16 rows",
              kv.recent_window);
      }
      return quantized && kv.recent_window > 0 ? reinterpret_cast<std::uint8_t*>(ring) : nullptr;
    };
    d.k_recent = windowed(kv.k_type, kv.k_recent);
    d.v_recent = windowed(kv.v_type, kv.v_recent);
    d.recent_window = kv.recent_window;
    d.exact_from = kv.exact_from;
    k_windowed = k_windowed || d.k_recent != nullptr;
    v_windowed = v_windowed || d.v_recent != nullptr;
    std::memcpy(blob_.data() + table_at, kv.block_table.data(), kv.block_table.size_bytes());
    table_at += kv.block_table.size_bytes();
    for (std::int64_t r = 0; r < s.n_rows; ++r) row_sequence[s.row_begin + r] = static_cast<std::int32_t>(i);
  }
  const std::size_t tiles_at = table_at;
  for (const ops::AttentionSequenceRef& s : sequences) {
    for (std::int64_t r = 0; tiled && r < s.n_rows; r += tile_positions) {
      const auto first = static_cast<std::int32_t>(s.row_begin + r);
      std::memcpy(blob_.data() + table_at, &first, sizeof(first));
      table_at += sizeof(first);
    }
  }
  std::memcpy(slot.host, blob_.data(), slot.bytes);
  inputs_->commit(slot);

  AttentionLaunch a;
  a.q = f32(q);
  a.ldq = q.ld;
  a.k = f32(k);
  a.ldk = k.ld;
  a.v = f32(v);
  a.ldv = v.ld;
  a.out = f32(out);
  a.ldo = out.ld;
  a.n_rows = q.rows;
  a.n_heads = shape.n_heads;
  a.n_kv_heads = shape.n_kv_heads;
  a.head_dim = shape.head_dim;
  a.scale = shape.scale;
  a.window = shape.window;
  a.sequences = reinterpret_cast<const AttentionSequenceDesc*>(slot.device);
  a.row_sequence = reinterpret_cast<const std::int32_t*>(slot.device + desc_bytes);
  if (n_tiles > 0) {
    a.tile_rows = reinterpret_cast<const std::int32_t*>(slot.device + tiles_at);
    a.n_tiles = n_tiles;
  }
  if (deferred_rope_) {  // the rope pair of this attention's Q and K, rotated by its store kernel
    const DeferredRope rope = *deferred_rope_;
    deferred_rope_.reset();
    if (rope.targets.count != 2 || rope.targets.t[0].x != a.q || rope.targets.t[1].x != a.k || rope.rows != q.rows) {
      raise(ErrorCode::kInternal, "cuda attention: a rope pair left for it rotates other rows than its Q and K");
    }
    a.rope = rope.targets;
    a.rope_head_dim = rope.head_dim;
    a.rope_rot_dims = rope.rot_dims;
    a.rope_neox = rope.neox;
    a.rope_positions = rope.positions;
    a.rope_inv_freq = rope.inv_freq;
    a.rope_mscale = rope.mscale;
  }
  if (!launching_) return;
  a.widest_k_type = a.widest_v_type = 3;  // int4, the narrowest: lowered to each sequence's
  bool int4 = false;
  for (const ops::AttentionSequenceRef& s : sequences) {
    a.widest_k_type = std::min(a.widest_k_type, static_cast<int>(s.kv.k_type));
    a.widest_v_type = std::min(a.widest_v_type, static_cast<int>(s.kv.v_type));
    int4 = int4 || s.kv.k_type == ops::KvType::kInt4 || s.kv.v_type == ops::KvType::kInt4;
  }
  // A windowed side's exact chunks are staged as f16 rows; the step's copies live in scratch.
  if (k_windowed) a.widest_k_type = std::min(a.widest_k_type, static_cast<int>(ops::KvType::kF16));
  if (v_windowed) a.widest_v_type = std::min(a.widest_v_type, static_cast<int>(ops::KvType::kF16));
  if (k_windowed || v_windowed) {
    std::byte* rows = exact_rows(static_cast<std::size_t>(q.rows * width) * 2);
    if (rows != nullptr) {
      a.k_exact = reinterpret_cast<std::uint8_t*>(rows);
      a.v_exact = reinterpret_cast<std::uint8_t*>(rows + exact_bytes_ / 2);
    }
  }
  // The staged kernels copy one head's slice of each row: int4 scale codes (one per 32 values)
  // belong to one head only when heads are whole groups.
  a.staged = !int4 || shape.head_dim % kv_int4::kGroup == 0;
  // Under batch invariance every row takes one kernel whatever its step's size: the staged one as
  // one split per row (flash-decoding's splits and merge sum in another order, and only steps of
  // up to 64 rows take them, so a row's bits would depend on the rows beside it).
  if (a.staged && !batch_invariant_) a.partials = attention_partials(q.rows, shape);
  if (a.partials != nullptr) a.split_counters = attention_counters(shape);  // null: the merge kernel runs
  const bool tiled_ran = launch_attention(a, context_.stream());
  SITSRT_CUDA_CHECK_LAUNCH("attention kernels");
  if (q.rows > kAttentionSplitMaxRows)
    (tiled_ran ? attention_tiled_ : attention_rows_).fetch_add(1, std::memory_order_relaxed);
}

void CudaKernels::attention(const ops::TensorRef& q, const ops::TensorRef& k, const ops::TensorRef& v,
                            const ops::KvLayerRef& kv, std::int64_t pos0, const ops::AttentionShape& shape,
                            const ops::TensorRef& out) {
  const ops::AttentionSequenceRef one{0, q.rows, pos0, kv};
  attention_batch(q, k, v, {&one, 1}, shape, out);
}

void CudaKernels::elementwise(Elementwise op, const ops::TensorRef& a, const float* b, std::int64_t ldb, float scalar,
                              const ops::TensorRef& out) {
  if (!launching_) return;
  launch_elementwise(op, f32(a), a.ld, b, ldb, scalar, a.rows, a.cols, f32(out), out.ld, context_.stream());
  SITSRT_CUDA_CHECK_LAUNCH("elementwise kernel");
}

void CudaKernels::swiglu(const ops::TensorRef& gate, const ops::TensorRef& up, const ops::TensorRef& out) {
  elementwise(Elementwise::kSwiGlu, gate, f32(up), up.ld, 0.0f, out);
}

void CudaKernels::geglu_tanh(const ops::TensorRef& gate, const ops::TensorRef& up, const ops::TensorRef& out) {
  elementwise(Elementwise::kGeGluTanh, gate, f32(up), up.ld, 0.0f, out);
}

void CudaKernels::add_bias(const ops::TensorRef& x, const ops::WeightRef& bias, const ops::TensorRef& out) {
  elementwise(Elementwise::kAddBias, x, reinterpret_cast<const float*>(weight(bias).data), 0, 0.0f, out);
}

void CudaKernels::scale(const ops::TensorRef& x, float factor, const ops::TensorRef& out) {
  elementwise(Elementwise::kScale, x, nullptr, 0, factor, out);
}

void CudaKernels::soft_cap(const ops::TensorRef& x, float cap, const ops::TensorRef& out) {
  elementwise(Elementwise::kSoftCap, x, nullptr, 0, cap, out);
}

void CudaKernels::add(const ops::TensorRef& a, const ops::TensorRef& b, const ops::TensorRef& out) {
  elementwise(Elementwise::kAdd, a, f32(b), b.ld, 0.0f, out);
}

void CudaKernels::gather_rows(const ops::TensorRef& x, std::span<const std::int32_t> rows, const ops::TensorRef& out) {
  if (out.rows == 0) return;
  const std::byte* x_end = x.data + static_cast<std::size_t>(x.rows * x.ld) * sizeof(float);
  const std::byte* out_end = out.data + static_cast<std::size_t>(out.rows * out.ld) * sizeof(float);
  const bool overlap = out.data < x_end && x.data < out_end;
  const auto* device_rows = reinterpret_cast<const std::int32_t*>(inputs_->upload(bytes_of(rows)));
  if (!launching_) return;
  launch_gather_rows(f32(x), x.ld, device_rows, out.rows, x.cols, f32(out), out.ld, overlap, context_.stream());
  SITSRT_CUDA_CHECK_LAUNCH("gather_rows kernel");
}

}  // namespace sitsrt::cuda
