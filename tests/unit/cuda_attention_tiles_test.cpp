// The tiled prompt attention's lane logic (cuda/kernels/attention_tiles.hpp) without a GPU: whole
// blocks run on the CPU as the kernel (attention_tiled.cu) runs them — the same staging of q, K
// and V into the shared planes, the same fragments through an emulated mma.m16n8k16, the same
// masks and online softmax per lane, the quads' shuffles as sums and maxima over their 4 lanes —
// over paged caches of every K/V type with sliding windows, exact recent windows, channel
// scales and Hadamard rotations, against a double-precision attention over the values the cache
// holds. The kernel's launch and its shared memory on a device are the [cuda] tests' part.
#include "core/kv_int4.hpp"
#include "cpu/attention/kv_quant.hpp"
#include "cuda_backend/kernels/attention_tiles.hpp"
#include "support/mma_emulation.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

namespace sitsrt {
namespace {

namespace tiles = cuda::tiles;
using cuda::mma::FragA;
using cuda::mma::FragB;

struct Case {
  int head_dim = 128;
  int group = 4;
  int n_kv_heads = 2;
  int k_type = 1, v_type = 1;  // ops::KvType codes
  std::int64_t pos0 = 0;
  std::int64_t n_rows = 70;
  std::int64_t window = 0;  // sliding window (0: none)
  std::int64_t recent_window = 0;
  std::int64_t exact_from = 0;
  bool k_windowed = false, v_windowed = false;  // sides that keep exact copies
  bool k_scale = false, k_rotated = false, v_rotated = false;
  float q_scale = 1.0f;
};

// A paged cache of one sequence (blocks of 16 in shuffled order) with every position's rows
// filled; the sequence's rows start at step row kRowBegin (q and the step's copies hold the step's
// rows); the exact copies (ring and step's) hold other values than the quantized rows, so a key
// read from the wrong one shows.
constexpr std::int64_t kRowBegin = 5;

struct Fixture {
  Case c;
  std::int64_t width = 0, ldq = 0;
  std::vector<std::uint8_t> k, v, k_ring, v_ring, k_copies, v_copies;
  std::vector<std::int32_t> table;
  std::vector<float> q, k_scale;
  cuda::AttentionSequenceDesc desc;

  Fixture(const Case& cs, test::Rng& rng) : c(cs) {
    width = c.n_kv_heads * c.head_dim;
    ldq = c.n_kv_heads * c.group * c.head_dim + 3;
    constexpr std::int64_t kBlock = 16;
    const std::int64_t positions = c.pos0 + c.n_rows, blocks = (positions + kBlock - 1) / kBlock;
    table.resize(static_cast<std::size_t>(blocks));
    std::iota(table.begin(), table.end(), 0);
    for (std::size_t i = table.size(); i > 1; --i) std::swap(table[i - 1], table[rng.next() % i]);
    const std::int64_t k_bytes = cuda::kv_row_bytes(c.k_type, width, c.head_dim);
    const std::int64_t v_bytes = cuda::kv_row_bytes(c.v_type, width, c.head_dim);
    k.assign(static_cast<std::size_t>(blocks * kBlock * k_bytes), 0);
    v.assign(static_cast<std::size_t>(blocks * kBlock * v_bytes), 0);
    for (std::int64_t p = 0; p < positions; ++p) {
      const std::int64_t phys = table[static_cast<std::size_t>(p / kBlock)] * kBlock + p % kBlock;
      fill_row(c.k_type, k.data() + phys * k_bytes, rng);
      fill_row(c.v_type, v.data() + phys * v_bytes, rng);
    }
    const auto copies = [&](std::vector<std::uint8_t>& out, std::int64_t rows) {
      out.resize(static_cast<std::size_t>(rows * width * 2));
      for (std::int64_t r = 0; r < rows; ++r) fill_row(1, out.data() + r * width * 2, rng);
    };
    copies(k_ring, std::max<std::int64_t>(c.recent_window, 1));
    copies(v_ring, std::max<std::int64_t>(c.recent_window, 1));
    copies(k_copies, kRowBegin + c.n_rows);
    copies(v_copies, kRowBegin + c.n_rows);
    q = rng.normals(static_cast<std::size_t>((kRowBegin + c.n_rows) * ldq), c.q_scale);
    k_scale = rng.normals(static_cast<std::size_t>(width), 0.3f);
    for (float& s : k_scale) s = 1.0f + std::fabs(s);
    desc.k = k.data();
    desc.v = v.data();
    desc.k_row_bytes = k_bytes;
    desc.v_row_bytes = v_bytes;
    desc.block_table = table.data();
    desc.k_scale = c.k_scale ? k_scale.data() : nullptr;
    desc.block_size = kBlock;
    desc.row_begin = kRowBegin;
    desc.n_rows = c.n_rows;
    desc.pos0 = c.pos0;
    desc.k_type = c.k_type;
    desc.v_type = c.v_type;
    desc.k_rotated = c.k_rotated ? 1 : 0;
    desc.v_rotated = c.v_rotated ? 1 : 0;
    desc.k_recent = c.k_windowed ? k_ring.data() : nullptr;
    desc.v_recent = c.v_windowed ? v_ring.data() : nullptr;
    desc.recent_window = c.recent_window;
    desc.exact_from = c.exact_from;
  }

  // Rows of fresh values in each layout: f32 and f16 normals, int8 codes with a scale per head,
  // int4 through the CPU's group quantizer.
  void fill_row(int type, std::uint8_t* row, test::Rng& rng) const {
    const std::vector<float> x = rng.normals(static_cast<std::size_t>(width));
    switch (type) {
      case 0:
        std::memcpy(row, x.data(), x.size() * 4);
        return;
      case 1:
        for (std::int64_t e = 0; e < width; ++e) {
          const std::uint16_t h = cuda::float_to_half(x[static_cast<std::size_t>(e)]);
          std::memcpy(row + 2 * e, &h, 2);
        }
        return;
      case 2:
        for (std::int64_t e = 0; e < width; ++e) {
          row[e] = static_cast<std::uint8_t>(
              static_cast<std::int8_t>(std::lround(x[static_cast<std::size_t>(e)] * 40.0f) % 128));
        }
        for (std::int64_t h = 0; h < width / c.head_dim; ++h) {
          const std::uint16_t s = cuda::float_to_half(0.02f + 0.01f * static_cast<float>(rng.next() % 4));
          std::memcpy(row + width + 2 * h, &s, 2);
        }
        return;
      default:
        for (std::int64_t g = 0; g < width / kv_int4::kGroup; ++g) {
          std::uint8_t index[kv_int4::kGroup];
          row[width / 2 + g] = kv_int4::quantize_group(x.data() + g * kv_int4::kGroup, index);
          for (int i = 0; i < kv_int4::kGroup; i += 2)
            row[16 * g + i / 2] = static_cast<std::uint8_t>(index[i] | index[i + 1] << 4);
        }
        return;
    }
  }

  float scale() const { return 1.0f / std::sqrt(static_cast<float>(c.head_dim)); }
  std::int64_t n_heads() const { return c.n_kv_heads * c.group; }
};

// Each head of a float buffer rotated as the kernels' hadamard_heads rotates it: the CPU's
// butterflies (the same pairs in the same order), then 1 / sqrt(n).
void hadamard_rows(std::vector<float>& buf, int head_dim) {
  for (std::size_t h = 0; h < buf.size(); h += static_cast<std::size_t>(head_dim)) {
    cpu::detail::hadamard_normalized(buf.data() + h, head_dim);
  }
}

// H x / sqrt(n) in double from the matrix's entries, (-1)^popcount(i & j): independent of the
// butterflies.
std::vector<double> hadamard_reference(const std::vector<double>& x) {
  const std::size_t n = x.size();
  std::vector<double> y(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) y[i] += (std::popcount(i & j) % 2 != 0 ? -x[j] : x[j]);
    y[i] /= std::sqrt(static_cast<double>(n));
  }
  return y;
}

// One block (the tile from step row first_row, KV head g) as the kernel runs it, into out
// (rows of the step x n_heads * head_dim).
template <int D>
void run_block(const Fixture& f, std::int64_t first_row, std::int64_t g, std::vector<float>& out) {
  using L = tiles::Layout<D>;
  constexpr int kDimTiles = L::kDimTiles;  // a warp's n8 output tiles (half the dims at D = 256)
  const cuda::AttentionSequenceDesc& s = f.desc;
  std::vector<std::uint32_t> smem(L::kWords, 0x7fc07fc0u);  // BF16 NaN pairs: a word never staged shows
  std::vector<float> rows(static_cast<std::size_t>(tiles::kTileRows * D));
  const tiles::QueryTile t = tiles::query_tile(s, first_row, f.c.group);
  for (int e = 0; e < tiles::kTileRows * D; ++e) {
    rows[static_cast<std::size_t>(e)] = tiles::query_value(f.q.data(), f.ldq, s, t, g, D, e / D, e % D);
  }
  if (s.k_rotated != 0) hadamard_rows(rows, D);
  for (int idx = 0; idx < tiles::kTileRows * D / 2; ++idx) tiles::split_query_pair<D>(rows.data(), idx, smem.data());

  tiles::Stage stage;
  stage.s = &s;
  stage.k_copies = f.k_copies.data();
  stage.v_copies = f.v_copies.data();
  stage.width = f.width;
  stage.g = g;
  const tiles::KeyRuns runs = tiles::key_runs(s, f.c.window, t);

  struct Lane {
    tiles::RowSpan spans[2];
    tiles::RowState state;
    float out[kDimTiles][4] = {};
  };
  std::vector<std::array<Lane, 32>> warps(L::kWarps);  // warp w: row tile w % 4, dims from w / 4
  struct Scores {
    float s[tiles::kScoreTiles][4];
  };
  std::vector<Scores> lane_scores(32);  // each lane's scores of a pass
  for (int w = 0; w < L::kWarps; ++w) {
    for (int lane = 0; lane < 32; ++lane) {
      const int row = 16 * (w % tiles::kRowGroups) + lane / 4;
      warps[static_cast<std::size_t>(w)][static_cast<std::size_t>(lane)].spans[0] =
          tiles::tile_row_span(s, f.c.window, t, row);
      warps[static_cast<std::size_t>(w)][static_cast<std::size_t>(lane)].spans[1] =
          tiles::tile_row_span(s, f.c.window, t, row + 8);
    }
  }
  for (int run = 0; run < runs.count; ++run) {
    stage.run = run == 0 ? runs.first : runs.second;
    for (stage.key0 = stage.run.begin; stage.key0 < stage.run.end; stage.key0 += tiles::kKeys) {
      tiles::PassRows pass_rows{};
      for (int i = 0; i < tiles::kKeys; ++i) tiles::stage_pass_row(stage, i, pass_rows);
      for (int idx = 0; idx < tiles::kKeys * D / 2; ++idx) {
        tiles::stage_key_pair<D>(stage, pass_rows, idx, smem.data());
      }
      for (int idx = 0; idx < tiles::kKeys * D / 4; ++idx)
        tiles::stage_value_quad<D>(stage, pass_rows, idx, smem.data());
      for (int wi = 0; wi < L::kWarps; ++wi) {
        const int w = wi % tiles::kRowGroups, dim_tile0 = wi / tiles::kRowGroups * kDimTiles;
        const int last_m = std::min(16 * w + 15, t.positions * t.group - 1);
        if (16 * w > last_m) continue;
        const std::int64_t lo = tiles::tile_row_span(s, f.c.window, t, 16 * w).lo;
        const std::int64_t hi = tiles::tile_row_span(s, f.c.window, t, last_m).pos;
        if (!(hi >= stage.key0 && lo < stage.key0 + tiles::kKeys)) continue;
        auto& lanes = warps[static_cast<std::size_t>(wi)];
        float scores[tiles::kScoreTiles][32][4] = {};
        for (int step = 0; step < D / 16; ++step) {
          FragA q_hi[32], q_lo[32];
          for (int lane = 0; lane < 32; ++lane)
            tiles::query_fragments<D>(smem.data(), w, lane, step, q_hi[lane], q_lo[lane]);
          for (int nt = 0; nt < tiles::kScoreTiles; ++nt) {
            FragB k_hi[32], k_lo[32];
            for (int lane = 0; lane < 32; ++lane)
              tiles::key_fragments<D>(smem.data(), lane, nt, step, k_hi[lane], k_lo[lane]);
            test::emulated_mma(q_hi, k_hi, scores[nt]);
            test::emulated_mma(q_lo, k_hi, scores[nt]);
            test::emulated_mma(q_hi, k_lo, scores[nt]);
          }
        }
        float top[32][2], corrections[32][2];
        for (int lane = 0; lane < 32; ++lane) {
          auto& s_lane = lane_scores[static_cast<std::size_t>(lane)].s;
          for (int nt = 0; nt < tiles::kScoreTiles; ++nt) std::copy(scores[nt][lane], scores[nt][lane] + 4, s_lane[nt]);
          tiles::mask_scores(s_lane, lanes[static_cast<std::size_t>(lane)].spans, stage.key0, stage.run.exact,
                             f.scale(), lane);
          tiles::lane_max(s_lane, top[lane]);
        }
        for (int lane = 0; lane < 32; ++lane) {  // the quad's shuffles: lanes 4 (lane / 4) ..
          float quad[2];
          for (int r = 0; r < 2; ++r) {
            quad[r] = top[lane & ~3][r];
            for (int j = 1; j < 4; ++j) quad[r] = std::fmax(quad[r], top[(lane & ~3) + j][r]);
          }
          tiles::exponentiate(lane_scores[static_cast<std::size_t>(lane)].s,
                              lanes[static_cast<std::size_t>(lane)].state, quad, corrections[lane]);
        }
        // P V of the pass in its own accumulator, then added to the output with its rescale.
        FragA w_hi[tiles::kValueSteps][32], w_lo[tiles::kValueSteps][32];
        for (int step = 0; step < tiles::kValueSteps; ++step) {
          for (int lane = 0; lane < 32; ++lane) {
            tiles::weight_fragments(lane_scores[static_cast<std::size_t>(lane)].s, step, w_hi[step][lane],
                                    w_lo[step][lane]);
          }
        }
        for (int dt = 0; dt < kDimTiles; ++dt) {
          float pass[32][4] = {};
          for (int step = 0; step < tiles::kValueSteps; ++step) {
            FragB v_hi[32], v_lo[32];
            for (int lane = 0; lane < 32; ++lane) {
              tiles::value_fragments<D>(smem.data(), lane, dim_tile0 + dt, step, v_hi[lane], v_lo[lane]);
            }
            test::emulated_mma(w_hi[step], v_hi, pass);
            test::emulated_mma(w_lo[step], v_hi, pass);
            test::emulated_mma(w_hi[step], v_lo, pass);
          }
          for (int lane = 0; lane < 32; ++lane) {
            tiles::add_pass(lanes[static_cast<std::size_t>(lane)].out[dt], pass[lane], corrections[lane]);
          }
        }
      }
    }
  }
  // Normalised (the quad's sums in the shuffles' order), rotated back where V is stored rotated;
  // an element no warp writes stays NaN.
  std::fill(rows.begin(), rows.end(), std::nanf(""));
  for (int wi = 0; wi < L::kWarps; ++wi) {
    const int w = wi % tiles::kRowGroups, dim_tile0 = wi / tiles::kRowGroups * kDimTiles;
    const auto& lanes = warps[static_cast<std::size_t>(wi)];
    for (int lane = 0; lane < 32; ++lane) {
      float sums[2];
      for (int r = 0; r < 2; ++r) {
        const auto pair = [&](int l) {
          return lanes[static_cast<std::size_t>(l)].state.sum[r] + lanes[static_cast<std::size_t>(l ^ 1)].state.sum[r];
        };
        sums[r] = pair(lane) + pair(lane ^ 2);
      }
      for (int dt = 0; dt < kDimTiles; ++dt) {
        for (int i = 0; i < 4; ++i) {
          const int m = 16 * w + cuda::mma::c_row(lane, i), d = 8 * (dim_tile0 + dt) + cuda::mma::c_column(lane, i);
          rows[static_cast<std::size_t>(m * D + d)] = lanes[static_cast<std::size_t>(lane)].out[dt][i] / sums[i / 2];
        }
      }
    }
  }
  if (s.v_rotated != 0) hadamard_rows(rows, D);
  const std::int64_t ldo = f.n_heads() * D;
  for (int m = 0; m < t.positions * t.group; ++m) {
    for (int d = 0; d < D; ++d) {
      out[static_cast<std::size_t>((t.first_row - s.row_begin + m / t.group) * ldo + (g * t.group + m % t.group) * D +
                                   d)] = rows[static_cast<std::size_t>(m * D + d)];
    }
  }
}

// Every tile of the sequence through run_block, against attention in double over the values the
// cache holds (key p of a row at i from the exact copies where its side keeps them and
// p >= exact_begin): within 2^-17 (1 + scale max_p sum_d |q_d k_pd|) max |v| (the hi + lo
// operands, each within 2^-17 of its value; the lo x lo terms; float sums). Measured: 2^-21 at
// most over these cases; one BF16 rounding of q alone gives ~2^-12.
template <int D>
void check_case(const Case& c, std::uint64_t seed) {
  test::Rng rng(seed);
  const Fixture f(c, rng);
  const std::int64_t n_heads = f.n_heads(), ldo = n_heads * D;
  std::vector<float> out(static_cast<std::size_t>(c.n_rows * ldo), std::nanf(""));
  const std::int64_t per_tile = tiles::tile_positions(c.group);
  for (std::int64_t g = 0; g < c.n_kv_heads; ++g) {
    for (std::int64_t r = 0; r < c.n_rows; r += per_tile) run_block<D>(f, f.desc.row_begin + r, g, out);
  }
  const cuda::AttentionSequenceDesc& s = f.desc;
  const auto value = [&](bool v_side, bool exact, std::int64_t p, std::int64_t e) -> double {
    if (exact) {
      const std::uint8_t* row = p >= c.pos0
                                    ? (v_side ? f.v_copies : f.k_copies).data() + (kRowBegin + p - c.pos0) * 2 * f.width
                                    : (v_side ? f.v_ring : f.k_ring).data() + (p % c.recent_window) * 2 * f.width;
      return cuda::kv_element(1, row, f.width, D, e);
    }
    const std::int64_t phys = s.block_table[p / s.block_size] * s.block_size + p % s.block_size;
    return v_side ? cuda::kv_element(c.v_type, f.v.data() + phys * s.v_row_bytes, f.width, D, e)
                  : cuda::kv_element(c.k_type, f.k.data() + phys * s.k_row_bytes, f.width, D, e);
  };
  for (std::int64_t r = 0; r < c.n_rows; ++r) {
    const std::int64_t i = c.pos0 + r;
    const std::int64_t lo = c.window > 0 ? std::max<std::int64_t>(0, i - c.window + 1) : 0;
    const std::int64_t exact_from = cuda::exact_begin(s, lo, i);
    for (std::int64_t h = 0; h < n_heads; ++h) {
      const std::int64_t g = h / c.group;
      std::vector<double> q(D);
      for (int d = 0; d < D; ++d) {
        q[static_cast<std::size_t>(d)] =
            f.q[static_cast<std::size_t>((kRowBegin + r) * f.ldq + h * D + d)] *
            (c.k_scale ? static_cast<double>(f.k_scale[static_cast<std::size_t>(g * D + d)]) : 1.0);
      }
      if (c.k_rotated) q = hadamard_reference(q);
      std::vector<double> scores;
      double magnitude = 0.0, v_max = 0.0;
      for (std::int64_t p = lo; p <= i; ++p) {
        double dot = 0.0, abs = 0.0;
        for (int d = 0; d < D; ++d) {
          const double k = value(false, c.k_windowed && p >= exact_from, p, g * D + d);
          dot += q[static_cast<std::size_t>(d)] * k;
          abs += std::fabs(q[static_cast<std::size_t>(d)] * k);
          v_max = std::max(v_max, std::fabs(value(true, c.v_windowed && p >= exact_from, p, g * D + d)));
        }
        scores.push_back(dot * f.scale());
        magnitude = std::max(magnitude, abs * f.scale());
      }
      const double top = *std::max_element(scores.begin(), scores.end());
      std::vector<double> want(D, 0.0);
      double total = 0.0;
      for (std::int64_t p = lo; p <= i; ++p) {
        const double w = std::exp(scores[static_cast<std::size_t>(p - lo)] - top);
        total += w;
        for (int d = 0; d < D; ++d)
          want[static_cast<std::size_t>(d)] += w * value(true, c.v_windowed && p >= exact_from, p, g * D + d);
      }
      for (double& x : want) x /= total;
      if (c.v_rotated) want = hadamard_reference(want);
      const double tolerance = std::ldexp(1.0 + magnitude, -17) * v_max;
      for (int d = 0; d < D; ++d) {
        const double got = out[static_cast<std::size_t>(r * ldo + h * D + d)];
        INFO("head_dim " << D << " group " << c.group << " types " << c.k_type << "/" << c.v_type << " row " << r
                         << " position " << i << " head " << h << " dim " << d);
        REQUIRE(std::fabs(got - want[static_cast<std::size_t>(d)]) <= tolerance);
      }
    }
  }
}

TEST_CASE("tiled attention's K pairs equal kv_element bit for bit, every type, aligned or not", "[cuda][lanes]") {
  test::Rng rng(43);
  Case c;
  c.head_dim = 64;
  c.n_kv_heads = 3;
  for (int type = 0; type < 4; ++type) {
    const Fixture f(c, rng);
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(cuda::kv_row_bytes(type, f.width, 64)) + 8);
    for (const std::size_t shift : {0u, 1u, 2u}) {  // f16 rows at 4-, 1- and 2-byte alignment
      std::uint8_t* row = bytes.data() + shift;
      f.fill_row(type, row, rng);
      for (std::int64_t g = 0; g < c.n_kv_heads; ++g) {
        tiles::Stage st;
        st.width = f.width;
        st.g = g;
        for (int d = 0; d < 64; d += 2) {
          float a = 0.0f, b = 0.0f;
          tiles::row_pair<64>(st, type, row, d, a, b);
          const float want_a = cuda::kv_element(type, row, f.width, 64, g * 64 + d);
          const float want_b = cuda::kv_element(type, row, f.width, 64, g * 64 + d + 1);
          INFO("type " << type << " shift " << shift << " head " << g << " dim " << d);
          REQUIRE(std::memcmp(&a, &want_a, 4) == 0);
          REQUIRE(std::memcmp(&b, &want_b, 4) == 0);
        }
      }
    }
    float a = 1.0f, b = 1.0f;
    tiles::row_pair<64>(tiles::Stage{}, type, nullptr, 0, a, b);  // no row: zeros
    REQUIRE((a == 0.0f && b == 0.0f));
  }
}

TEST_CASE("tiled attention runs cover each row's keys once, each from the copy it reads", "[cuda][lanes]") {
  test::Rng rng(41);
  for (int trial = 0; trial < 500; ++trial) {
    cuda::AttentionSequenceDesc s;
    s.pos0 = static_cast<std::int64_t>(rng.next() % (rng.next() % 2 != 0 ? 200 : 4));  // often a sequence's start
    s.n_rows = 1 + static_cast<std::int64_t>(rng.next() % (rng.next() % 2 != 0 ? 100 : 20));
    s.row_begin = static_cast<std::int64_t>(rng.next() % 7);
    static std::uint8_t ring = 0;
    s.k_recent = rng.next() % 3 != 0 ? &ring : nullptr;
    s.v_recent = rng.next() % 3 == 0 ? &ring : nullptr;
    // windows of 1-3 and exact copies from inside the step often: runs of a key or two
    s.recent_window = 1 + static_cast<std::int64_t>(rng.next() % (rng.next() % 2 != 0 ? 3 : 40));
    s.exact_from = rng.next() % 2 != 0
                       ? static_cast<std::int64_t>(rng.next() % 250)
                       : s.pos0 + static_cast<std::int64_t>(rng.next() % static_cast<std::uint64_t>(s.n_rows + 1));
    const std::int64_t window = rng.next() % 2 != 0 ? 1 + static_cast<std::int64_t>(rng.next() % 80) : 0;
    const int group = 1 + static_cast<int>(rng.next() % 8);
    for (std::int64_t first = s.row_begin; first < s.row_begin + s.n_rows; first += tiles::tile_positions(group)) {
      const tiles::QueryTile t = tiles::query_tile(s, first, group);
      const tiles::KeyRuns found = tiles::key_runs(s, window, t);
      const tiles::KeyRun runs[2] = {found.first, found.second};
      const int n = found.count;
      for (int m = 0; m < tiles::kTileRows; ++m) {
        const tiles::RowSpan span = tiles::tile_row_span(s, window, t, m);
        const bool valid = m / group < t.positions;
        const std::int64_t i = t.first_pos + m / group;
        const std::int64_t lo = window > 0 ? std::max<std::int64_t>(0, i - window + 1) : 0;
        const std::int64_t exact = cuda::exact_begin(s, lo, i);
        std::int64_t wrong = -1;  // the first key taken other than once, or from the other copy
        for (std::int64_t p = 0; p < s.pos0 + s.n_rows + 2 && wrong < 0; ++p) {
          int seen = 0, exact_runs = 0;
          for (int k = 0; k < n; ++k) {
            if (p >= runs[k].begin && p < runs[k].end && tiles::attends(span, p, runs[k].exact)) {
              ++seen;
              exact_runs += runs[k].exact;
            }
          }
          if (seen != (valid && p >= lo && p <= i ? 1 : 0) || (seen == 1 && exact_runs != (p >= exact ? 1 : 0)))
            wrong = p;
        }
        INFO("trial " << trial << " row " << m);
        REQUIRE(wrong == -1);
      }
    }
  }
}

TEST_CASE("tiled attention blocks equal double-precision attention over the cache", "[cuda][lanes]") {
  SECTION("f16 K and V, GQA group 4, head_dim 128, a partial last tile") {
    check_case<128>(Case{.pos0 = 37}, 1);
  }
  SECTION("int8 K, int4 V, group 3, head_dim 64: sliding and exact windows, channel scales, rotations") {
    check_case<64>(Case{.head_dim = 64,
                        .group = 3,
                        .k_type = 2,
                        .v_type = 3,
                        .pos0 = 100,
                        .n_rows = 45,
                        .window = 50,
                        .recent_window = 8,
                        .exact_from = 5,
                        .k_windowed = true,
                        .v_windowed = true,
                        .k_scale = true,
                        .k_rotated = true,
                        .v_rotated = true,
                        .q_scale = 3.0f},
                   2);
  }
  SECTION("int8 K with exact copies, f32 V without, one head a group (64 positions a tile)") {
    check_case<128>(Case{.group = 1,
                         .n_kv_heads = 3,
                         .k_type = 2,
                         .v_type = 0,
                         .n_rows = 130,
                         .recent_window = 16,
                         .k_windowed = true,
                         .q_scale = 2.0f},
                    3);
  }
  SECTION("head_dim 256 (two warps a row tile): f16 K, int8 V with exact copies, a sliding window, rotations") {
    check_case<256>(Case{.head_dim = 256,
                         .n_kv_heads = 1,
                         .v_type = 2,
                         .pos0 = 50,
                         .window = 60,
                         .recent_window = 16,
                         .exact_from = 3,
                         .v_windowed = true,
                         .v_rotated = true,
                         .q_scale = 2.0f},
                    6);
  }
  SECTION("f32 K without exact copies, int4 V with them, group 2") {
    check_case<64>(Case{.head_dim = 64,
                        .group = 2,
                        .k_type = 0,
                        .v_type = 3,
                        .pos0 = 9,
                        .n_rows = 66,
                        .recent_window = 4,
                        .v_windowed = true,
                        .v_rotated = true},
                   5);
  }
  SECTION("int4 K and V, group 8, exact copies from a late position, a step inside the window") {
    check_case<64>(Case{.head_dim = 64,
                        .group = 8,
                        .n_kv_heads = 1,
                        .k_type = 3,
                        .v_type = 3,
                        .pos0 = 20,
                        .n_rows = 67,
                        .window = 24,
                        .recent_window = 32,
                        .exact_from = 40,
                        .k_windowed = true,
                        .v_windowed = true},
                   4);
  }
}

}  // namespace
}  // namespace sitsrt
