// The CUDA decode kernels' lane logic (cuda/kernels/planar_units.hpp), compiled here for the host
// with each intrinsic replaced by its exact host equivalent: for every planar format, the unit
// loads, side data, nibble / bit-pair assembly and x offsets a lane uses, accumulated over a
// row's units for 4 weight rows and 1-3 rows of x at once, equal the double reference of the
// decoded weights. This is the kernel's per-thread arithmetic checked without a GPU; the block
// reduction and launch shape are covered by the [cuda] tests on a device. The tensor-core kernel's
// lanes (cuda/kernels/mma_units.hpp) likewise: their fragments through an emulated
// mma.m16n8k16 (the PTX ISA's fragment layout), split-K over 8 warps as the kernel splits it.
#include "core/quant_blocks.hpp"
#include "cuda_backend/device_formats.hpp"
#include "cuda_backend/kernels/mma_units.hpp"
#include "cuda_backend/kernels/planar_units.hpp"
#include "cuda_backend/planar_weights.hpp"
#include "support/mma_emulation.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace sitsrt {
namespace {

constexpr int kOutputs = 4;  // as planar_matmul.cu

// n stored rows of `cols` quantized from fresh normals (a different scale per row, one large
// value per row so the block scales differ), packed into the planar layout.
struct PlanarMatrix {
  std::vector<std::uint8_t> stored, planes;
  std::size_t stride = 0;
  cuda::PlanarGeometry g;
};

PlanarMatrix make_matrix(DType f, std::int64_t n, std::int64_t cols, test::Rng& rng) {
  PlanarMatrix m;
  m.stride = row_bytes(f, cols);
  m.stored.resize(m.stride * static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < n; ++r) {
    std::vector<float> x = rng.normals(static_cast<std::size_t>(cols), 0.02f * static_cast<float>(1 + r % 5));
    x[static_cast<std::size_t>((r * 37) % cols)] *= 40.0f;
    quantize_row(f, x.data(), m.stored.data() + static_cast<std::size_t>(r) * m.stride, cols);
  }
  m.g = cuda::planar_geometry(f, n, cols);
  m.planes.assign(static_cast<std::size_t>(m.g.scales_of(n)), 0x5a);
  for (std::int64_t r = 0; r < n; ++r) {
    cuda::planar_pack_row(f, m.stored.data() + static_cast<std::size_t>(r) * m.stride, cols,
                          m.planes.data() + r * m.g.code_row_bytes, m.planes.data() + m.g.scales_of(r));
  }
  return m;
}

// A block's kOuts outputs from j0 (past n: the last row, as the kernels load it) for the first
// `rows` of kCols accumulated rows of x, against the double reference: within rel * sum |products|;
// the accumulators past `rows` exactly zero.
template <DType F, int kOuts, int kCols>
void check_outputs(const PlanarMatrix& m, std::int64_t n, std::int64_t cols, const std::vector<float>& x,
                   std::int64_t ldx, int rows, bool vector, std::int64_t j0, const double (&got)[kOuts][kCols],
                   double rel) {
  for (int o = 0; o < kOuts; ++o) {
    const std::int64_t j = j0 + o < n ? j0 + o : n - 1;
    const std::uint8_t* row = m.stored.data() + static_cast<std::size_t>(j) * m.stride;
    for (int r = rows; r < kCols; ++r) REQUIRE(got[o][r] == 0.0);
    for (int r = 0; r < rows; ++r) {
      double want = 0.0, magnitude = 0.0;
      for (std::int64_t e = 0; e < cols; ++e) {
        const double p =
            static_cast<double>(cuda::decode_element<F>(row, e)) * x[static_cast<std::size_t>(r * ldx + e)];
        want += p;
        magnitude += std::fabs(p);
      }
      INFO(name(F) << " cols " << cols << " output " << j << " row " << r << " of " << rows << " vector " << vector);
      REQUIRE(std::fabs(got[o][r] - want) <= rel * magnitude + 1e-30);
    }
  }
}

// Outputs j0 .. j0 + 3 (rows past n clamped to n - 1, as the kernel loads them) for the first
// `rows` of kRows accumulated rows of x, each lane's units summed as the kernel's threads do
// (unit u on lane u % 128), then the lanes in order; the accumulators past `rows` stay zero.
template <DType F, int kRows, int kOuts = kOutputs>
void check_block(const PlanarMatrix& m, std::int64_t n, std::int64_t cols, const std::vector<float>& x,
                 std::int64_t ldx, int rows, bool vector, std::int64_t j0) {
  constexpr int kLanes = 128;
  double got[kOuts][kRows] = {};
  for (int lane = 0; lane < kLanes; ++lane) {
    float acc[kOuts][kRows] = {};
    for (std::int64_t u = lane; u < m.g.units; u += kLanes) {
      cuda::planar::uint4 w[kOuts][cuda::planar::kLoads<F>];
      cuda::planar::Side<F> s[kOuts];
      for (int o = 0; o < kOuts; ++o) {
        const std::int64_t j = j0 + o < n ? j0 + o : n - 1;
        cuda::planar::load_codes<F>(m.planes.data() + j * m.g.code_row_bytes, u, w[o]);
        s[o] = cuda::planar::load_side<F>(m.planes.data() + m.g.scales_of(j), u);
      }
      const cuda::planar::XTile tile{x.data(), ldx, rows, vector};
      cuda::planar::accumulate_unit<F, kOuts, kRows>(w, s, tile, u, acc);
    }
    for (int o = 0; o < kOuts; ++o) {
      for (int r = 0; r < kRows; ++r) got[o][r] += acc[o][r];
    }
  }
  // float sums of cols exact products: a few ulps of the magnitude per add
  check_outputs<F>(m, n, cols, x, ldx, rows, vector, j0, got, 1e-6);
}

// decode_unit over every unit of every row (the prefill GEMM's BF16 conversion runs it a unit a
// thread): each element exactly once, each weight decode_element's float bit for bit.
template <DType F>
void check_decode_units(std::int64_t cols, std::uint64_t seed) {
  test::Rng rng(seed);
  const std::int64_t n = 3;
  const PlanarMatrix m = make_matrix(F, n, cols, rng);
  for (std::int64_t j = 0; j < n; ++j) {
    std::vector<float> got(static_cast<std::size_t>(cols), std::numeric_limits<float>::quiet_NaN());
    std::vector<int> seen(static_cast<std::size_t>(cols), 0);
    for (std::int64_t u = 0; u < m.g.units; ++u) {
      cuda::planar::uint4 w[1][cuda::planar::kLoads<F>];
      cuda::planar::Side<F> s[1];
      cuda::planar::load_codes<F>(m.planes.data() + j * m.g.code_row_bytes, u, w[0]);
      s[0] = cuda::planar::load_side<F>(m.planes.data() + m.g.scales_of(j), u);
      cuda::planar::decode_unit<F, 1>(w, s, u, [&](std::int64_t offset, const float(&wf)[1][4]) {
        REQUIRE(offset >= 0);
        REQUIRE(offset + 4 <= cols);
        for (int i = 0; i < 4; ++i) {
          got[static_cast<std::size_t>(offset + i)] = wf[0][i];
          ++seen[static_cast<std::size_t>(offset + i)];
        }
      });
    }
    const std::uint8_t* row = m.stored.data() + static_cast<std::size_t>(j) * m.stride;
    for (std::int64_t e = 0; e < cols; ++e) {
      INFO(name(F) << " cols " << cols << " row " << j << " element " << e);
      REQUIRE(seen[static_cast<std::size_t>(e)] == 1);
      const float want = cuda::decode_element<F>(row, e);
      REQUIRE(std::memcmp(&got[static_cast<std::size_t>(e)], &want, sizeof want) == 0);
    }
  }
}

template <DType F>
void check_format(std::int64_t cols, std::uint64_t seed) {
  test::Rng rng(seed);
  const std::int64_t n = 7;  // two blocks of outputs, the second clamped past n
  const PlanarMatrix m = make_matrix(F, n, cols, rng);
  REQUIRE(m.g.code_row_bytes % 16 == 0);
  for (const std::int64_t ldx : {cols, cols + 3}) {
    std::vector<float> x(static_cast<std::size_t>(16 * ldx));
    for (float& v : x) v = rng.normal();
    for (std::int64_t j0 = 0; j0 < n; j0 += kOutputs) {
      check_block<F, 1>(m, n, cols, x, ldx, 1, ldx % 4 == 0, j0);
      check_block<F, 4>(m, n, cols, x, ldx, 3, false, j0);  // a tile of 3 rows in the 4-row kernel
      check_block<F, 4>(m, n, cols, x, ldx, 4, false, j0);
    }
    // the 16-row tiles: 2 outputs a block, 13 rows in the 16-row kernel
    for (std::int64_t j0 = 0; j0 < n; j0 += 2) check_block<F, 16, 2>(m, n, cols, x, ldx, 13, ldx % 4 == 0, j0);
  }
  check_decode_units<F>(cols, seed + 1000);  // the BF16 conversion's use of the same lane logic
}

TEST_CASE("cuda planar lanes: every format's unit decode and x offsets equal the reference (decode_unit alone too)",
          "[cuda-formats]") {
  // one unit per lane and several (the 128 lanes wrap), and rows of several blocks / super-blocks
  check_format<DType::kFP8_E4M3>(192, 1);
  check_format<DType::kFP8_E4M3>(4096, 2);
  check_format<DType::kQ4_G128>(384, 3);
  check_format<DType::kQ4_G128>(8192, 4);
  check_format<DType::kQ8_0>(96, 5);
  check_format<DType::kQ8_0>(4096, 6);
  check_format<DType::kQ4_0>(96, 7);
  check_format<DType::kQ4_0>(8192, 8);
  check_format<DType::kIQ4_NL>(96, 31);
  check_format<DType::kIQ4_NL>(4096, 32);
  check_format<DType::kQ4_1>(96, 17);
  check_format<DType::kQ4_1>(4096, 18);
  check_format<DType::kQ5_0>(96, 19);
  check_format<DType::kQ5_0>(4096, 20);
  check_format<DType::kQ5_1>(96, 21);
  check_format<DType::kQ5_1>(4096, 22);
  check_format<DType::kQ5_K>(256, 23);
  check_format<DType::kQ5_K>(8192, 24);
  check_format<DType::kQ4_K>(256, 9);
  check_format<DType::kQ4_K>(8192, 10);
  check_format<DType::kQ6_K>(256, 11);
  check_format<DType::kQ6_K>(12288, 12);
  check_format<DType::kF16>(40, 13);
  check_format<DType::kF16>(2048, 14);
  check_format<DType::kBF16>(24, 15);
  check_format<DType::kBF16>(2048, 16);
}

using cuda::mma::FragA;
using cuda::mma::FragB;
using test::emulated_mma;

// The tensor-core kernel's block of 32 outputs from j0 (two m16 tiles; past n the last row
// again) over `rows` rows of x in kNTiles n8 tiles: each warp's scale blocks (every 8th), each
// lane's units, side data and fragments as the kernel builds them, the block's sums scaled per
// weight row; against the double reference, within x's hi / lo rounding (2^-16 of each product).
template <DType F, int kNTiles>
void check_mma_block(const PlanarMatrix& m, std::int64_t n, std::int64_t cols, const std::vector<float>& x,
                     std::int64_t ldx, int rows, bool vector, std::int64_t j0) {
  namespace mma = cuda::mma;
  constexpr int kWarps = 8, kTiles = 2;
  double got[32][8 * kNTiles] = {};
  const std::int64_t blocks = m.g.units / 4;
  const cuda::planar::XTile xt{x.data(), ldx, rows, vector};
  const auto row_of = [&](int mt, int lane, int h) {
    const std::int64_t j = j0 + 16 * mt + lane / 4 + 8 * h;
    return j < n ? j : n - 1;
  };
  for (int warp = 0; warp < kWarps; ++warp) {
    for (std::int64_t b = warp; b < blocks; b += kWarps) {
      cuda::planar::uint4 w[kTiles][32][2][1];
      mma::BlockSide side[kTiles][32][2];
      for (int mt = 0; mt < kTiles; ++mt) {
        for (int lane = 0; lane < 32; ++lane) {
          for (int h = 0; h < 2; ++h) {
            const std::int64_t j = row_of(mt, lane, h);
            cuda::planar::load_codes<F>(m.planes.data() + j * m.g.code_row_bytes, 4 * b + lane % 4, w[mt][lane][h]);
            side[mt][lane][h] = mma::load_block_side<F>(m.planes.data() + m.g.scales_of(j), b);
          }
        }
      }
      double block_sum[kTiles][kNTiles][32][4] = {};
      for (int step = 0; step < mma::kSteps<F>; ++step) {
        FragB hi[kNTiles][32], lo[kNTiles][32];
        FragA a[kTiles][32];
        for (int lane = 0; lane < 32; ++lane) {
          for (int nt = 0; nt < kNTiles; ++nt) {
            mma::b_fragments<F>(xt, 8 * nt + lane / 4, 4 * b + lane % 4, step, hi[nt][lane], lo[nt][lane]);
          }
          for (int mt = 0; mt < kTiles; ++mt) {
            a[mt][lane] =
                mma::a_fragment<F>(w[mt][lane][0][0], w[mt][lane][1][0], side[mt][lane][0], side[mt][lane][1], step);
          }
        }
        for (int mt = 0; mt < kTiles; ++mt) {
          for (int nt = 0; nt < kNTiles; ++nt) {
            emulated_mma(a[mt], hi[nt], block_sum[mt][nt]);
            emulated_mma(a[mt], lo[nt], block_sum[mt][nt]);
          }
        }
      }
      for (int mt = 0; mt < kTiles; ++mt) {
        for (int nt = 0; nt < kNTiles; ++nt) {
          for (int lane = 0; lane < 32; ++lane) {
            for (int i = 0; i < 4; ++i) {
              const int o = 16 * mt + mma::c_row(lane, i), r = 8 * nt + mma::c_column(lane, i);
              got[o][r] += side[mt][lane][i / 2].scale * block_sum[mt][nt][lane][i];
            }
          }
        }
      }
    }
  }
  check_outputs<F>(m, n, cols, x, ldx, rows, vector, j0, got, std::ldexp(1.0, -16));
}

template <DType F>
void check_mma_format(std::int64_t cols, std::uint64_t seed) {
  test::Rng rng(seed);
  const std::int64_t n = 40;  // a block of 32 outputs, then one clamped past n
  const PlanarMatrix m = make_matrix(F, n, cols, rng);
  for (const std::int64_t ldx : {cols, cols + 2}) {
    std::vector<float> x(static_cast<std::size_t>(16 * ldx));
    for (float& v : x) v = rng.normal();
    x[5] = 3.0e5f;  // beyond f16's range: BF16 keeps it
    for (std::int64_t j0 = 0; j0 < n; j0 += 32) {
      check_mma_block<F, 1>(m, n, cols, x, ldx, 5, ldx % 4 == 0, j0);
      check_mma_block<F, 2>(m, n, cols, x, ldx, 13, ldx % 4 == 0, j0);
      check_mma_block<F, 2>(m, n, cols, x, ldx, 16, false, j0);
    }
  }
}

// The quarter kernel's block of 32 outputs from j0 (planar_mma.cu planar_mma_quarter_kernel):
// each warp's chunks, each lane's words, chunk side data, step codes, scales, offsets and x sums
// (an all-ones A) as the kernel builds them, through the emulated mma; against the double
// reference within x's hi / lo rounding.
template <DType F, int kNTiles>
void check_quarter_block(const PlanarMatrix& m, std::int64_t n, std::int64_t cols, const std::vector<float>& x,
                         std::int64_t ldx, int rows, bool vector, std::int64_t j0) {
  namespace mma = cuda::mma;
  constexpr int kWarps = 8, kTiles = 2, kChunk = mma::kChunkUnits<F>, kLoads = mma::kQuarterLoads<F>;
  double got[32][8 * kNTiles] = {};
  const std::int64_t units = mma::quarter_units<F>(m.g.units);
  const cuda::planar::XTile xt{x.data(), ldx, rows, vector};
  const auto row_of = [&](int mt, int lane, int h) {
    const std::int64_t j = j0 + 16 * mt + lane / 4 + 8 * h;
    return j < n ? j : n - 1;
  };
  FragA ones[32];
  for (FragA& a : ones) a = {{mma::kOnesBf16x2, mma::kOnesBf16x2, mma::kOnesBf16x2, mma::kOnesBf16x2}};
  for (int warp = 0; warp < kWarps; ++warp) {
    for (std::int64_t u0 = static_cast<std::int64_t>(warp) * kChunk; u0 < units; u0 += kWarps * kChunk) {
      std::vector<std::uint32_t> words(static_cast<std::size_t>(kChunk * kTiles * 32 * 2 * kLoads));
      const auto word_at = [&](int c, int mt, int lane, int h) {
        return reinterpret_cast<std::uint32_t(*)[kLoads]>(
            &words[static_cast<std::size_t>((((c * kTiles + mt) * 32 + lane) * 2 + h) * kLoads)]);
      };
      std::vector<mma::ChunkSide<F>> sides(static_cast<std::size_t>(kTiles * 32 * 2));
      const auto side_at = [&](int mt, int lane, int h) -> mma::ChunkSide<F>& {
        return sides[static_cast<std::size_t>((mt * 32 + lane) * 2 + h)];
      };
      for (int mt = 0; mt < kTiles; ++mt) {
        for (int lane = 0; lane < 32; ++lane) {
          for (int h = 0; h < 2; ++h) {
            const std::int64_t j = row_of(mt, lane, h);
            for (int c = 0; c < kChunk; ++c) {
              const std::int64_t u = u0 + c < units ? u0 + c : units - 1;
              mma::load_quarter<F>(m.planes.data() + j * m.g.code_row_bytes, u, lane % 4, *word_at(c, mt, lane, h));
            }
            side_at(mt, lane, h).load(m.planes.data() + m.g.scales_of(j), u0, units, lane % 4);
          }
        }
      }
      for (int c = 0; c < kChunk && u0 + c < units; ++c) {
        const std::int64_t u = u0 + c;
        for (int step = 0; step < mma::kQuarterSteps<F>; ++step) {
          FragB hi[kNTiles][32], lo[kNTiles][32];
          double sums[kNTiles][32][4] = {};
          for (int nt = 0; nt < kNTiles; ++nt) {
            for (int lane = 0; lane < 32; ++lane) {
              mma::quarter_b_fragments<F>(xt, 8 * nt + lane / 4, u, step, lane % 4, hi[nt][lane], lo[nt][lane]);
            }
            emulated_mma(ones, hi[nt], sums[nt]);
            emulated_mma(ones, lo[nt], sums[nt]);
          }
          for (int mt = 0; mt < kTiles; ++mt) {
            FragA a[32];
            mma::StepScale scale[32][2];
            for (int lane = 0; lane < 32; ++lane) {
              for (int h = 0; h < 2; ++h) {
                const cuda::planar::Side<F> s = side_at(mt, lane, h).unit(c);
                mma::step_codes<F>(*word_at(c, mt, lane, h), s, u, lane % 4, step, a[lane].r[h], a[lane].r[2 + h]);
                scale[lane][h] = mma::step_scale<F>(s, u, step);
              }
            }
            FragA a_lo[32] = {};  // F16: the weights' lo parts
            if constexpr (mma::kWeightSplit<F>) {
              for (int lane = 0; lane < 32; ++lane) {
                for (int h = 0; h < 2; ++h) {
                  mma::step_codes_lo<F>(*word_at(c, mt, lane, h), a_lo[lane].r[h], a_lo[lane].r[2 + h]);
                }
              }
            }
            for (int nt = 0; nt < kNTiles; ++nt) {
              double sum[32][4] = {};
              emulated_mma(a, hi[nt], sum);
              emulated_mma(a, lo[nt], sum);
              if constexpr (mma::kWeightSplit<F>) {
                FragB finite_hi[32];
                for (int lane = 0; lane < 32; ++lane) {
                  finite_hi[lane] = {{mma::finite_bf16x2(hi[nt][lane].r[0]), mma::finite_bf16x2(hi[nt][lane].r[1])}};
                }
                emulated_mma(a_lo, finite_hi, sum);
                emulated_mma(a_lo, lo[nt], sum);
              }
              for (int lane = 0; lane < 32; ++lane) {
                for (int i = 0; i < 4; ++i) {
                  const mma::StepScale& sc = scale[lane][i / 2];
                  got[16 * mt + mma::c_row(lane, i)][8 * nt + mma::c_column(lane, i)] +=
                      sc.scale * sum[lane][i] + (mma::kQuarterOffset<F> ? sc.offset * sums[nt][lane][i] : 0.0);
                }
              }
            }
          }
        }
      }
    }
  }
  // the offset formats' mins meet x's rounding through its sums as well: twice the bound
  check_outputs<F>(m, n, cols, x, ldx, rows, vector, j0, got, std::ldexp(1.0, -15));
}

template <DType F>
void check_quarter_format(std::int64_t cols, std::uint64_t seed) {
  test::Rng rng(seed);
  const std::int64_t n = 40;
  const PlanarMatrix m = make_matrix(F, n, cols, rng);
  for (const std::int64_t ldx : {cols, cols + 2}) {
    std::vector<float> x(static_cast<std::size_t>(16 * ldx));
    for (float& v : x) v = rng.normal();
    for (std::int64_t j0 = 0; j0 < n; j0 += 32) {
      check_quarter_block<F, 1>(m, n, cols, x, ldx, 6, ldx % 4 == 0, j0);
      check_quarter_block<F, 2>(m, n, cols, x, ldx, 14, false, j0);
    }
  }
}

TEST_CASE("cuda mma lanes: the quarter scheme's fragments (GGUF block formats, F16, BF16) equal the reference",
          "[cuda-formats]") {
  // partial last chunks (a unit count not a multiple of the chunk), and several chunks per warp
  check_quarter_format<DType::kQ8_0>(96, 51);
  check_quarter_format<DType::kQ8_0>(2048, 52);
  check_quarter_format<DType::kQ4_0>(96, 53);
  check_quarter_format<DType::kQ4_0>(4096, 54);
  check_quarter_format<DType::kQ4_1>(160, 55);
  check_quarter_format<DType::kQ5_0>(96, 56);
  check_quarter_format<DType::kQ5_0>(2048, 57);
  check_quarter_format<DType::kQ5_1>(160, 58);
  check_quarter_format<DType::kIQ4_NL>(96, 59);
  check_quarter_format<DType::kIQ4_NL>(2048, 60);
  check_quarter_format<DType::kQ4_K>(256, 61);
  check_quarter_format<DType::kQ4_K>(4096, 62);
  check_quarter_format<DType::kQ5_K>(256, 63);
  check_quarter_format<DType::kQ5_K>(4096, 64);
  check_quarter_format<DType::kQ6_K>(256, 65);
  check_quarter_format<DType::kQ6_K>(4096, 66);
  check_quarter_format<DType::kF16>(48, 67);  // 3 steps: fewer chunks than warps, a partial one
  check_quarter_format<DType::kF16>(2048, 68);
  check_quarter_format<DType::kBF16>(48, 69);
  check_quarter_format<DType::kBF16>(2048, 70);
}

TEST_CASE("cuda mma lanes: the tensor-core decode's fragments through an emulated mma equal the reference",
          "[cuda-formats]") {
  // one scale block per warp and several (the 8 warps wrap), idle warps at 3 blocks
  check_mma_format<DType::kFP8_E4M3>(192, 41);
  check_mma_format<DType::kFP8_E4M3>(2048, 42);
  check_mma_format<DType::kQ4_G128>(384, 43);
  check_mma_format<DType::kQ4_G128>(4096, 44);
}

TEST_CASE("cuda mma lanes: BF16 hi / lo split and code conversions are exact where they must be", "[cuda-formats]") {
  namespace mma = cuda::mma;
  // c_row / c_column: the PTX ISA's C layout (row g + 8 (i / 2), column 2t + i % 2), every place once
  int seen[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) ++seen[mma::c_row(lane, i)][mma::c_column(lane, i)];
  }
  for (const auto& row : seen) {
    for (const int count : row) REQUIRE(count == 1);
  }
  // every E4M3 code (NaN aside) is its value in BF16
  for (std::uint32_t c = 0; c < 256; ++c) {
    if ((c & 0x7fu) == 0x7fu) continue;
    const std::uint32_t v = mma::fp8x2_bf16x2(c | (c ^ 0x80u) << 8);
    REQUIRE(mma::bf16_low(v) == cuda::fp8_e4m3_to_float(static_cast<std::uint8_t>(c)));
    REQUIRE(mma::bf16_high(v) == cuda::fp8_e4m3_to_float(static_cast<std::uint8_t>(c ^ 0x80u)));
  }
  // q - zero for every nibble and zero point
  for (std::uint32_t q = 0; q < 16; ++q) {
    for (std::uint32_t z = 0; z < 16; ++z) {
      const std::uint32_t v = mma::sub_bf16x2((0x4300u | q) | (0x4300u | (15 - q)) << 16, (0x4300u | z) * 0x10001u);
      REQUIRE(mma::bf16_low(v) == static_cast<float>(static_cast<int>(q) - static_cast<int>(z)));
      REQUIRE(mma::bf16_high(v) == static_cast<float>(15 - static_cast<int>(q) - static_cast<int>(z)));
    }
  }
  // hi + lo within 2^-16 of x (two roundings to 8 bits), hi within 2^-8, ties to even
  test::Rng rng(45);
  for (int i = 0; i < 10000; ++i) {
    const float x0 = rng.normal() * std::ldexp(1.0f, i % 60 - 30), x1 = -x0 * 1.0009765625f;
    std::uint32_t hi = 0, lo = 0;
    mma::split_x2(x0, x1, hi, lo);
    REQUIRE(std::fabs(static_cast<double>(mma::bf16_low(hi)) + mma::bf16_low(lo) - x0) <=
            std::ldexp(std::fabs(x0), -16));
    REQUIRE(std::fabs(static_cast<double>(mma::bf16_high(hi)) + mma::bf16_high(lo) - x1) <=
            std::ldexp(std::fabs(x1), -16));
    REQUIRE(std::fabs(mma::bf16_low(hi) - x0) <= std::ldexp(std::fabs(x0), -8));
  }
  // infinities: hi infinite, lo 0 (not NaN); a float past BF16's largest rounds to infinity
  std::uint32_t hi = 0, lo = 0;
  mma::split_x2(std::numeric_limits<float>::infinity(), -3.3999e38f, hi, lo);
  REQUIRE(std::isinf(mma::bf16_low(hi)));
  REQUIRE(mma::bf16_high(hi) == -std::numeric_limits<float>::infinity());
  REQUIRE(lo == 0u);
  // F16 weights: an infinity splits into inf + 0; finite_bf16x2 zeroes infinite halves only
  std::uint32_t whi = 0, wlo = 0;
  mma::f16_pair_split(0x7c00u | 0x3c01u << 16, whi, wlo);  // +inf, 1 + 2^-10
  REQUIRE(std::isinf(mma::bf16_low(whi)));
  REQUIRE(mma::bf16_low(wlo) == 0.0f);
  REQUIRE(static_cast<double>(mma::bf16_high(whi)) + mma::bf16_high(wlo) == 1.0 + 0x1p-10);
  REQUIRE(mma::finite_bf16x2(0xff80u | 0x3f80u << 16) == 0x3f800000u);  // -inf, 1
  REQUIRE(mma::finite_bf16x2(0x7fc0u | 0x7f80u << 16) == 0x7fc0u);      // NaN kept, +inf zeroed
  REQUIRE(mma::pack_bf16x2(1.0f + 1.0f / 256, 0.0f) == 0x3f80u);  // a tie: to even (down)
  REQUIRE(mma::pack_bf16x2(1.0f + 3.0f / 256, 0.0f) == 0x3f82u);  // a tie: to even (up)
}

}  // namespace
}  // namespace sitsrt
