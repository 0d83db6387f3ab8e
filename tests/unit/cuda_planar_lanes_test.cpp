// The CUDA decode kernels' lane logic (cuda/kernels/planar_units.hpp), compiled here for the host
// with each intrinsic replaced by its exact host equivalent: for every planar format, the unit
// loads, side data, nibble / bit-pair assembly and x offsets a lane uses, accumulated over a
// row's units for 4 weight rows and 1-3 rows of x at once, equal the double reference of the
// decoded weights. This is the kernel's per-thread arithmetic checked without a GPU; the block
// reduction and launch shape are covered by the [cuda] tests on a device.
#include "core/quant_blocks.hpp"
#include "cuda_backend/device_formats.hpp"
#include "cuda_backend/kernels/planar_units.hpp"
#include "cuda_backend/planar_weights.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>

#include <cmath>
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
  for (int o = 0; o < kOuts; ++o) {
    const std::int64_t j = j0 + o < n ? j0 + o : n - 1;
    const std::uint8_t* row = m.stored.data() + static_cast<std::size_t>(j) * m.stride;
    for (int r = rows; r < kRows; ++r) REQUIRE(got[o][r] == 0.0);
    for (int r = 0; r < rows; ++r) {
      double want = 0.0, magnitude = 0.0;
      for (std::int64_t e = 0; e < cols; ++e) {
        const double p =
            static_cast<double>(cuda::decode_element<F>(row, e)) * x[static_cast<std::size_t>(r * ldx + e)];
        want += p;
        magnitude += std::fabs(p);
      }
      // float sums of cols exact products: a few ulps of the magnitude per add
      const double tolerance = 1e-6 * magnitude + 1e-30;
      INFO(name(F) << " cols " << cols << " output " << j << " row " << r << " of " << rows << " vector " << vector);
      REQUIRE(std::fabs(got[o][r] - want) <= tolerance);
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
}

TEST_CASE("cuda planar lanes: every format's unit decode and x offsets equal the reference", "[cuda-formats]") {
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

}  // namespace
}  // namespace sitsrt
