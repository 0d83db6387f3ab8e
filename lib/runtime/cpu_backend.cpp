#include "runtime/cpu_backend.hpp"

#include "core/aligned_buffer.hpp"
#include "core/check.hpp"
#include "cpu/matvec_group.hpp"
#include "cpu/weight_layout.hpp"
#include "ops/ops.hpp"
#include "runtime/kv_cache.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <string_view>

namespace sitsrt {

class CpuBuffer final : public BackendBuffer {
 public:
  CpuBuffer(CpuBackend& owner, std::size_t bytes, std::string_view what) : owner_(owner), buffer_(bytes, what) {}
  ~CpuBuffer() override { owner_.release(buffer_.size()); }
  std::byte* data() noexcept override { return buffer_.data(); }
  [[nodiscard]] std::size_t size() const noexcept override { return buffer_.size(); }

 private:
  CpuBackend& owner_;
  AlignedBuffer buffer_;
};

CpuBackend::CpuBackend(int threads, cpu::Isa isa, std::uint64_t budget_bytes, bool int8_activations,
                       bool resident_weights)
    : ctx_(threads, isa, int8_activations), budget_bytes_(budget_bytes), resident_weights_(resident_weights) {}

namespace {

std::int64_t weight_rows(const graph::Weight& w) { return w.dims.size() > 1 ? w.dims[1] : 1; }

// Weights some MatMul node reads (by WeightId); the others (norms, a lookup-only embedding) are
// never repacked.
std::vector<bool> matmul_weights(const graph::Graph& graph) {
  std::vector<bool> matmul(graph.weights().size(), false);
  for (const graph::Node& node : graph.nodes()) {
    if (node.op == graph::OpKind::kMatMul) matmul[static_cast<std::size_t>(node.weights[0])] = true;
  }
  return matmul;
}

}  // namespace

std::vector<CpuBackend::Placement> CpuBackend::place_weights(const graph::Graph& graph, std::size_t* total) const {
  const std::vector<bool> matmul = matmul_weights(graph);
  std::vector<Placement> placements;
  std::size_t offset = 0;
  for (std::size_t id = 0; id < graph.weights().size(); ++id) {
    const graph::Weight& w = graph.weights()[id];
    Placement p{w.type, row_bytes(w.type, w.dims[0]), offset};
    if (resident_weights_) {
      p.layout = cpu::resident_layout(ctx_, w.type, matmul[id]);
      p.row_stride = cpu::resident_row_stride(p.layout, w.dims[0]);
      // Every weight starts on a cache line (its rows too, for the repacked layouts).
      offset += (p.row_stride * static_cast<std::size_t>(weight_rows(w)) + 63) / 64 * 64;
    }
    placements.push_back(p);
  }
  *total = offset;
  return placements;
}

std::uint64_t CpuBackend::weight_bytes_for(const graph::Graph& graph) const {
  std::size_t total = 0;
  const std::vector<Placement> placements = place_weights(graph, &total);
  return resident_weights_ ? total : graph.total_weight_bytes();
}

void CpuBackend::bind_weights(const graph::Graph& graph, const graph::WeightSource& source) {
  weights_.clear();
  weights_.reserve(graph.weights().size());
  weight_bytes_ = 0;
  repacked_ = 0;
  for (const graph::Weight& w : graph.weights()) {
    const std::span<const std::byte> bytes = source.data(w);
    const std::int64_t cols = w.dims[0];
    const std::int64_t rows = weight_rows(w);
    const std::size_t row_stride = row_bytes(w.type, cols);
    if (bytes.size() < row_stride * static_cast<std::size_t>(rows)) {
      raise(ErrorCode::kInvalidModel, "weight '{}': {} bytes, expected {}", w.name, bytes.size(),
            row_stride * static_cast<std::size_t>(rows));
    }
    weights_.push_back({w.type, bytes.data(), rows, cols, row_stride});
    weight_bytes_ += bytes.size();
  }
  if (!resident_weights_) return;

  // Resident: one huge-page buffer (streaming decode reads measured 20-30% faster per core than
  // through the file's 4 KiB pages); each weight copied or repacked, then its file pages dropped.
  const auto start = std::chrono::steady_clock::now();
  std::size_t total = 0;
  const std::vector<Placement> placements = place_weights(graph, &total);
  resident_ = AlignedBuffer(total, "resident weights", AlignedBuffer::Pages::kHuge);
  for (std::size_t id = 0; id < weights_.size(); ++id) {
    const Placement& p = placements[id];
    cpu::WeightMatrix& w = weights_[id];
    std::byte* dst = resident_.data() + p.offset;
    const DType layout = cpu::copy_to_layout(ctx_, w, p.layout, dst, p.row_stride);
    source.release(graph.weights()[id]);
    if (layout != w.type) ++repacked_;
    w = {layout, dst, w.rows, w.cols, p.row_stride};
    if (progress_) progress_(total ? static_cast<double>(p.offset + p.row_stride * w.rows) / total : 1.0);
  }
  weight_bytes_ = total;
  copy_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void CpuBackend::prepare(const graph::Graph& graph, const graph::MemoryPlan& plan, std::int64_t kv_capacity) {
  std::size_t scratch = 0, shared = 0;
  for (const graph::Node& node : graph.nodes()) {
    if (node.op == graph::OpKind::kMatMul) {
      const auto& w = weights_[static_cast<std::size_t>(node.weights[0])];
      const auto& value = graph.values()[static_cast<std::size_t>(node.output)];
      const std::int64_t rows = value.rows == graph::RowSpace::kTokens ? plan.max_tokens : plan.max_outputs;
      scratch = std::max(scratch, cpu::matmul_scratch_floats(w, rows));
      shared = std::max(shared, cpu::matmul_shared_bytes(ctx_, w, 1));  // decode steps
      shared = std::max(shared, cpu::matmul_shared_bytes(ctx_, w, rows));  // prefill (AMX: bf16 x)
    } else if (node.op == graph::OpKind::kAttention) {
      const cpu::AttentionShape shape{node.attrs.n_heads, node.attrs.n_kv_heads, node.attrs.head_dim,
                                      node.attrs.attn_scale, node.attrs.window};
      scratch = std::max(scratch, cpu::attention_scratch_floats(kv_capacity, shape));
    }
  }
  ctx_.reserve_scratch(scratch);
  ctx_.reserve_shared_bytes(shared);  // the fused products need no more: one input row each
  // SITSRT_FUSE=0 turns the decode fusions off (to measure what they save).
  const char* fuse = std::getenv("SITSRT_FUSE");
  fusions_ = fuse != nullptr && std::string_view(fuse) == "0" ? DecodeFusions{} : find_decode_fusions(graph);
}

bool CpuBackend::run_fused(const graph::Graph& graph, std::size_t index, const StepContext& step) {
  if (fusions_.fusion_of.empty() || fusions_.fusion_of[index] < 0) return false;
  const Fusion& fusion = fusions_.fusions[static_cast<std::size_t>(fusions_.fusion_of[index])];
  const auto& nodes = graph.nodes();
  const auto data = [&](graph::ValueId id) {
    return reinterpret_cast<float*>(step.arena + step.plan->offsets[static_cast<std::size_t>(id)]);
  };
  const graph::Node& lead = nodes[fusion.nodes[0]];
  const graph::Value& input = graph.values()[static_cast<std::size_t>(lead.inputs[0])];
  const std::int64_t rows = input.rows == graph::RowSpace::kTokens ? step.n_tokens : step.n_outputs;
  if (rows != 1) return false;
  if (index != fusion.nodes[0]) return true;  // done with the lead
  const auto weight = [&](std::size_t k) -> const cpu::WeightMatrix& {
    return weights_[static_cast<std::size_t>(nodes[fusion.nodes[k]].weights[0])];
  };
  const float* x = data(lead.inputs[0]);
  switch (fusion.kind) {
    case FusionKind::kMatvecs: {
      std::array<cpu::MatvecTarget, 8> targets{};
      for (std::size_t k = 0; k < fusion.nodes.size(); ++k) targets[k] = {&weight(k), data(nodes[fusion.nodes[k]].output)};
      cpu::matvec_group(ctx_, {targets.data(), fusion.nodes.size()}, x);
      return true;
    }
    case FusionKind::kSwiGlu:
      cpu::matvec_swiglu(ctx_, weight(0), weight(1), x, data(nodes[fusion.nodes[0]].output),
                         data(nodes[fusion.nodes[1]].output), data(nodes[fusion.nodes[2]].output));
      return true;
    case FusionKind::kAddInto: {
      const graph::Node& sum = nodes[fusion.nodes[1]];
      const graph::ValueId residual = sum.inputs[0] == lead.output ? sum.inputs[1] : sum.inputs[0];
      cpu::matvec_add(ctx_, weight(0), x, data(lead.output), data(residual), data(sum.output));
      return true;
    }
  }
  return false;
}

std::unique_ptr<BackendBuffer> CpuBackend::allocate(std::size_t bytes, std::string_view what) {
  const std::uint64_t now = allocated_.fetch_add(bytes) + bytes;
  // The budget holds the weights too (bound before any buffer is allocated).
  if (budget_bytes_ != 0 && weight_bytes_ + now > budget_bytes_) {
    allocated_.fetch_sub(bytes);
    const std::uint64_t used = weight_bytes_ + now - bytes;
    raise(ErrorCode::kOutOfMemory,
          "cpu: {} needs {} bytes but only {} of the {}-byte budget are free ({} bytes of weights, {} of buffers)", what,
          bytes, budget_bytes_ - std::min(budget_bytes_, used), budget_bytes_, weight_bytes_, now - bytes);
  }
  std::uint64_t high = high_water_.load();
  while (now > high && !high_water_.compare_exchange_weak(high, now)) {
  }
  try {
    return std::make_unique<CpuBuffer>(*this, bytes, what);
  } catch (...) {
    allocated_.fetch_sub(bytes);
    throw;
  }
}

void CpuBackend::release(std::size_t bytes) noexcept { allocated_.fetch_sub(bytes); }

MemoryUsage CpuBackend::memory() const {
  return {weight_bytes_, allocated_.load(), high_water_.load(), budget_bytes_};
}

void CpuBackend::run(const graph::Graph& graph, std::size_t index, const StepContext& step) {
  using graph::OpKind;
  if (run_fused(graph, index, step)) return;
  const graph::Node& node = graph.nodes()[index];
  const auto view = [&](graph::ValueId id) {
    const graph::Value& v = graph.values()[static_cast<std::size_t>(id)];
    const std::int64_t rows = v.rows == graph::RowSpace::kTokens ? step.n_tokens : step.n_outputs;
    auto* data = reinterpret_cast<float*>(step.arena + step.plan->offsets[static_cast<std::size_t>(id)]);
    return TensorView{data, rows, v.width, v.width};
  };
  const auto weight = [&](std::size_t i) -> const cpu::WeightMatrix& {
    return weights_[static_cast<std::size_t>(node.weights[i])];
  };
  const auto vector = [&](std::size_t i) {
    const cpu::WeightMatrix& w = weight(i);
    return std::span<const float>(reinterpret_cast<const float*>(w.data), static_cast<std::size_t>(w.cols));
  };
  const TensorView out = view(node.output);
  switch (node.op) {
    case OpKind::kEmbed:
      ops::embed(ctx_, weight(0), step.token_ids, out);
      return;
    case OpKind::kRmsNorm:
      ops::rms_norm(ctx_, view(node.inputs[0]), vector(0), node.attrs.eps, out);
      return;
    case OpKind::kMatMul:
      ops::matmul(ctx_, weight(0), view(node.inputs[0]), out);
      return;
    case OpKind::kHeadRmsNorm:
      ops::head_rms_norm(ctx_, view(node.inputs[0]), node.attrs.n_heads, vector(0), node.attrs.eps, out);
      return;
    case OpKind::kRope: {
      const auto& r = node.attrs.rope;
      cpu::RopeParams params{r.head_dim, r.rot_dims, r.freq_base, r.freq_scale,
                             node.weights.empty() ? nullptr : vector(0).data(),
                             r.neox ? cpu::RopeStyle::kNeox : cpu::RopeStyle::kNormal};
      if (r.scaling == graph::RopeScaling::kYarn) {
        params.yarn = {true, r.original_context, r.yarn_beta_fast, r.yarn_beta_slow, r.yarn_attn_factor};
      } else if (r.scaling == graph::RopeScaling::kLlama3) {
        params.llama3 = {true, r.llama3_factor, r.llama3_low_freq_factor, r.llama3_high_freq_factor,
                         r.original_context};
      }
      ops::rope(ctx_, out, node.attrs.n_heads, step.positions, params);
      return;
    }
    case OpKind::kGeGlu:
      ops::geglu_tanh(ctx_, view(node.inputs[0]), view(node.inputs[1]), out);
      return;
    case OpKind::kAddBias:
      ops::add_bias(ctx_, view(node.inputs[0]), vector(0), out);
      return;
    case OpKind::kScale:
      ops::scale(ctx_, view(node.inputs[0]), node.attrs.scalar, out);
      return;
    case OpKind::kSoftCap:
      ops::soft_cap(ctx_, view(node.inputs[0]), node.attrs.scalar, out);
      return;
    case OpKind::kAttention: {
      const cpu::AttentionShape shape{node.attrs.n_heads, node.attrs.n_kv_heads, node.attrs.head_dim,
                                      node.attrs.attn_scale, node.attrs.window};
      ops::attention(ctx_, view(node.inputs[0]), view(node.inputs[1]), view(node.inputs[2]),
                     step.kv->layer(node.layer), step.pos0, shape, out);
      return;
    }
    case OpKind::kSwiGlu:
      ops::swiglu(ctx_, view(node.inputs[0]), view(node.inputs[1]), out);
      return;
    case OpKind::kAdd:
      ops::add(ctx_, view(node.inputs[0]), view(node.inputs[1]), out);
      return;
    case OpKind::kTakeLast:
      ops::take_last(view(node.inputs[0]), out);
      return;
  }
  raise(ErrorCode::kInternal, "cpu backend: unknown op kind {}", static_cast<int>(node.op));
}

}  // namespace sitsrt
