// The AMX prefill driver: bf16 copy of x into the shared buffer, then blocks of output rows
// handed to the pool's threads, each running the tile code of gemm_amx.cpp (see amx_prefill.hpp).
#include "cpu/matmul/amx_prefill.hpp"

#include <algorithm>
#include <atomic>

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
  const std::int64_t groups = round_up(m, kAmxTile) / kAmxTile;
  auto* b = reinterpret_cast<std::uint16_t*>(ctx.shared(amx_activation_bytes(m, w.cols)));
  ctx.pool().run([&](int t, int n) {
    const Range r = split_range(groups, t, n);
    amx_convert_rows(x, ldx, m, w.cols, b, r.begin, r.end);
  });
  const DTypeTraits& tr = traits(stored_type(w.layout));
  const AmxGemmArgs args{w.layout, dequant, w.data, w.row_stride, tr.block_size, tr.block_bytes, w.cols, b, m, y, ldy};
  // Blocks of kAmxBlockN weight rows are claimed one at a time rather than split up front: a
  // thread the OS deschedules (a co-tenant on the cores) then holds up at most its current block,
  // not half the matrix. Each output is still computed by one thread in a fixed order, so the
  // result does not depend on the thread count or on who claimed what.
  const std::int64_t blocks = (w.rows + kAmxBlockN - 1) / kAmxBlockN;
  std::atomic<std::int64_t> next_block{0};
  ctx.pool().run([&](int t, int) {
    float* scratch = ctx.scratch(t, static_cast<std::size_t>(kAmxScratchFloats));
    for (std::int64_t block = next_block.fetch_add(1); block < blocks; block = next_block.fetch_add(1)) {
      amx_gemm_rows(args, block * kAmxBlockN, std::min(w.rows, (block + 1) * kAmxBlockN), scratch);
    }
  });
}

}  // namespace sitsrt::cpu::detail
