#include "cuda_backend/cuda_backend.hpp"

#include "backend/node_dispatch.hpp"
#include "core/check.hpp"
#include "cuda_backend/cuda_check.hpp"
#include "cuda_backend/kernels/launch.hpp"
#include "cuda_backend/logit_summary_record.hpp"
#include "cuda_backend/planar_weights.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>

namespace sitsrt::cuda {
namespace {

constexpr std::size_t kStagingBytes = 8u << 20;
constexpr std::int64_t kMaxGraphRows = 64;  // decode batches up to this many rows replay graphs
constexpr std::size_t kWeightAlignment = 256;

class CudaBuffer final : public BackendBuffer {
 public:
  CudaBuffer(DeviceAllocator& allocator, const CudaBackend& owner, Device device, std::size_t bytes,
             std::string_view what)
      : allocator_(allocator), owner_(owner), device_(device), bytes_(bytes), data_(allocator.allocate(bytes, what)) {}
  ~CudaBuffer() override { allocator_.deallocate(data_, bytes_); }
  std::byte* data() noexcept override { return data_; }
  [[nodiscard]] std::size_t size() const noexcept override { return bytes_; }
  [[nodiscard]] Device device() const noexcept override { return device_; }
  [[nodiscard]] const CudaBackend* owner() const noexcept { return &owner_; }

 private:
  DeviceAllocator& allocator_;
  const CudaBackend& owner_;
  Device device_;
  std::size_t bytes_;
  std::byte* data_;
};

std::int64_t weight_rows(const graph::Weight& w) {
  return w.dims.size() > 1 ? w.dims[1] : 1;
}

// What each weight is used as: decoded by the matmul / embedding kernels, or read as f32 values
// (norms, biases, rope frequency factors), which the host also needs for the rope factors.
struct WeightUses {
  std::vector<bool> decoded;
  std::vector<bool> rope_factors;
};

WeightUses weight_uses(const graph::Graph& graph) {
  WeightUses uses{std::vector<bool>(graph.weights().size(), false), std::vector<bool>(graph.weights().size(), false)};
  for (const graph::Node& node : graph.nodes()) {
    if (node.weights.empty()) continue;
    const auto id = static_cast<std::size_t>(node.weights[0]);
    if (node.op == graph::OpKind::kMatMul || node.op == graph::OpKind::kEmbed) uses.decoded[id] = true;
    if (node.op == graph::OpKind::kRope) uses.rope_factors[id] = true;
  }
  return uses;
}

}  // namespace

CudaBackend::CudaBackend(const CudaBackendOptions& options)
    : context_(options.device), allocator_(context_, options.budget_bytes), options_(options) {
  info_.name = "cuda";
  info_.device = {DeviceKind::kCuda, options.device};
  info_.description = context_.name() + " (sm_" + std::to_string(context_.compute_capability()) + ")";
  info_.multiprocessors = context_.multiprocessors();
  info_.memory_bytes = context_.total_memory();
  info_.decode_fusion = options.decode_fusion;
  info_.exact_recent_window = true;
  info_.logit_summary_k = kMaxSummaryBest;
  staging_ = std::make_unique<StagingRing>(context_, allocator_, kStagingBytes);
  kernels_ = std::make_unique<CudaKernels>(context_, allocator_, *staging_, weights_, options.batch_invariant);
  if (options.graphs) graphs_ = std::make_unique<DecodeGraphs>(context_, allocator_);
}

namespace {

// Whether a weight gets room for per-channel or 128 x 128 block scales: FP8 E4M3 matrices the
// matmul kernels read planar (the FP8 x FP8 prefill GEMM reads their codes plane in place).
bool takes_fp8_scales(const graph::Weight& w, bool decoded) {
  return decoded && w.type == DType::kFP8_E4M3 && planar_supports(w.type, w.dims[0]);
}

// Floats of that room: a scale per row, or the 128 x 128 grid, whichever is larger.
std::size_t fp8_scale_floats(std::int64_t rows, std::int64_t cols) {
  return static_cast<std::size_t>(std::max(rows, (rows + 127) / 128 * fp8_block128_scales_ld(cols)));
}

}  // namespace

CudaBackend::~CudaBackend() {
  graphs_.reset();
  kernels_.reset();
  staging_.reset();
  summaries_.reset();
  if (summary_chunks_ != nullptr) allocator_.deallocate(summary_chunks_, summary_chunks_bytes_);
  if (weights_memory_ != nullptr) allocator_.deallocate(weights_memory_, weights_bytes_);
}

WeightBindReport CudaBackend::bind_weights(const graph::Graph& graph, const graph::WeightSource& source,
                                           const std::function<void(double)>& progress) {
  const std::lock_guard stream(context_.stream_mutex());  // recursive: allocate takes it too
  context_.make_current();
  const auto start = std::chrono::steady_clock::now();
  const WeightUses uses = weight_uses(graph);
  std::vector<std::size_t> offsets, scale_offsets;
  std::size_t total = 0;
  for (std::size_t id = 0; id < graph.weights().size(); ++id) {
    const graph::Weight& w = graph.weights()[id];
    if (uses.decoded[id] && !kernel_supports(w.type)) {
      raise(ErrorCode::kUnsupported,
            "cuda: weight '{}' is {}, which the CUDA kernels do not decode yet (they take f32, f16, bf16, q8_0, "
            "q4_0, q4_1, q5_0, q5_1, fp8_e4m3, q4_g128, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl; convert at load with "
            "--weights q8 or run it "
            "on the cpu)",
            w.name, name(w.type));
    }
    if (!uses.decoded[id] && w.type != DType::kF32) {
      raise(ErrorCode::kUnsupported, "cuda: weight '{}' is {}, the CUDA kernels read it as f32", w.name, name(w.type));
    }
    const auto aligned = [](std::size_t bytes) {
      return (bytes + kWeightAlignment - 1) / kWeightAlignment * kWeightAlignment;
    };
    offsets.push_back(total);
    total += aligned(row_bytes(w.type, w.dims[0]) * static_cast<std::size_t>(weight_rows(w)));
    // Room for an FP8 matrix's per-channel or block scales, used where its scales turn out to
    // have either structure.
    scale_offsets.push_back(total);
    if (takes_fp8_scales(w, uses.decoded[id]))
      total += aligned(fp8_scale_floats(weight_rows(w), w.dims[0]) * sizeof(float));
  }
  if (weights_memory_ != nullptr) allocator_.deallocate(weights_memory_, weights_bytes_);
  weights_memory_ = nullptr;
  weights_.clear();
  weights_memory_ = allocator_.allocate(std::max<std::size_t>(total, 1), "model weights");
  weights_bytes_ = std::max<std::size_t>(total, 1);
  WeightBindReport report;
  std::vector<std::uint8_t> planar_staging;  // one repacked matrix at a time
  for (std::size_t id = 0; id < graph.weights().size(); ++id) {
    const graph::Weight& w = graph.weights()[id];
    const std::span<const std::byte> bytes = source.data(w);
    const std::size_t stride = row_bytes(w.type, w.dims[0]);
    const std::size_t need = stride * static_cast<std::size_t>(weight_rows(w));
    if (bytes.size() < need)
      raise(ErrorCode::kInvalidModel, "weight '{}': {} bytes, expected {}", w.name, bytes.size(), need);
    std::byte* dst = weights_memory_ + offsets[id];
    const bool planar = uses.decoded[id] && planar_supports(w.type, w.dims[0]);
    if (planar) {  // the planes the decode kernels read 16 bytes at a time
      planar_staging.resize(need);
      const PlanarGeometry g = planar_geometry(w.type, weight_rows(w), w.dims[0]);
      const auto* stored = reinterpret_cast<const std::uint8_t*>(bytes.data());
      for (std::int64_t r = 0; r < weight_rows(w); ++r) {
        planar_pack_row(w.type, stored + static_cast<std::size_t>(r) * stride, w.dims[0],
                        planar_staging.data() + r * g.code_row_bytes, planar_staging.data() + g.scales_of(r));
      }
      // On the context's stream, which owns the stream-ordered allocation and runs every kernel
      // (a plain cudaMemcpy goes on the legacy stream, unordered with this non-blocking one). From
      // pageable memory (the staging vector, mapped files) the call returns once the source is
      // staged, so the buffers may be reused and released; pinned sources would need a sync.
      SITSRT_CUDA_CHECK(cudaMemcpyAsync(dst, planar_staging.data(), need, cudaMemcpyHostToDevice, context_.stream()));
    } else {
      SITSRT_CUDA_CHECK(cudaMemcpyAsync(dst, bytes.data(), need, cudaMemcpyHostToDevice, context_.stream()));
    }
    DeviceWeight dw{reinterpret_cast<const std::uint8_t*>(dst),
                    w.type,
                    weight_rows(w),
                    w.dims[0],
                    static_cast<std::int64_t>(stride),
                    planar,
                    {}};
    if (uses.rope_factors[id]) {
      const auto* values = reinterpret_cast<const float*>(bytes.data());
      dw.host_copy.assign(values, values + need / sizeof(float));
    }
    if (planar && takes_fp8_scales(w, uses.decoded[id])) {
      const PlanarGeometry g = planar_geometry(w.type, weight_rows(w), w.dims[0]);
      // Per channel first (cuBLASLt's outer-vector scaling: the fastest FP8 GEMM), else per block.
      std::optional<std::vector<float>> scales = fp8_channel_scales(planar_staging.data(), g, weight_rows(w));
      const bool channel = scales.has_value();
      if (!channel) scales = fp8_block128_scales(planar_staging.data(), g, weight_rows(w), w.dims[0]);
      if (scales) {
        std::byte* at = weights_memory_ + scale_offsets[id];
        // From pageable memory: staged when the call returns, as the planes above.
        SITSRT_CUDA_CHECK(cudaMemcpyAsync(at, scales->data(), scales->size() * sizeof(float), cudaMemcpyHostToDevice,
                                          context_.stream()));
        (channel ? dw.channel_scales : dw.block_scales) = reinterpret_cast<const float*>(at);
      }
    }
    weights_.push_back(std::move(dw));
    source.release(w);
    if (progress) progress(total ? static_cast<double>(offsets[id] + need) / static_cast<double>(total) : 1.0);
  }
  context_.synchronize();  // the weights are in place before bind_weights returns
  report.bytes = total;
  report.copy_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

void CudaBackend::prepare(const graph::Graph& graph, const graph::MemoryPlan& plan, std::int64_t) {
  // Decode fusions run as one planar launch: every matmul of the fusion planar, of one format
  // and input width (SwiGLU: gate and up of one size); the others run node by node. A fused
  // matmul launch's blocks write while others still read x, so nothing it writes may be x's
  // memory, not even part of it. Rope pairs (in place, each row by one block) always fuse.
  fusions_ = options_.decode_fusion ? find_decode_fusions(graph) : DecodeFusions{};
  // The nodes whose kernels take per-step host inputs (CudaKernels::embed, rope, attention_batch,
  // gather_rows upload them; no other kernel does).
  step_input_nodes_.assign(graph.nodes().size(), false);
  for (std::size_t i = 0; i < graph.nodes().size(); ++i) {
    const graph::OpKind op = graph.nodes()[i].op;
    step_input_nodes_[i] = op == graph::OpKind::kEmbed || op == graph::OpKind::kRope ||
                           op == graph::OpKind::kAttention || op == graph::OpKind::kGatherRows;
  }
  // Rope pairs whose Q and K only the next node reads, an attention: its KV store kernel rotates
  // them (one launch fewer a layer).
  rope_into_attention_.assign(graph.nodes().size(), false);
  for (const Fusion& fusion : fusions_.fusions) {
    if (fusion.kind != FusionKind::kRopePair) continue;
    const std::size_t q_node = fusion.nodes[0], k_node = fusion.nodes[1];
    const std::size_t next = std::max(q_node, k_node) + 1;
    if (next >= graph.nodes().size()) continue;
    const graph::Node& attention = graph.nodes()[next];
    const graph::ValueId q = graph.nodes()[q_node].output, k = graph.nodes()[k_node].output;
    bool only_attention = attention.op == graph::OpKind::kAttention && attention.inputs.size() >= 2 &&
                          attention.inputs[0] == q && attention.inputs[1] == k;
    for (std::size_t i = 0; i < graph.nodes().size() && only_attention; ++i) {
      if (i == next) continue;
      for (const graph::ValueId input : graph.nodes()[i].inputs)
        only_attention = only_attention && input != q && input != k;
    }
    rope_into_attention_[q_node] = only_attention;
  }
  const auto overlaps = [&](graph::ValueId a, graph::ValueId b) {
    const auto i = static_cast<std::size_t>(a), j = static_cast<std::size_t>(b);
    return plan.offsets[i] < plan.offsets[j] + plan.sizes[j] && plan.offsets[j] < plan.offsets[i] + plan.sizes[i];
  };
  for (const Fusion& fusion : fusions_.fusions) {
    const DeviceWeight* first = nullptr;
    bool fusable = true;
    const graph::ValueId input = graph.nodes()[fusion.nodes[0]].inputs[0];
    for (const std::size_t n : fusion.nodes) {
      const graph::Node& node = graph.nodes()[n];
      fusable = fusable && (fusion.kind == FusionKind::kRopePair || !overlaps(node.output, input));
      if (node.op != graph::OpKind::kMatMul) continue;
      const DeviceWeight& w = weights_[static_cast<std::size_t>(node.weights[0])];
      if (first == nullptr) first = &w;
      fusable = fusable && w.planar && w.format == first->format && w.cols == first->cols &&
                ((fusion.kind != FusionKind::kSwiGlu && fusion.kind != FusionKind::kGeGlu) || w.rows == first->rows);
    }
    if (!fusable) {
      for (const std::size_t n : fusion.nodes) fusions_.fusion_of[n] = -1;
    }
  }
  // RMSNorms whose output a matmul with FP8 x FP8 weights (E4M3, a scale per channel) reads:
  // prompt chunks' norms there also write the E4M3 rows the GEMM takes (CudaKernels::rms_norm).
  norm_feeds_fp8_.assign(graph.nodes().size(), false);
  std::vector<std::int64_t> producer(graph.values().size(), -1);
  for (std::size_t i = 0; i < graph.nodes().size(); ++i) {
    const graph::Node& node = graph.nodes()[i];
    if (node.output != graph::kNoValue) producer[static_cast<std::size_t>(node.output)] = static_cast<std::int64_t>(i);
    if (node.op != graph::OpKind::kMatMul || node.inputs.empty() || node.weights.empty()) continue;
    const std::int64_t from = producer[static_cast<std::size_t>(node.inputs[0])];
    const DeviceWeight& w = weights_[static_cast<std::size_t>(node.weights[0])];
    if (from >= 0 && graph.nodes()[static_cast<std::size_t>(from)].op == graph::OpKind::kRmsNorm &&
        w.format == DType::kFP8_E4M3 && w.planar && w.channel_scales != nullptr) {
      norm_feeds_fp8_[static_cast<std::size_t>(from)] = true;
    }
  }
  for (const graph::Node& node : graph.nodes()) {
    if (node.op != graph::OpKind::kAttention) continue;
    if (node.attrs.head_dim > kMaxHeadDim) {
      raise(ErrorCode::kUnsupported, "cuda: attention with head_dim {} (layer {}); the kernels take up to {}",
            node.attrs.head_dim, node.layer, kMaxHeadDim);
    }
    // The split partials now, before the KV pool takes what the budget leaves (a first decode
    // step must not run out of memory for them).
    ops::AttentionShape shape;
    shape.n_heads = node.attrs.n_heads;
    shape.n_kv_heads = node.attrs.n_kv_heads;
    shape.head_dim = node.attrs.head_dim;
    kernels_->reserve_attention_partials(shape);
    kernels_->reserve_exact_rows(plan.max_tokens, shape.n_kv_heads * shape.head_dim);
  }
  // Room for the summaries of kSummaryRows output rows at a time at the most best ids (the records
  // and the chunk records they are merged from), before the KV pool takes the budget: steps
  // with more rows take them in groups, so nothing grows at step time.
  const std::int64_t n_vocab = graph.values()[static_cast<std::size_t>(graph.output())].width;
  reserve_summaries(n_vocab);
}

void CudaBackend::reserve_summaries(std::int64_t vocab) {
  const std::size_t bytes = static_cast<std::size_t>(kSummaryRows) * summary_record_bytes(kMaxSummaryBest);
  const std::size_t chunk_bytes = bytes * static_cast<std::size_t>(logit_summary_chunks(vocab));
  if (!summaries_) summaries_ = std::make_unique<MirroredBuffer>(context_, allocator_, bytes, "logit summaries");
  if (summary_chunks_bytes_ < chunk_bytes) {  // a larger vocabulary than prepared for (tests)
    if (summary_chunks_ != nullptr) {
      context_.synchronize();  // queued summaries may still read it
      allocator_.deallocate(summary_chunks_, summary_chunks_bytes_);
      summary_chunks_ = nullptr;
      summary_chunks_bytes_ = 0;
    }
    summary_chunks_ = allocator_.allocate(chunk_bytes, "logit summary chunks");
    summary_chunks_bytes_ = chunk_bytes;
  }
}

std::unique_ptr<BackendBuffer> CudaBackend::allocate(std::size_t bytes, std::string_view what) {
  return std::make_unique<CudaBuffer>(allocator_, *this, info_.device, bytes, what);
}

std::byte* CudaBackend::checked_range(const BackendBuffer& buffer, std::size_t offset, std::size_t bytes,
                                      const char* what) const {
  const auto* own = dynamic_cast<const CudaBuffer*>(&buffer);
  if (own == nullptr || own->owner() != this)
    raise(ErrorCode::kInternal, "cuda backend: {} of another backend's buffer", what);
  if (offset > buffer.size() || bytes > buffer.size() - offset) {
    raise(ErrorCode::kInternal, "cuda backend: {} of bytes [{}, {}) from a {}-byte buffer", what, offset,
          offset + bytes, buffer.size());
  }
  return const_cast<BackendBuffer&>(buffer).data() + offset;
}

void CudaBackend::read(const BackendBuffer& buffer, std::size_t offset, std::span<std::byte> dst) {
  const std::byte* src = checked_range(buffer, offset, dst.size(), "read");
  if (dst.empty()) return;
  const std::lock_guard stream(context_.stream_mutex());
  context_.make_current();
  SITSRT_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src, dst.size(), cudaMemcpyDeviceToHost, context_.stream()));
  context_.synchronize();
}

void CudaBackend::summarize_logits(const BackendBuffer& buffer, std::size_t offset, std::int64_t n_rows,
                                   std::int64_t vocab, std::span<const std::int64_t> rows, std::int64_t k,
                                   std::span<LogitSummary> out) {
  check_logit_summary_request(n_rows, vocab, rows, k, info_.logit_summary_k, out);
  if (vocab > std::numeric_limits<std::int32_t>::max()) {
    raise(ErrorCode::kUnsupported, "cuda: logit summaries of a {}-id vocabulary", vocab);
  }
  const auto values = static_cast<std::size_t>(n_rows) * static_cast<std::size_t>(vocab);
  const auto* logits =
      reinterpret_cast<const float*>(checked_range(buffer, offset, values * sizeof(float), "summarize_logits"));
  if (rows.empty()) return;
  if (offset % alignof(float) != 0) raise(ErrorCode::kInternal, "cuda: logits at byte offset {}", offset);
  // Every row of a group of kSummaryRows is summarised (side by side): simpler than a row list,
  // and a mixed step's extra rows cost a few microseconds of otherwise idle SMs.
  const std::size_t record = summary_record_bytes(k);
  const std::lock_guard stream(context_.stream_mutex());
  context_.make_current();
  reserve_summaries(vocab);
  std::size_t next = 0;  // of `rows`, which the groups visit in order of row
  std::vector<std::int64_t> sorted(rows.begin(), rows.end());
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t first = 0; first < n_rows && next < sorted.size(); first += kSummaryRows) {
    const std::int64_t count = std::min(kSummaryRows, n_rows - first);
    if (sorted[next] >= first + count) continue;  // no row asked in this group
    launch_logit_summaries(logits + static_cast<std::size_t>(first) * static_cast<std::size_t>(vocab), count, vocab, k,
                           summary_chunks_, summaries_->device(), context_.stream());
    SITSRT_CUDA_CHECK_LAUNCH("logit summary kernels");
    SITSRT_CUDA_CHECK(cudaMemcpyAsync(summaries_->host(), summaries_->device(),
                                      static_cast<std::size_t>(count) * record, cudaMemcpyDeviceToHost,
                                      context_.stream()));
    context_.synchronize();
    for (; next < sorted.size() && sorted[next] < first + count; ++next) {
      const std::int64_t r = sorted[next];
      const std::byte* at = summaries_->host() + static_cast<std::size_t>(r - first) * record;
      SummaryHeader header;
      std::memcpy(&header, at, sizeof(header));
      if (header.count < 0 || header.count > k) {
        raise(ErrorCode::kInternal, "cuda: a logit summary of {} best ids where {} were asked", header.count, k);
      }
      LogitSummary& s = out[static_cast<std::size_t>(r)];
      s.max = header.max;
      s.argmax = header.argmax;
      s.exp_sum = header.exp_sum;
      s.exp_weighted = header.exp_weighted;
      s.best.resize(static_cast<std::size_t>(header.count));
      static_assert(sizeof(SummaryPair) == sizeof(IdLogit));
      std::memcpy(s.best.data(), at + sizeof(header), s.best.size() * sizeof(IdLogit));
    }
  }
}

void CudaBackend::write(BackendBuffer& buffer, std::size_t offset, std::span<const std::byte> src) {
  std::byte* dst = checked_range(buffer, offset, src.size(), "write");
  if (src.empty()) return;
  const std::lock_guard stream(context_.stream_mutex());
  context_.make_current();
  if (kernels_ != nullptr) kernels_->forget_fp8_activations();
  SITSRT_CUDA_CHECK(cudaMemcpyAsync(dst, src.data(), src.size(), cudaMemcpyHostToDevice, context_.stream()));
  context_.synchronize();  // the caller may free src on return
}

void CudaBackend::copy(const BackendBuffer& src, std::size_t src_offset, BackendBuffer& dst, std::size_t dst_offset,
                       std::size_t bytes) {
  const std::byte* from = checked_range(src, src_offset, bytes, "copy");
  std::byte* to = checked_range(dst, dst_offset, bytes, "copy");
  if (bytes == 0) return;
  const std::lock_guard stream(context_.stream_mutex());
  context_.make_current();
  if (kernels_ != nullptr) kernels_->forget_fp8_activations();
  SITSRT_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, context_.stream()));
}

void CudaBackend::synchronize() {
  const std::lock_guard stream(context_.stream_mutex());
  context_.synchronize();
}

MemoryUsage CudaBackend::memory() const {
  const std::uint64_t live = allocator_.live_bytes();
  const std::uint64_t weights = weights_memory_ != nullptr ? DeviceAllocator::rounded(weights_bytes_) : 0;
  return {weights_bytes_, live - std::min(live, weights), allocator_.high_water_bytes(), allocator_.budget()};
}

GraphCounters CudaBackend::graph_counters() const {
  if (graphs_ == nullptr) return {};
  const DecodeGraphStats stats = graphs_->stats();  // atomics: queue_stats reads from any thread
  return {stats.captures, stats.replays};
}

KernelPathCounters CudaBackend::kernel_paths() const {
  return kernels_ != nullptr ? kernels_->kernel_paths() : KernelPathCounters{};
}

void CudaBackend::compute(const graph::Graph& graph, std::size_t first, std::size_t last, const StepContext& step) {
  const std::lock_guard stream(context_.stream_mutex());
  context_.make_current();
  if (first == 0) kernels_->forget_fp8_activations();  // a new step: its arena's rows are new
  const auto run_nodes = [&] {
    for (std::size_t i = first; i < last; ++i) run_node(graph, i, step);
  };
  // A replay refills only the inputs: the nodes that take them (each reserves its slots in the
  // order of the capture, where no other node reserves any) through the same code.
  const auto fill_nodes = [&] {
    const bool known = step_input_nodes_.size() == graph.nodes().size();
    for (std::size_t i = first; i < last; ++i) {
      if (!known || step_input_nodes_[i]) run_node(graph, i, step);
    }
  };
  // Decode steps (one row per sequence, the whole step at once) replay a captured graph.
  const bool decode = step.n_tokens == static_cast<std::int64_t>(step.sequences.size());
  if (graphs_ != nullptr && decode && first == 0 && step.n_tokens <= kMaxGraphRows) {
    std::uint64_t plan_hash = step.plan->offsets.size();
    for (const std::size_t offset : step.plan->offsets) plan_hash = plan_hash * 0x100000001b3ull ^ offset;
    const DecodeGraphKey key{&graph, first, last, step.n_tokens, step.n_outputs, step.arena->data(), plan_hash};
    if (graphs_->run(key, *kernels_, run_nodes, fill_nodes)) return;
  }
  run_nodes();
}

void CudaBackend::run(const graph::Graph& graph, std::size_t index, const StepContext& step) {
  const std::lock_guard stream(context_.stream_mutex());
  context_.make_current();
  run_node(graph, index, step);
}

void CudaBackend::run_node(const graph::Graph& graph, std::size_t index, const StepContext& step) {
  const graph::OpKind op = graph.nodes()[index].op;
  if (op != graph::OpKind::kRope && op != graph::OpKind::kAttention) kernels_->clear_deferred_rope();
  // What the prefill GEMM's FP8 activations came from may be written: elementwise nodes write
  // their output rows only (Q's bias does not make K and V quantize x again); matmuls and RMSNorm
  // check their own; any other node (attention, rope, embedding, gather) forgets them.
  switch (op) {
    case graph::OpKind::kMatMul:
      break;
    case graph::OpKind::kRmsNorm:
      kernels_->next_norm_feeds_fp8(index < norm_feeds_fp8_.size() && norm_feeds_fp8_[index]);
      break;
    case graph::OpKind::kAddBias:
    case graph::OpKind::kScale:
    case graph::OpKind::kSoftCap:
    case graph::OpKind::kAdd:
    case graph::OpKind::kSwiGlu:
    case graph::OpKind::kGeGlu:
      kernels_->forget_fp8_activations_under(value_view(graph, graph.nodes()[index].output, step));
      break;
    default:
      kernels_->forget_fp8_activations();
  }
  if (run_fused(graph, index, step)) return;
  run_node_through_kernels(*kernels_, graph, index, step, attention_sequences_);
}

ops::TensorRef CudaBackend::value_view(const graph::Graph& graph, graph::ValueId id, const StepContext& step) const {
  const graph::Value& v = graph.values()[static_cast<std::size_t>(id)];
  const std::int64_t rows = v.rows == graph::RowSpace::kTokens ? step.n_tokens : step.n_outputs;
  std::byte* data = step.arena->data() + step.plan->offsets[static_cast<std::size_t>(id)];
  return ops::TensorRef{data, DType::kF32, rows, v.width, v.width, info_.device};
}

bool CudaBackend::run_fused(const graph::Graph& graph, std::size_t index, const StepContext& step) {
  if (fusions_.fusion_of.empty() || fusions_.fusion_of[index] < 0) return false;
  const Fusion& fusion = fusions_.fusions[static_cast<std::size_t>(fusions_.fusion_of[index])];
  const auto& nodes = graph.nodes();
  const auto view = [&](graph::ValueId id) { return value_view(graph, id, step); };
  const graph::Node& lead = nodes[fusion.nodes[0]];
  if (fusion.kind == FusionKind::kRopePair) {
    if (index != fusion.nodes[0]) return true;  // done with the lead
    const graph::Node& second = nodes[fusion.nodes[1]];
    const graph::Weight* factors = nullptr;
    ops::WeightRef factor_ref{};
    if (!lead.weights.empty()) {
      const graph::WeightId id = lead.weights[0];
      factors = &graph.weights()[static_cast<std::size_t>(id)];
      factor_ref = {static_cast<std::int32_t>(id), factors->type, factors->dims.size() > 1 ? factors->dims[1] : 1,
                    factors->dims[0], info_.device};
    }
    const bool into_attention = index < rope_into_attention_.size() && rope_into_attention_[index];
    kernels_->rope_pair(view(lead.output), lead.attrs.n_heads, view(second.output), second.attrs.n_heads,
                        step.positions, lead.attrs.rope, factors != nullptr ? &factor_ref : nullptr, into_attention);
    return true;
  }
  const ops::TensorRef x = view(lead.inputs[0]);
  // Only where the members alone would take the planar kernels (not the prefill GEMM), so a
  // fused step writes their bits.
  if (!kernels_->planar_rows(x.rows)) return false;
  if (index != fusion.nodes[0]) return true;  // done with the lead
  std::vector<CudaKernels::FusedMatmul> matmuls;
  std::size_t n_matmuls = fusion.kind == FusionKind::kAddInto ? 1 : fusion.nodes.size();
  if (fusion.kind == FusionKind::kSwiGlu || fusion.kind == FusionKind::kGeGlu) n_matmuls = 2;
  for (std::size_t k = 0; k < n_matmuls; ++k) {
    const graph::Node& node = nodes[fusion.nodes[k]];
    matmuls.push_back({static_cast<std::size_t>(node.weights[0]), view(node.output)});
  }
  switch (fusion.kind) {
    case FusionKind::kMatvecs:
      kernels_->fused_matmuls(matmuls, x, PlanarEpilogue::kNone, nullptr, nullptr);
      return true;
    case FusionKind::kSwiGlu:
    case FusionKind::kGeGlu: {
      const ops::TensorRef out = view(nodes[fusion.nodes[2]].output);
      const PlanarEpilogue act = fusion.kind == FusionKind::kSwiGlu ? PlanarEpilogue::kSwiGlu : PlanarEpilogue::kGeGlu;
      kernels_->fused_matmuls(matmuls, x, act, nullptr, &out);
      return true;
    }
    case FusionKind::kAddInto: {
      const graph::Node& sum = nodes[fusion.nodes[1]];
      const ops::TensorRef residual = view(sum.inputs[0] == lead.output ? sum.inputs[1] : sum.inputs[0]);
      const ops::TensorRef out = view(sum.output);
      kernels_->fused_matmuls(matmuls, x, PlanarEpilogue::kAdd, &residual, &out);
      return true;
    }
    case FusionKind::kRopePair:  // handled above
      break;
  }
  return false;
}

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

int cuda_device_count(std::string* why) noexcept {
  return device_count(why);
}

}  // namespace sitsrt::cuda
