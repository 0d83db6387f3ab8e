// The AMX prefill driver: bf16 copy of x into the shared buffer, then output rows split over the
// pool, each thread running the tile code of gemm_amx.cpp on its rows (see amx_prefill.hpp).
#include "cpu/amx_prefill.hpp"

#include "core/check.hpp"

namespace sitsrt::cpu::detail {
namespace {

std::int64_t round_up(std::int64_t v, std::int64_t to) {
  return (v + to - 1) / to * to;
}

}  // namespace

std::size_t amx_activation_bytes(std::int64_t m, std::int64_t cols) noexcept {
  if (m <= 1 || cols <= 0) return 0;
  return static_cast<std::size_t>(round_up(m, kAmxTile) * round_up(cols, 32)) * sizeof(std::uint16_t);
}

void gemm_amx(CpuContext& ctx, DequantFn dequant, const WeightMatrix& w, const float* x, std::int64_t ldx,
              std::int64_t m, float* y, std::int64_t ldy) {
  const std::int64_t lda = round_up(w.cols, 32), m_rows = round_up(m, kAmxTile);
  auto* a = reinterpret_cast<std::uint16_t*>(ctx.shared(amx_activation_bytes(m, w.cols)));
  ctx.pool().run([&](int t, int n) {
    const Range r = split_range(m_rows, t, n);
    amx_convert_rows(x, ldx, m, w.cols, a, lda, r.begin, r.end);
  });
  const DTypeTraits& tr = traits(w.type);
  const AmxGemmArgs args{dequant, w.data, w.row_stride, tr.block_size, tr.block_bytes, w.cols, a, lda, m, y, ldy};
  ctx.pool().run([&](int t, int n) {
    // Whole 32-row blocks per thread, so only the last block of the matrix can be partial.
    const Range r = split_range(w.rows, t, n, kAmxBlockN);
    if (r.end > r.begin) amx_gemm_rows(args, r.begin, r.end, ctx.scratch(t, static_cast<std::size_t>(kAmxScratchFloats)));
  });
}

}  // namespace sitsrt::cpu::detail
