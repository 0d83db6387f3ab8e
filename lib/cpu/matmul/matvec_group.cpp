#include "cpu/matmul/matvec_group.hpp"

#include "core/check.hpp"
#include "cpu/matmul/decode_kernel.hpp"
#include "cpu/vec_kernels.hpp"

#include <algorithm>
#include <array>

namespace sitsrt::cpu {
namespace {

constexpr std::size_t kMaxTargets = 8;

struct PreparedGroup {
  std::array<detail::DecodeKernel, kMaxTargets> kernels{};
  detail::DecodeInput in{};
};

// Checks the weights (same cols) and prepares x once for the kernels that need it.
PreparedGroup prepare(CpuContext& ctx, std::span<const WeightMatrix* const> weights, const float* x, const char* op) {
  if (weights.empty() || weights.size() > kMaxTargets) {
    raise(ErrorCode::kInvalidArgument, "{}: {} weights (1 to {} allowed)", op, weights.size(), kMaxTargets);
  }
  PreparedGroup g;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    detail::check_weight(*weights[i], op);
    detail::check_layout_kernels(ctx, *weights[i], op);
    if (weights[i]->cols == 0) raise(ErrorCode::kInvalidArgument, "{}: weight {} has no columns", op, i);
    if (weights[i]->cols != weights[0]->cols) {
      raise(ErrorCode::kInvalidArgument, "{}: weight {} has {} columns, weight 0 has {}", op, i, weights[i]->cols,
            weights[0]->cols);
    }
    g.kernels[i] = detail::DecodeKernel::for_weight(ctx, weights[i]->layout);
  }
  g.in = detail::prepare_decode_input(ctx, {g.kernels.data(), weights.size()}, x, weights[0]->cols);
  return g;
}

}  // namespace

void matvec_group(CpuContext& ctx, std::span<const MatvecTarget> targets, const float* x) {
  if (targets.empty() || targets.size() > kMaxTargets) {
    raise(ErrorCode::kInvalidArgument, "matvec_group: {} weights (1 to {} allowed)", targets.size(), kMaxTargets);
  }
  std::array<const WeightMatrix*, kMaxTargets> weights{};
  for (std::size_t i = 0; i < targets.size(); ++i) weights[i] = targets[i].weight;
  const PreparedGroup g = prepare(ctx, {weights.data(), targets.size()}, x, "matvec_group");
  // Rows of all targets, concatenated in grain units so every chunk stays grain-aligned in its
  // target(s); a chunk may span the end of one target and the start of the next.
  std::array<std::int64_t, kMaxTargets + 1> first_unit{};
  for (std::size_t i = 0; i < targets.size(); ++i) {
    first_unit[i + 1] = first_unit[i] + (targets[i].weight->rows + detail::kMatvecGrain - 1) / detail::kMatvecGrain;
  }
  detail::for_each_decode_chunk(ctx.pool(), first_unit[targets.size()], [&](Range units) {
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const WeightMatrix& w = *targets[i].weight;
      const std::int64_t begin = std::max(units.begin, first_unit[i]) - first_unit[i];
      const std::int64_t end = std::min(units.end, first_unit[i + 1]) - first_unit[i];
      if (end <= begin) continue;
      g.kernels[i].rows(w, g.in, targets[i].y, begin * detail::kMatvecGrain,
                        std::min(w.rows, end * detail::kMatvecGrain));
    }
  });
}

namespace {

// gate and up products, then `activation_row` of each chunk as soon as its rows are done (still
// in cache).
void matvec_gated(CpuContext& ctx, const WeightMatrix& gate, const WeightMatrix& up, const float* x, float* g, float* u,
                  float* out, void (*activation_row)(const float*, const float*, float*, std::int64_t),
                  const char* op) {
  const std::array<const WeightMatrix*, 2> weights{&gate, &up};
  const PreparedGroup p = prepare(ctx, weights, x, op);
  if (gate.rows != up.rows)
    raise(ErrorCode::kInvalidArgument, "{}: gate has {} rows, up has {}", op, gate.rows, up.rows);
  detail::for_each_decode_row_chunk(ctx.pool(), gate.rows, [&](std::int64_t begin, std::int64_t end) {
    p.kernels[0].rows(gate, p.in, g, begin, end);
    p.kernels[1].rows(up, p.in, u, begin, end);
    activation_row(g + begin, u + begin, out + begin, end - begin);
  });
}

}  // namespace

void matvec_swiglu(CpuContext& ctx, const WeightMatrix& gate, const WeightMatrix& up, const float* x, float* g,
                   float* u, float* out) {
  matvec_gated(ctx, gate, up, x, g, u, out, detail::vec_kernels_for(ctx.isa()).swiglu_row, "matvec_swiglu");
}

void matvec_geglu(CpuContext& ctx, const WeightMatrix& gate, const WeightMatrix& up, const float* x, float* g, float* u,
                  float* out) {
  matvec_gated(ctx, gate, up, x, g, u, out, detail::vec_kernels_for(ctx.isa()).geglu_row, "matvec_geglu");
}

void matvec_add(CpuContext& ctx, const WeightMatrix& w, const float* x, float* y, const float* residual, float* out) {
  const std::array<const WeightMatrix*, 1> weights{&w};
  const PreparedGroup p = prepare(ctx, weights, x, "matvec_add");
  detail::for_each_decode_row_chunk(ctx.pool(), w.rows, [&](std::int64_t begin, std::int64_t end) {
    p.kernels[0].rows(w, p.in, y, begin, end);
    for (std::int64_t i = begin; i < end; ++i) out[i] = residual[i] + y[i];
  });
}

std::size_t matvec_group_shared_bytes(const CpuContext& ctx, std::span<const WeightMatrix* const> weights) noexcept {
  std::size_t bytes = 0;
  for (const WeightMatrix* w : weights) bytes = std::max(bytes, matmul_shared_bytes(ctx, *w, 1));
  return bytes;
}

}  // namespace sitsrt::cpu
