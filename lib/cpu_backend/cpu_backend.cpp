#include "cpu_backend/cpu_backend.hpp"

#include "backend/kv_cache.hpp"
#include "backend/node_dispatch.hpp"
#include "core/aligned_buffer.hpp"
#include "core/check.hpp"
#include "cpu/attention/attention.hpp"
#include "cpu/decode_prefetch.hpp"
#include "cpu/logits/logit_kernels.hpp"
#include "cpu/matmul/matvec_group.hpp"
#include "cpu/weight_layout.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <string_view>

namespace sitsrt {

class CpuBuffer final : public BackendBuffer {
 public:
  CpuBuffer(CpuBackend& owner, std::size_t bytes, std::string_view what) : owner_(owner), buffer_(bytes, what) {}
  ~CpuBuffer() override { owner_.release(buffer_.size()); }
  std::byte* data() noexcept override { return buffer_.data(); }
  [[nodiscard]] std::size_t size() const noexcept override { return buffer_.size(); }
  [[nodiscard]] Device device() const noexcept override { return {DeviceKind::kCpu, 0}; }
  [[nodiscard]] const CpuBackend* owner() const noexcept { return &owner_; }

 private:
  CpuBackend& owner_;
  AlignedBuffer buffer_;
};

cpu::Isa parse_cpu_isa(std::string_view name) {
  if (name == "auto" || name.empty()) return cpu::detect_isa();
  if (name == "amx") return cpu::Isa::kAmx;
  if (name == "avx512vnni") return cpu::Isa::kAvx512Vnni;
  if (name == "avx512") return cpu::Isa::kAvx512;
  if (name == "avx2") return cpu::Isa::kAvx2;
  if (name == "generic") return cpu::Isa::kGeneric;
  raise(ErrorCode::kInvalidArgument, "cpu_isa '{}' is not one of auto, amx, avx512vnni, avx512, avx2, generic", name);
}

namespace {

// The first "model name" of /proc/cpuinfo ("cpu" where there is none).
std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      const std::size_t start = line.find_first_not_of(" \t", line.find(':') + 1);
      if (start != std::string::npos) return line.substr(start);
    }
  }
  return "cpu";
}

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

}  // namespace

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : options_(options), ctx_(options.threads, parse_cpu_isa(options.isa), options.int8_activations) {
  ctx_.set_batch_invariant(options.batch_invariant);
  info_.name = "cpu";
  info_.device = {DeviceKind::kCpu, 0};
  info_.description = cpu_model_name();
  info_.isa = std::string(cpu::name(ctx_.isa()));
  // The policy serves the AVX-512 levels' kernels; the AVX2 ones keep theirs (decode_prefetch.hpp).
  // (plain AVX-512 decodes int8 activations with the AVX2 integer dots).
  const std::string policy = cpu::describe(cpu::decode_prefetch());
  switch (ctx_.isa()) {
    case cpu::Isa::kGeneric:
      info_.weight_prefetch = "none";
      break;
    case cpu::Isa::kAvx2:
      info_.weight_prefetch = "l1, 1536 B ahead";
      break;
    case cpu::Isa::kAvx512:
      info_.weight_prefetch = policy + " (float kernels; integer dots l1, 1536 B ahead)";
      break;
    case cpu::Isa::kAvx512Vnni:
    case cpu::Isa::kAmx:
      info_.weight_prefetch = policy;
      break;
  }
  info_.threads = ctx_.threads();
  info_.int8_activations = ctx_.int8_activations();
  info_.decode_fusion = options.decode_fusion;
  info_.head_major_kv = true;  // attention reads each kv head's positions as one run per block
  info_.exact_recent_window = true;
  info_.logit_summary_k = std::numeric_limits<std::int32_t>::max();  // clamped to the row
  info_.memory_bytes = physical_memory_bytes();
}

namespace {

std::int64_t weight_rows(const graph::Weight& w) {
  return w.dims.size() > 1 ? w.dims[1] : 1;
}

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
    Placement p{cpu::stored_layout(w.type), row_bytes(w.type, w.dims[0]), offset};
    if (options_.resident_weights) {
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

WeightBindReport CpuBackend::bind_weights(const graph::Graph& graph, const graph::WeightSource& source,
                                          const std::function<void(double)>& progress) {
  weights_.clear();
  weights_.reserve(graph.weights().size());
  weight_bytes_ = 0;
  WeightBindReport report;
  for (const graph::Weight& w : graph.weights()) {
    const std::span<const std::byte> bytes = source.data(w);
    const std::int64_t cols = w.dims[0];
    const std::int64_t rows = weight_rows(w);
    const std::size_t row_stride = row_bytes(w.type, cols);
    if (bytes.size() < row_stride * static_cast<std::size_t>(rows)) {
      raise(ErrorCode::kInvalidModel, "weight '{}': {} bytes, expected {}", w.name, bytes.size(),
            row_stride * static_cast<std::size_t>(rows));
    }
    weights_.push_back({cpu::stored_layout(w.type), bytes.data(), rows, cols, row_stride});
    weight_bytes_ += bytes.size();
  }
  if (!options_.resident_weights) {
    report.bytes = weight_bytes_;
    return report;
  }

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
    const cpu::WeightLayout layout = cpu::copy_to_layout(ctx_, w, p.layout, dst, p.row_stride);
    source.release(graph.weights()[id]);
    if (layout != w.layout) ++report.repacked_tensors;
    w = {layout, dst, w.rows, w.cols, p.row_stride};
    if (progress) progress(total ? static_cast<double>(p.offset + p.row_stride * w.rows) / total : 1.0);
  }
  weight_bytes_ = total;
  report.bytes = total;
  report.copy_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

void CpuBackend::prepare(const graph::Graph& graph, const graph::MemoryPlan& plan, std::int64_t kv_capacity) {
  std::size_t scratch = 0, shared = 0;
  for (const graph::Node& node : graph.nodes()) {
    if (node.op == graph::OpKind::kMatMul) {
      const auto& w = weights_[static_cast<std::size_t>(node.weights[0])];
      const auto& value = graph.values()[static_cast<std::size_t>(node.output)];
      const std::int64_t rows = value.rows == graph::RowSpace::kTokens ? plan.max_tokens : plan.max_outputs;
      scratch = std::max(scratch, cpu::matmul_scratch_floats(w, rows));
      shared = std::max(shared, cpu::matmul_shared_bytes(ctx_, w, 1));     // decode steps
      shared = std::max(shared, cpu::matmul_shared_bytes(ctx_, w, rows));  // prefill (AMX: bf16 x)
    } else if (node.op == graph::OpKind::kAttention) {
      const cpu::AttentionShape shape{node.attrs.n_heads, node.attrs.n_kv_heads, node.attrs.head_dim,
                                      node.attrs.attn_scale, node.attrs.window};
      scratch = std::max(scratch, cpu::attention_scratch_floats(kv_capacity, shape));
    }
  }
  ctx_.reserve_scratch(scratch);
  ctx_.reserve_shared_bytes(shared);  // the fused products need no more: one input row each
  // Without decode_fusion (to measure what the fusions save) every node runs on its own.
  fusions_ = options_.decode_fusion ? find_decode_fusions(graph) : DecodeFusions{};
  // A fusion runs its products with the decode kernels; where batch invariance sends one row
  // through the GEMM instead (float weights, cpu::matvec_fusable), its nodes run on their own.
  for (const Fusion& fusion : fusions_.fusions) {
    // Rope pairs are a launch saving on GPUs; here each rope is one parallel region already.
    const bool fusable = fusion.kind != FusionKind::kRopePair && std::ranges::all_of(fusion.nodes, [&](std::size_t n) {
                           const graph::Node& node = graph.nodes()[n];
                           return node.op != graph::OpKind::kMatMul ||
                                  cpu::matvec_fusable(ctx_, weights_[static_cast<std::size_t>(node.weights[0])]);
                         });
    if (!fusable) {
      for (std::size_t n : fusion.nodes) fusions_.fusion_of[n] = -1;
    }
  }
}

bool CpuBackend::run_fused(const graph::Graph& graph, std::size_t index, const StepContext& step) {
  if (fusions_.fusion_of.empty() || fusions_.fusion_of[index] < 0) return false;
  const Fusion& fusion = fusions_.fusions[static_cast<std::size_t>(fusions_.fusion_of[index])];
  const auto& nodes = graph.nodes();
  const auto data = [&](graph::ValueId id) {
    return reinterpret_cast<float*>(step.arena->data() + step.plan->offsets[static_cast<std::size_t>(id)]);
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
      for (std::size_t k = 0; k < fusion.nodes.size(); ++k)
        targets[k] = {&weight(k), data(nodes[fusion.nodes[k]].output)};
      cpu::matvec_group(ctx_, {targets.data(), fusion.nodes.size()}, x);
      return true;
    }
    case FusionKind::kSwiGlu:
      cpu::matvec_swiglu(ctx_, weight(0), weight(1), x, data(nodes[fusion.nodes[0]].output),
                         data(nodes[fusion.nodes[1]].output), data(nodes[fusion.nodes[2]].output));
      return true;
    case FusionKind::kGeGlu:
      cpu::matvec_geglu(ctx_, weight(0), weight(1), x, data(nodes[fusion.nodes[0]].output),
                        data(nodes[fusion.nodes[1]].output), data(nodes[fusion.nodes[2]].output));
      return true;
    case FusionKind::kRopePair:
      return false;  // dropped in prepare
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
  const std::uint64_t budget = options_.budget_bytes;
  if (budget != 0 && weight_bytes_ + now > budget) {
    allocated_.fetch_sub(bytes);
    const std::uint64_t used = weight_bytes_ + now - bytes;
    raise(ErrorCode::kOutOfMemory,
          "cpu: {} needs {} bytes but only {} of the {}-byte budget are free ({} bytes of weights, {} of buffers)",
          what, bytes, budget - std::min(budget, used), budget, weight_bytes_, now - bytes);
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

void CpuBackend::release(std::size_t bytes) noexcept {
  allocated_.fetch_sub(bytes);
}

MemoryUsage CpuBackend::memory() const {
  return {weight_bytes_, allocated_.load(), high_water_.load(), options_.budget_bytes};
}

const std::byte* CpuBackend::checked_range(const BackendBuffer& buffer, std::size_t offset, std::size_t bytes,
                                           const char* what) const {
  const auto* own = dynamic_cast<const CpuBuffer*>(&buffer);
  if (own == nullptr || own->owner() != this)
    raise(ErrorCode::kInternal, "cpu backend: {} of another backend's buffer", what);
  if (offset > buffer.size() || bytes > buffer.size() - offset) {
    raise(ErrorCode::kInternal, "cpu backend: {} of bytes [{}, {}) from a {}-byte buffer", what, offset, offset + bytes,
          buffer.size());
  }
  return const_cast<BackendBuffer&>(buffer).data() + offset;
}

void CpuBackend::read(const BackendBuffer& buffer, std::size_t offset, std::span<std::byte> dst) {
  const std::byte* src = checked_range(buffer, offset, dst.size(), "read");
  if (!dst.empty()) std::memcpy(dst.data(), src, dst.size());
}

void CpuBackend::write(BackendBuffer& buffer, std::size_t offset, std::span<const std::byte> src) {
  auto* dst = const_cast<std::byte*>(checked_range(buffer, offset, src.size(), "write"));
  if (!src.empty()) std::memcpy(dst, src.data(), src.size());
}

void CpuBackend::copy(const BackendBuffer& src, std::size_t src_offset, BackendBuffer& dst, std::size_t dst_offset,
                      std::size_t bytes) {
  const std::byte* from = checked_range(src, src_offset, bytes, "copy");
  auto* to = const_cast<std::byte*>(checked_range(dst, dst_offset, bytes, "copy"));
  if (bytes != 0) std::memmove(to, from, bytes);
}

std::span<const std::byte> CpuBackend::host_view(const BackendBuffer& buffer, std::size_t offset, std::size_t bytes) {
  return {checked_range(buffer, offset, bytes, "host_view"), bytes};
}

void CpuBackend::run_host_tasks(std::int64_t n, FunctionRef<void(std::int64_t)> task) {
  if (n <= 1) {
    if (n == 1) task(0);
    return;
  }
  ctx_.pool().run([&](int part, int parts) {
    for (std::int64_t i = part; i < n; i += parts) task(i);
  });
}

void CpuBackend::summarize_logits(const BackendBuffer& buffer, std::size_t offset, std::int64_t n_rows,
                                  std::int64_t vocab, std::span<const std::int64_t> rows, std::int64_t k,
                                  std::span<LogitSummary> out) {
  check_logit_summary_request(n_rows, vocab, rows, k, info_.logit_summary_k, out);
  const auto row_values = static_cast<std::size_t>(vocab);
  const auto* logits = reinterpret_cast<const float*>(
      checked_range(buffer, offset, static_cast<std::size_t>(n_rows) * row_values * sizeof(float), "summarize_logits"));
  // The host passes the sampler made itself before (the same functions, so the same bits), one
  // row a task on the pool's threads.
  run_host_tasks(static_cast<std::int64_t>(rows.size()), [&](std::int64_t i) {
    const auto r = static_cast<std::size_t>(rows[static_cast<std::size_t>(i)]);
    cpu::summarize_logits({logits + r * row_values, row_values}, k, out[r]);
  });
}

void CpuBackend::run(const graph::Graph& graph, std::size_t index, const StepContext& step) {
  if (run_fused(graph, index, step)) return;
  run_node_through_kernels(kernels_, graph, index, step, attention_sequences_);
}

}  // namespace sitsrt
