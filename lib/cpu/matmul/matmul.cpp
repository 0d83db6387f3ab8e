// matmul / get_rows: argument checks, ISA dispatch, thread split and prefill tiling.
// The arithmetic lives in matmul_{generic,avx2,avx512}.cpp (see matmul_kernels.hpp).
#include "cpu/matmul/matmul.hpp"

#include "core/check.hpp"
#include "cpu/matmul/amx_prefill.hpp"
#include "core/quant_blocks.hpp"
#include "cpu/matmul/decode_kernel.hpp"

#include <algorithm>
#include <memory>

namespace sitsrt::cpu {
namespace {

using detail::MatmulKernels;

std::int64_t round_up(std::int64_t v, std::int64_t to) {
  return (v + to - 1) / to * to;
}

// Weight-tile stride in floats for a K block of kc elements (vector loads past kc read zeros).
std::int64_t tile_stride(std::int64_t kc) {
  return round_up(kc, 16);
}

// y = x W^T for m == 1: the int8 and fp16 paths prepare x once on the calling thread in the
// shared scratch; rows are claimed by the threads in chunks of whole kMatvecGrain units, one
// fused dequantize-dot per row.
void matvec(CpuContext& ctx, const WeightMatrix& w, const float* x, float* y) {
  const detail::DecodeKernel kernel = detail::DecodeKernel::for_weight(ctx, w.layout);
  const detail::DecodeInput in = detail::prepare_decode_input(ctx, {&kernel, 1}, x, w.cols);
  detail::for_each_decode_row_chunk(ctx.pool(), w.rows, [&](std::int64_t begin, std::int64_t end) {
    kernel.rows(w, in, y, begin, end);
  });
}

// y = x W^T for m > 1. Each thread owns a contiguous range of output rows; for each block of
// kGemmBlockM x rows and kGemmBlockK columns it dequantizes tile_rows weight rows at a time into
// its scratch and runs the ISA tile kernel over them. Weights are dequantized once per M block,
// never as a whole tensor.
void gemm(CpuContext& ctx, const MatmulKernels& kernels, const WeightMatrix& w, const float* x, std::int64_t ldx,
          std::int64_t m, float* y, std::int64_t ldy) {
  const detail::DequantFn dequant = kernels.formats[static_cast<int>(w.layout)].dequant;
#if defined(SITSRT_X86_KERNELS)
  if (ctx.isa() == Isa::kAmx) {
    detail::gemm_amx(ctx, dequant, w, x, ldx, m, y, ldy);
    return;
  }
#endif
  const std::int64_t tile_rows = kernels.tile_rows;
  const std::size_t need = matmul_scratch_floats(w, m);
  const DTypeTraits& tr = traits(stored_type(w.layout));
  // Equal M blocks (a multiple of 6, the widest micro-kernel's rows) of at most kGemmBlockM:
  // m = 128 is one pass, not 120 + 8 with the weights dequantized twice.
  const std::int64_t m_passes = (m + detail::kGemmBlockM - 1) / detail::kGemmBlockM;
  const std::int64_t m_block = std::min(detail::kGemmBlockM, round_up((m + m_passes - 1) / m_passes, 6));
  ctx.pool().run([&](int t, int n) {
    // A row grain of 4 keeps small matrices spread over the threads; tiles and micro-kernels
    // handle any remainder.
    const Range r = split_range(w.rows, t, n, 4);
    if (r.end <= r.begin) return;
    float* tile = ctx.scratch(t, need);
    float* work = tile + detail::kGemmTileRows * tile_stride(std::min(detail::kGemmBlockK, w.cols));
    for (std::int64_t m0 = 0; m0 < m; m0 += m_block) {
      const std::int64_t mb = std::min(m_block, m - m0);
      for (std::int64_t k0 = 0; k0 < w.cols; k0 += detail::kGemmBlockK) {
        const std::int64_t kc = std::min(detail::kGemmBlockK, w.cols - k0);
        const std::int64_t ldw = tile_stride(kc);
        const std::size_t byte_offset =
            static_cast<std::size_t>(k0 / tr.block_size) * static_cast<std::size_t>(tr.block_bytes);
        for (std::int64_t r0 = r.begin; r0 < r.end; r0 += tile_rows) {
          const std::int64_t nr = std::min(tile_rows, r.end - r0);
          for (std::int64_t j = 0; j < nr; ++j) {
            float* dst = tile + j * ldw;
            dequant(w.data + static_cast<std::size_t>(r0 + j) * w.row_stride + byte_offset, dst, kc);
            std::fill(dst + kc, dst + ldw, 0.0f);
          }
          kernels.gemm_tile(x + m0 * ldx + k0, ldx, mb, tile, ldw, nr, kc, y + m0 * ldy + r0, ldy, k0 > 0, work);
        }
      }
    }
  });
}

// Activation rows per pass of the int8 GEMM over a thread's weight chunk: 32 quantized rows of
// 4096 columns (~20 KiB each with their expanded scales and block lanes) stay in L2 while the
// chunk's weight rows stream past them.
constexpr std::int64_t kQgemmBlockM = 32;
constexpr std::int64_t kQgemmSplitQuantizeM = 16;  // see qgemm()

// Bytes of one quantized activation row of the int8 GEMM (64-byte multiple), and of the whole
// shared area: m rows, then their m QuantizedRow descriptors.
std::size_t qgemm_row_bytes(std::int64_t cols) noexcept {
  return detail::quantized_row_bytes(cols);
}
std::size_t qgemm_shared_bytes(std::int64_t cols, std::int64_t m) noexcept {
  return static_cast<std::size_t>(m) * (qgemm_row_bytes(cols) + sizeof(detail::QuantizedRow));
}

// Whether qgemm takes the AMX-INT8 tiles, and the bytes their packed activations add to its
// shared area (after the descriptors, 64-byte aligned).
bool amx_q8_taken(const CpuContext& ctx, const WeightMatrix& w, std::int64_t m) noexcept {
#if defined(SITSRT_X86_KERNELS)
  // Batch-invariant mode takes them for every batch (a row's lane of the tiles never meets another
  // row's), its one-row decode kernel having their numerics (DecodeKernel::for_weight).
  const std::int64_t min_m = ctx.batch_invariant() ? 2 : detail::kQgemmAmxMinM;
  return ctx.isa() == Isa::kAmx && m >= min_m && detail::amx_q8_gemm_layout(w.layout) && ctx.int8_activations();
#else
  (void)ctx, (void)w, (void)m;
  return false;
#endif
}
// (Sized whether or not the context is batch-invariant now: the reservation must hold either way.)
std::size_t amx_q8_bytes(const CpuContext& ctx, const WeightMatrix& w, std::int64_t m) noexcept {
#if defined(SITSRT_X86_KERNELS)
  if (ctx.isa() == Isa::kAmx && m >= 2 && detail::amx_q8_gemm_layout(w.layout) && ctx.int8_activations()) {
    return 64 + detail::amx_q8_activation_bytes(m, w.cols / kQBlock);
  }
#endif
  (void)ctx, (void)w, (void)m;
  return 0;
}

// y = x W^T for m > 1 with int8 activations (`kernel.qdot` set): the m rows are quantized once
// exactly as matvec() quantizes its one row, then the weight rows are claimed in
// decode chunks and each chunk runs against all m rows, kQgemmBlockM at a time, with the
// register-blocked kernel or else the decode kernel per row. Every output is bit-identical to
// matvec() of its row (qdot_kernels.hpp: QgemmFn), so a batch of decode rows gives each sequence
// what it would get alone, whatever m and thread count.
void qgemm(CpuContext& ctx, const detail::DecodeKernel& kernel, const WeightMatrix& w, const float* x,
           std::int64_t ldx, std::int64_t m, float* y, std::int64_t ldy) {
  const std::size_t row_bytes = qgemm_row_bytes(w.cols);
  std::byte* shared = ctx.shared(qgemm_shared_bytes(w.cols, m) + amx_q8_bytes(ctx, w, m));
  auto* rows = reinterpret_cast<detail::QuantizedRow*>(shared + static_cast<std::size_t>(m) * row_bytes);
  const detail::QuantizeRowFn quantize = detail::qdot_kernels_for(ctx.isa()).quantize;
  const detail::QgemmFn gemm_rows = detail::qgemm_kernel_for(ctx.isa(), w.layout);
  // The AVX-512 VNNI Q4_0 GEMM kernels read the block lanes for both layouts (the stored one's
  // decode does not; nor does the AVX2 GEMM).
  const bool lanes = kernel.lanes || (gemm_rows != nullptr && stored_type(w.layout) == DType::kQ4_0 &&
                                      (ctx.isa() == Isa::kAvx512Vnni || ctx.isa() == Isa::kAmx));
  const auto quantize_rows = [&](Range r) {
    for (std::int64_t i = r.begin; i < r.end; ++i) {
      std::byte* buffer = shared + static_cast<std::size_t>(i) * row_bytes;
      std::construct_at(rows + i, quantize(x + i * ldx, w.cols, buffer));
      if (lanes) detail::write_block_lanes(w.cols, buffer);
    }
  };
  // A decode batch is quantized on the calling thread (one dispatch per matmul); from
  // kQgemmSplitQuantizeM rows the threads share it first: 256 rows of 2816 take ~1 ms on one
  // thread, 10-20% of the product at 2 threads, against a few microseconds for the extra dispatch.
  if (m >= kQgemmSplitQuantizeM && ctx.pool().size() > 1) {
    ctx.pool().run([&](int t, int n) { quantize_rows(split_range(m, t, n)); });
  } else {
    quantize_rows({0, m});
  }
#if defined(SITSRT_X86_KERNELS)
  // At the amx level Q8_0 batches take the AMX-INT8 tiles (whole-block sums; float rounding away
  // from the one-row VNNI decode kernel, so batch-invariant mode sends every batch here and decodes
  // one row with the tiles' numerics): activations packed once, weight rows in chunks of whole
  // 16-row tiles.
  if (amx_q8_taken(ctx, w, m)) {
    auto* packed = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(rows + m) + 63) / 64 * 64);
    const detail::AmxQ8Activations a{rows, packed, m, w.cols / kQBlock};
    const std::int64_t groups = (m + 15) / 16;
    const bool as_a = w.layout == WeightLayout::kQ8_0P;  // its blocks are the B tiles: activations as A
    if (groups > 1 && ctx.pool().size() > 1) {
      ctx.pool().run([&](int t, int n) {
        const Range r = split_range(groups, t, n);
        detail::amx_q8_pack(a, r.begin, r.end, as_a);
      });
    } else {
      detail::amx_q8_pack(a, 0, groups, as_a);
    }
    detail::for_each_decode_chunk(ctx.pool(), (w.rows + 15) / 16, [&](Range units) {
      detail::amx_q8_gemm_rows(w.layout, w.data, w.row_stride, a, y, ldy, 16 * units.begin,
                               std::min(w.rows, 16 * units.end));
    });
    return;
  }
#endif
  detail::for_each_decode_row_chunk(ctx.pool(), w.rows, [&](std::int64_t begin, std::int64_t end) {
    const std::byte* first = w.data + static_cast<std::size_t>(begin) * w.row_stride;
    for (std::int64_t i0 = 0; i0 < m; i0 += kQgemmBlockM) {
      const std::int64_t mb = std::min(kQgemmBlockM, m - i0);
      if (gemm_rows != nullptr) {
        gemm_rows(first, w.row_stride, rows + i0, mb, y + i0 * ldy + begin, ldy, end - begin);
      } else {
        for (std::int64_t i = i0; i < i0 + mb; ++i) kernel.qdot(first, w.row_stride, rows[i], y + i * ldy + begin, end - begin);
      }
    }
  });
}

// The int8 GEMM serves m > 1 wherever decode has an integer kernel for the layout, up to
// qgemm_max_m rows (every m with the AVX-512 VNNI kernels, decode batches otherwise).
detail::DecodeKernel int8_gemm_kernel(const CpuContext& ctx, const WeightMatrix& w, std::int64_t m) noexcept {
  detail::DecodeKernel k = detail::DecodeKernel::for_weight(ctx, w.layout);
  if (k.qdot == nullptr || w.cols % kQBlock != 0) return {};
  // Past it the float GEMM is faster; batch invariance keeps the int8 GEMM (a row's result must
  // not depend on how many rows share its step).
  if (m > detail::qgemm_max_m(ctx.isa(), w.layout) && !ctx.batch_invariant()) return {};
  return k;
}

}  // namespace

namespace detail {

void check_weight(const WeightMatrix& w, const char* op) {
  if (w.rows < 0 || w.cols < 0)
    raise(ErrorCode::kInvalidArgument, "{}: negative weight shape {}x{}", op, w.rows, w.cols);
  if (!fits_blocks(w.layout, w.cols)) {
    raise(ErrorCode::kInvalidArgument, "{}: {} columns are not a whole number of {} blocks", op, w.cols,
          name(w.layout));
  }
  if (w.row_stride < row_bytes(w.layout, w.cols)) {
    raise(ErrorCode::kInvalidArgument, "{}: row_stride {} is below the {} bytes of a {}-column {} row", op,
          w.row_stride, row_bytes(w.layout, w.cols), w.cols, name(w.layout));
  }
  if (w.data == nullptr && w.rows > 0 && w.cols > 0) raise(ErrorCode::kInvalidArgument, "{}: null weight data", op);
}

void check_layout_kernels(const CpuContext& ctx, const WeightMatrix& w, const char* op) {
  // A tiled layout has no float kernels (its rows have no addresses of their own), only the
  // integer ones that resident_layout chose it for.
  if (is_tiled(w.layout) &&
      (!ctx.int8_activations() || qdot_kernels_for(ctx.isa()).matvec[static_cast<int>(w.layout)] == nullptr ||
       qgemm_kernel_for(ctx.isa(), w.layout) == nullptr)) {
    raise(ErrorCode::kInvalidArgument, "{}: {} weights need int8 activations and the avx512vnni kernels (isa {})", op,
          name(w.layout), name(ctx.isa()));
  }
}

DecodeKernel DecodeKernel::for_weight(const CpuContext& ctx, WeightLayout layout) noexcept {
  DecodeKernel k;
  if (ctx.int8_activations() && (layout != WeightLayout::kQ4_KR || q4_kr_decode_native(ctx.isa()))) {
    k.qdot = qdot_kernels_for(ctx.isa()).matvec[static_cast<int>(layout)];
#if defined(SITSRT_X86_KERNELS)
    // Batch-invariant mode: where batches scale whole-block sums (Q8_0 / Q8_0R: on the AMX-INT8
    // tiles at every m >= 2; in whole 16-row tiles with VNNI at avx512vnni), one row takes a
    // kernel with their numerics.
    if (ctx.batch_invariant() && ctx.isa() == Isa::kAmx && amx_q8_layout(layout)) k.qdot = qdot_amx_numerics(layout);
    if (ctx.batch_invariant() && ctx.isa() == Isa::kAvx512Vnni && amx_q8_layout(layout))
      k.qdot = qdot_q8_block_sums(layout);
#endif
    k.lanes = k.qdot != nullptr && (layout == WeightLayout::kQ4_0R || layout == WeightLayout::kQ4_KR);
  }
  if (k.qdot == nullptr && layout == WeightLayout::kFP8_E4M3R && fp8r_decode_native(ctx.isa())) {
    k.half = matvec_fp8r_half_avx512fp16;
  }
  if (!k.needs_input()) k.matvec = matmul_kernels_for(ctx.isa()).formats[static_cast<int>(layout)].matvec;
  return k;
}

namespace {
// The int8 row first, the fp16 row after it (64-byte aligned: quantized_row_bytes is a multiple).
std::size_t quantized_part_bytes(const CpuContext& ctx, std::int64_t cols) noexcept {
  return ctx.int8_activations() ? quantized_row_bytes(cols) : 0;
}
std::size_t half_part_bytes(const CpuContext& ctx, std::int64_t cols) noexcept {
  return fp8r_decode_native(ctx.isa()) && cols % kFp8Block == 0 ? half_row_bytes(cols) : 0;
}
}  // namespace

std::size_t decode_input_bytes(const CpuContext& ctx, const DecodeKernel& kernel, std::int64_t cols) noexcept {
  if (!kernel.needs_input()) return 0;
  return quantized_part_bytes(ctx, cols) + half_part_bytes(ctx, cols);
}

DecodeInput prepare_decode_input(CpuContext& ctx, std::span<const DecodeKernel> kernels, const float* x,
                                 std::int64_t cols) {
  DecodeInput in{x, {}, {}};
  bool int8 = false, lanes = false, half = false;
  for (const DecodeKernel& k : kernels) {
    int8 = int8 || k.qdot != nullptr;
    lanes = lanes || k.lanes;
    half = half || k.half != nullptr;
  }
  if (!int8 && !half) return in;
  const std::size_t q_bytes = quantized_part_bytes(ctx, cols);
  std::byte* shared = ctx.shared(q_bytes + half_part_bytes(ctx, cols));
  if (int8) in.q = qdot_kernels_for(ctx.isa()).quantize(x, cols, shared);
  if (lanes) write_block_lanes(cols, shared);
  if (half) in.h = prepare_half_row_avx512fp16(x, cols, shared + q_bytes);
  return in;
}

}  // namespace detail

bool matvec_fusable(const CpuContext& ctx, const WeightMatrix& w) noexcept {
  return !ctx.batch_invariant() || int8_gemm_kernel(ctx, w, 1).qdot != nullptr;
}

void matmul(CpuContext& ctx, const WeightMatrix& w, const float* x, std::int64_t ldx, std::int64_t m, float* y,
            std::int64_t ldy) {
  detail::check_weight(w, "matmul");
  detail::check_layout_kernels(ctx, w, "matmul");
  if (m < 0) raise(ErrorCode::kInvalidArgument, "matmul: negative batch m = {}", m);
  if (m > 1 && ldx < w.cols) raise(ErrorCode::kInvalidArgument, "matmul: ldx {} < cols {}", ldx, w.cols);
  if (m > 1 && ldy < w.rows) raise(ErrorCode::kInvalidArgument, "matmul: ldy {} < rows {}", ldy, w.rows);
  if (m == 0 || w.rows == 0) return;
  if (w.cols == 0) {  // empty sums: nothing to read, every output is 0
    for (std::int64_t i = 0; i < m; ++i) std::fill(y + i * ldy, y + i * ldy + w.rows, 0.0f);
    return;
  }
  const MatmulKernels& kernels = detail::matmul_kernels_for(ctx.isa());
  // int8 rows give the one-row decode's bits at any m; float one-row decode differs from the
  // GEMM, so batch invariance sends one float row through the GEMM.
  const detail::DecodeKernel k = int8_gemm_kernel(ctx, w, m);
  if (m == 1 && matvec_fusable(ctx, w)) {
    matvec(ctx, w, x, y);
  } else if (k.qdot != nullptr) {
    qgemm(ctx, k, w, x, ldx, m, y, ldy);
  } else {
    gemm(ctx, kernels, w, x, ldx, m, y, ldy);
  }
}

std::size_t matmul_shared_bytes(const CpuContext& ctx, const WeightMatrix& w, std::int64_t m) noexcept {
  if (m > 1) {
    // Any batch of 2..m rows: those the int8 GEMM takes need m (or qgemm_max_m) int8 rows,
    // larger ones at Isa::kAmx the bf16 copy of x.
    std::size_t bytes = ctx.isa() == Isa::kAmx ? detail::amx_activation_bytes(m, w.cols) : 0;
    if (int8_gemm_kernel(ctx, w, 2).qdot != nullptr) {
      const std::int64_t rows = ctx.batch_invariant() ? m : std::min(m, detail::qgemm_max_m(ctx.isa(), w.layout));
      bytes = std::max(bytes, qgemm_shared_bytes(w.cols, rows) + amx_q8_bytes(ctx, w, rows));
    }
    return bytes;
  }
  if (m != 1) return 0;
  return detail::decode_input_bytes(ctx, detail::DecodeKernel::for_weight(ctx, w.layout), w.cols);
}

std::size_t matmul_scratch_floats(const WeightMatrix& w, std::int64_t m) noexcept {
  if (m <= 1 || w.cols <= 0) return 0;
  const std::int64_t kc = std::min(detail::kGemmBlockK, w.cols);
  // tile + kernel work copy; or the AMX gemm's tiles when the context runs at Isa::kAmx
  return static_cast<std::size_t>(std::max(2 * detail::kGemmTileRows * tile_stride(kc), detail::kAmxScratchFloats));
}

void get_rows(CpuContext& ctx, const WeightMatrix& table, const std::int32_t* ids, std::int64_t n, float* out,
              std::int64_t ldo) {
  detail::check_weight(table, "get_rows");
  if (n < 0) raise(ErrorCode::kInvalidArgument, "get_rows: negative id count {}", n);
  if (n > 1 && ldo < table.cols) raise(ErrorCode::kInvalidArgument, "get_rows: ldo {} < cols {}", ldo, table.cols);
  for (std::int64_t i = 0; i < n; ++i) {  // all ids are checked before anything is written
    if (ids[i] < 0 || ids[i] >= table.rows) {
      raise(ErrorCode::kInvalidArgument, "get_rows: id {} (at index {}) is outside the table's {} rows", ids[i], i,
            table.rows);
    }
  }
  const detail::DequantFn dequant =
      detail::matmul_kernels_for(ctx.isa()).formats[static_cast<int>(table.layout)].dequant;
  ctx.pool().run([&](int t, int threads) {
    const Range r = split_range(n, t, threads);
    for (std::int64_t i = r.begin; i < r.end; ++i) {
      if (is_tiled(table.layout)) {  // a tied embedding and output head
        dequantize_matrix_row(table, ids[i], out + i * ldo);
      } else {
        dequant(table.data + static_cast<std::size_t>(ids[i]) * table.row_stride, out + i * ldo, table.cols);
      }
    }
  });
}

}  // namespace sitsrt::cpu
