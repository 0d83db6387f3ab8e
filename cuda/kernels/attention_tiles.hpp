// The lane logic of the tiled prompt attention (attention_tiled.cu): one block of 4 warps takes 64
// query rows of one sequence and KV head — a run of positions times the query heads of the GQA
// group, position-major, 16 rows a warp — and walks the keys they attend 32 at a time
// (flash-attention's online softmax), so each K and V element is read and decoded once per 64
// query rows instead of once per row.
//
// Per pass of 32 keys the block decodes K and V (any cached type, or the exact f16 copies of a
// windowed side) into shared memory as BF16 hi + lo pairs (value = hi + lo within 2^-16); each
// warp then computes its scores with mma.sync.m16n8k16 (q hi K hi + q lo K hi + q hi K lo, float
// accumulation: within ~2^-15 of sum |q k|, where one BF16 rounding of q would give 2^-8),
// masks, exponentiates, and adds P V the same way (P as hi + lo). The lo x lo terms are left out.
//
// Masks: a row at position i attends keys [lo_i, i] (lo_i from the sliding window); where a
// side keeps exact copies of its last recent_window positions, key p is read from them when
// p >= exact_i (exact_begin) and quantized otherwise. A tile's rows differ in exact_i, so keys
// pass in up to two runs: quantized keys (masked to p < exact_i) and exact ones (p >= exact_i);
// keys between the first and last row's exact_i pass in both, each row taking one.
//
// Fragments (PTX ISA, mma.m16n8k16 .bf16, lane = 4 g + t): A register 0 holds row g, columns
// 2t, 2t + 1; register 1 row g + 8; registers 2 and 3 columns 2t + 8, 2t + 9. B register 0 holds
// column g, rows 2t, 2t + 1; register 1 rows 2t + 8, 2t + 9. C: c0, c1 row g, columns 2t, 2t + 1;
// c2, c3 row g + 8. A score tile's C registers are the A registers of P for the next mma.
//
// Plain C++ outside nvcc, so tests/unit/cuda_attention_tiles_test.cpp runs a whole block through
// an emulated mma on the CPU.
#pragma once

#include "cuda_backend/kernels/attention_desc.hpp"
#include "cuda_backend/kernels/mma_units.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sitsrt::cuda::tiles {

inline constexpr int kRowGroups = 4;               // m16 tiles of query rows a block
inline constexpr int kTileRows = 16 * kRowGroups;  // query rows of a block
inline constexpr int kKeys = 32;                // keys a pass
inline constexpr int kScoreTiles = kKeys / 8;   // n8 tiles of scores a pass
inline constexpr int kValueSteps = kKeys / 16;  // k16 steps of P V a pass

SITSRT_HD bool head_dim_fits(std::int64_t head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}
// Positions of a sequence a block takes: the query heads of a group share its K and V.
SITSRT_HD int tile_positions(std::int64_t group) {
  return static_cast<int>(kTileRows / group);
}

// Shared memory in 32-bit words: Q (64 rows), K (32 keys) as rows of BF16 pairs and V transposed
// (a row per dim over the pass's keys), each as a hi and a lo plane. Rows are padded by 4 words so
// the 32 fragment loads of a warp (8 rows x 4 words) fall in 32 different banks.
// Warps: one per m16 tile of rows, computing its scores and its rows' output over all D dims;
// at D = 256 (an output of 32 n8 tiles would not fit the registers) two per tile, each scoring
// the tile's rows alike (the same bits) and summing P V for half the dims.
template <int D>
struct Layout {
  static constexpr int kSplit = D > 128 ? 2 : 1;      // warps a row tile
  static constexpr int kWarps = kRowGroups * kSplit;  // warp w: row tile w % 4, dims half w / 4
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kDimTiles = D / 8 / kSplit;        // n8 tiles of output a warp
  static constexpr int kMinBlocks = kSplit == 1 ? 2 : 1;  // a multiprocessor (launch bounds)
  static constexpr int kRowWords = D / 2 + 4;
  static constexpr int kValueWords = kKeys / 2 + 4;
  static constexpr int kQ = kTileRows * kRowWords;
  static constexpr int kK = kKeys * kRowWords;
  static constexpr int kV = D * kValueWords;
  static constexpr int kQHi = 0, kQLo = kQ, kKHi = 2 * kQ, kKLo = kKHi + kK, kVHi = kKLo + kK, kVLo = kVHi + kV;
  static constexpr int kWords = kVLo + kV;
  static constexpr std::size_t kBytes = static_cast<std::size_t>(kWords) * 4;
  // The float rows (kTileRows x D) q is prepared in and the output rotated back in: the space of
  // the K and V planes, which are not in use then.
  static constexpr int kFloats = kKHi;
  static_assert(kTileRows * D <= 2 * kK + 2 * kV);
};

// The query rows of a block: `positions` consecutive rows of one sequence from step row
// first_row (at position first_pos), each with the `group` query heads of the block's KV head.
struct QueryTile {
  std::int64_t first_row = 0;
  std::int64_t first_pos = 0;
  int positions = 0;
  int group = 1;
};

SITSRT_HD QueryTile query_tile(const AttentionSequenceDesc& s, std::int64_t first_row, int group) {
  QueryTile t;
  t.first_row = first_row;
  t.first_pos = s.pos0 + (first_row - s.row_begin);
  const std::int64_t left = s.row_begin + s.n_rows - first_row;
  t.positions = static_cast<int>(left < tile_positions(group) ? left : tile_positions(group));
  t.group = group;
  return t;
}

// The keys a query row attends: [lo, pos], from `exact` on read from the exact copies of a
// windowed side. A row past the tile's positions attends none (pos -1).
struct RowSpan {
  std::int64_t lo = 0;
  std::int64_t pos = -1;
  std::int64_t exact = 0;
};

SITSRT_HD RowSpan row_span(const AttentionSequenceDesc& s, std::int64_t window, std::int64_t pos) {
  RowSpan r;
  r.pos = pos;
  r.lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
  r.exact = exact_begin(s, r.lo, pos);
  return r;
}

SITSRT_HD RowSpan tile_row_span(const AttentionSequenceDesc& s, std::int64_t window, const QueryTile& t, int m) {
  if (m / t.group >= t.positions) return RowSpan{};
  return row_span(s, window, t.first_pos + m / t.group);
}

// A run of keys [begin, end) read quantized (exact 0) or from the exact copies (exact 1; a side
// without copies reads its quantized rows there too).
struct KeyRun {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  int exact = 0;
};

// The runs of a tile, `count` (1 or 2) of them in order: exact_i grows with i, so the first row's
// span and the last row's bound them. Two named runs, not an array: the kernel keeps them in
// registers.
struct KeyRuns {
  KeyRun first;
  KeyRun second;
  int count = 0;
};

SITSRT_HD KeyRuns key_runs(const AttentionSequenceDesc& s, std::int64_t window, const QueryTile& t) {
  const RowSpan first = row_span(s, window, t.first_pos), last = row_span(s, window, t.first_pos + t.positions - 1);
  if (s.k_recent == nullptr && s.v_recent == nullptr) return KeyRuns{KeyRun{first.lo, last.pos + 1, 0}, KeyRun{}, 1};
  const KeyRun quantized{first.lo, last.exact, 0}, exact{first.exact, last.pos + 1, 1};
  const bool has_exact = first.exact <= last.pos;
  if (first.lo < last.exact) return KeyRuns{quantized, exact, has_exact ? 2 : 1};
  return KeyRuns{exact, KeyRun{}, has_exact ? 1 : 0};
}

SITSRT_HD bool attends(const RowSpan& r, std::int64_t p, int exact) {
  return p >= r.lo && p <= r.pos && (exact != 0 ? p >= r.exact : p < r.exact);
}

// What a pass stages: the keys key0 .. key0 + kKeys - 1 of a run of KV head g (0 outside the run).
struct Stage {
  const AttentionSequenceDesc* s = nullptr;
  const std::uint8_t* k_copies = nullptr;  // the step's exact copies (AttentionLaunch::k_exact)
  const std::uint8_t* v_copies = nullptr;
  std::int64_t width = 0;  // n_kv_heads * head_dim
  std::int64_t g = 0;
  KeyRun run;
  std::int64_t key0 = 0;
};

// The rows a pass reads, a key a thread (the block table's and the ring's divisions once a key,
// not once an element): each key's K and V row (null outside the run) and the types they hold.
struct PassRows {
  const std::uint8_t* k[kKeys];
  const std::uint8_t* v[kKeys];
  int k_type;
  int v_type;
};

// Key n of the pass on one side: its row, or null outside the run.
SITSRT_HD const std::uint8_t* pass_row(const Stage& st, bool v_side, int n) {
  const std::int64_t p = st.key0 + n;
  if (p < st.run.begin || p >= st.run.end) return nullptr;
  const AttentionSequenceDesc& s = *st.s;
  const std::uint8_t* ring = v_side ? s.v_recent : s.k_recent;
  if (st.run.exact != 0 && ring != nullptr) return exact_row(s, v_side ? st.v_copies : st.k_copies, ring, st.width, p);
  return (v_side ? s.v : s.k) + physical_row(s, p) * (v_side ? s.v_row_bytes : s.k_row_bytes);
}

// Thread `i` (0 .. kKeys) of the pass's rows; thread 0 also sets the types.
SITSRT_HD void stage_pass_row(const Stage& st, int i, PassRows& rows) {
  rows.k[i] = pass_row(st, false, i);
  rows.v[i] = pass_row(st, true, i);
  if (i == 0) {
    const bool exact = st.run.exact != 0;
    rows.k_type = exact && st.s->k_recent != nullptr ? 1 : st.s->k_type;
    rows.v_type = exact && st.s->v_recent != nullptr ? 1 : st.s->v_type;
  }
}

// Element d of KV head g in a staged row (0 for none). D constant: the int8 scale's head index
// is a shift.
template <int D>
SITSRT_HD float row_value(const Stage& st, int type, const std::uint8_t* row, int d) {
  return row != nullptr ? kv_element(type, row, st.width, D, st.g * D + d) : 0.0f;
}

// A 4-byte aligned word (the caller checks): one load instead of kv_element's bytes.
SITSRT_HD std::uint32_t load_aligned_u32(const std::uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const std::uint32_t*>(p);
#else
  std::uint32_t v = 0;
  std::memcpy(&v, p, 4);
  return v;
#endif
}

// Elements d and d + 1 (d even) of KV head g in a staged row (0 for none), equal bit for bit to
// two kv_element calls: an f16 pair in one load where 4-byte aligned, an int8 pair with its head's
// scale loaded once, an int4 pair from one byte with its group's scale (d even: one group).
template <int D>
SITSRT_HD void row_pair(const Stage& st, int type, const std::uint8_t* row, int d, float& a, float& b) {
  if (row == nullptr) {
    a = b = 0.0f;
    return;
  }
  const std::int64_t e = st.g * D + d;
  switch (type) {
    case 1:
      if ((reinterpret_cast<std::uintptr_t>(row + 2 * e) & 3u) == 0) {
        const std::uint32_t w = load_aligned_u32(row + 2 * e);
        a = half_to_float(static_cast<std::uint16_t>(w & 0xffffu));
        b = half_to_float(static_cast<std::uint16_t>(w >> 16));
        return;
      }
      break;
    case 2: {
      const float scale = half_to_float(load_u16(row + st.width + 2 * (e / D)));
      a = static_cast<float>(static_cast<std::int8_t>(row[e])) * scale;
      b = static_cast<float>(static_cast<std::int8_t>(row[e + 1])) * scale;
      return;
    }
    case 3: {
      const std::uint8_t nibbles = row[e / 2];
      const float scale = kv_int4::scale_of(row[st.width / 2 + e / kv_int4::kGroup]);
      a = kv_int4::level(nibbles & 15) * scale;
      b = kv_int4::level(nibbles >> 4) * scale;
      return;
    }
    default:
      break;
  }
  a = kv_element(type, row, st.width, D, e);
  b = kv_element(type, row, st.width, D, e + 1);
}

// Stages pair `idx` (0 .. kKeys * D / 2) of K: key idx / (D / 2), dims 2 j, 2 j + 1.
template <int D>
SITSRT_LANE void stage_key_pair(const Stage& st, const PassRows& rows, int idx, std::uint32_t* smem) {
  const int n = idx / (D / 2), j = idx % (D / 2);
  std::uint32_t hi = 0, lo = 0;
  float a = 0.0f, b = 0.0f;
  row_pair<D>(st, rows.k_type, rows.k[n], 2 * j, a, b);
  mma::split_x2(a, b, hi, lo);
  smem[Layout<D>::kKHi + n * Layout<D>::kRowWords + j] = hi;
  smem[Layout<D>::kKLo + n * Layout<D>::kRowWords + j] = lo;
}

// Stages item `idx` (0 .. kKeys / 2 * D / 2) of V transposed: dims 2 p, 2 p + 1 of keys 2 j,
// 2 j + 1, as the words of V^T rows 2 p and 2 p + 1 at column j (each a key pair). A warp's 32
// items are 8 dim pairs (32 bytes of an f16 row, as row_pair loads) of 4 key pairs: stores 2 to a
// bank (rows 20 words apart).
template <int D>
SITSRT_LANE void stage_value_quad(const Stage& st, const PassRows& rows, int idx, std::uint32_t* smem) {
  constexpr int kDimGroups = D / 16;  // 8 dim pairs each
  const int lane = idx % 32, chunk = idx / 32;
  const int p = 8 * (chunk % kDimGroups) + lane % 8, j = 4 * (chunk / kDimGroups) + lane / 8;
  float a0 = 0.0f, a1 = 0.0f, b0 = 0.0f, b1 = 0.0f;  // key 2 j's dims 2 p, 2 p + 1; key 2 j + 1's
  row_pair<D>(st, rows.v_type, rows.v[2 * j], 2 * p, a0, a1);
  row_pair<D>(st, rows.v_type, rows.v[2 * j + 1], 2 * p, b0, b1);
  std::uint32_t hi = 0, lo = 0;
  mma::split_x2(a0, b0, hi, lo);
  smem[Layout<D>::kVHi + 2 * p * Layout<D>::kValueWords + j] = hi;
  smem[Layout<D>::kVLo + 2 * p * Layout<D>::kValueWords + j] = lo;
  mma::split_x2(a1, b1, hi, lo);
  smem[Layout<D>::kVHi + (2 * p + 1) * Layout<D>::kValueWords + j] = hi;
  smem[Layout<D>::kVLo + (2 * p + 1) * Layout<D>::kValueWords + j] = lo;
}

// q of tile row m, dim d for KV head g, times the channel scale (q . k = (q s) . (k / s)); 0 for
// a row past the tile's positions.
SITSRT_HD float query_value(const float* q, std::int64_t ldq, const AttentionSequenceDesc& s, const QueryTile& t,
                            std::int64_t g, std::int64_t head_dim, int m, std::int64_t d) {
  if (m / t.group >= t.positions) return 0.0f;
  const float x = q[(t.first_row + m / t.group) * ldq + (g * t.group + m % t.group) * head_dim + d];
  return s.k_scale != nullptr ? x * s.k_scale[g * head_dim + d] : x;
}

// Q pair `idx` (0 .. kTileRows * D / 2) from the float rows into the Q planes.
template <int D>
SITSRT_LANE void split_query_pair(const float* rows, int idx, std::uint32_t* smem) {
  const int m = idx / (D / 2), j = idx % (D / 2);
  std::uint32_t hi = 0, lo = 0;
  mma::split_x2(rows[m * D + 2 * j], rows[m * D + 2 * j + 1], hi, lo);
  smem[Layout<D>::kQHi + m * Layout<D>::kRowWords + j] = hi;
  smem[Layout<D>::kQLo + m * Layout<D>::kRowWords + j] = lo;
}

// The A fragments of q for warp `warp`'s 16 rows, k16 step `step` of the head dims.
template <int D>
SITSRT_LANE void query_fragments(const std::uint32_t* smem, int warp, int lane, int step, mma::FragA& hi,
                                 mma::FragA& lo) {
  const int r0 = (16 * warp + lane / 4) * Layout<D>::kRowWords, r8 = r0 + 8 * Layout<D>::kRowWords;
  const int w = 8 * step + lane % 4;
  const int at[4] = {r0 + w, r8 + w, r0 + w + 4, r8 + w + 4};
  SITSRT_UNROLL
  for (int i = 0; i < 4; ++i) {
    hi.r[i] = smem[Layout<D>::kQHi + at[i]];
    lo.r[i] = smem[Layout<D>::kQLo + at[i]];
  }
}

// The B fragments of K^T: column n = key 8 nt + g, rows = dims of k16 step `step`.
template <int D>
SITSRT_LANE void key_fragments(const std::uint32_t* smem, int lane, int nt, int step, mma::FragB& hi, mma::FragB& lo) {
  const int at = (8 * nt + lane / 4) * Layout<D>::kRowWords + 8 * step + lane % 4;
  hi.r[0] = smem[Layout<D>::kKHi + at];
  hi.r[1] = smem[Layout<D>::kKHi + at + 4];
  lo.r[0] = smem[Layout<D>::kKLo + at];
  lo.r[1] = smem[Layout<D>::kKLo + at + 4];
}

// The B fragments of V: column n = dim 8 dt + g, rows = keys of k16 step `step` of the pass.
template <int D>
SITSRT_LANE void value_fragments(const std::uint32_t* smem, int lane, int dt, int step, mma::FragB& hi,
                                 mma::FragB& lo) {
  const int at = (8 * dt + lane / 4) * Layout<D>::kValueWords + 8 * step + lane % 4;
  hi.r[0] = smem[Layout<D>::kVHi + at];
  hi.r[1] = smem[Layout<D>::kVHi + at + 4];
  lo.r[0] = smem[Layout<D>::kVLo + at];
  lo.r[1] = smem[Layout<D>::kVLo + at + 4];
}

// The scores of a pass (16 rows x kKeys keys, C layout) scaled, masked to -inf where the row
// does not attend the key in this run. rows: the lane's rows g and g + 8.
SITSRT_LANE void mask_scores(float (&s)[kScoreTiles][4], const RowSpan (&rows)[2], std::int64_t key0, int exact,
                             float scale, int lane) {
  SITSRT_UNROLL
  for (int nt = 0; nt < kScoreTiles; ++nt) {
    SITSRT_UNROLL
    for (int i = 0; i < 4; ++i) {
      const std::int64_t p = key0 + 8 * nt + mma::c_column(lane, i);
      s[nt][i] = attends(rows[i / 2], p, exact) ? s[nt][i] * scale : -INFINITY;
    }
  }
}

// The lane's largest score of each of its two rows (the quad's four lanes then combine theirs).
SITSRT_LANE void lane_max(const float (&s)[kScoreTiles][4], float (&top)[2]) {
  top[0] = top[1] = -INFINITY;
  SITSRT_UNROLL
  for (int nt = 0; nt < kScoreTiles; ++nt) {
    top[0] = fmaxf(top[0], fmaxf(s[nt][0], s[nt][1]));  // row g
    top[1] = fmaxf(top[1], fmaxf(s[nt][2], s[nt][3]));  // row g + 8
  }
}

// The running max of the lane's two rows and the lane's share of their sums of weights.
struct RowState {
  float max[2] = {-INFINITY, -INFINITY};
  float sum[2] = {0.0f, 0.0f};
};

// The online softmax step of a pass, given each row's largest score of the pass (the quad's):
// scores become weights exp(s - max), the running sums are rescaled and added to, and
// `correction` is what the output rows are to be multiplied by. A row with no key so far keeps
// max -inf and weights 0 (exp against 0 instead of -inf - -inf).
SITSRT_LANE void exponentiate(float (&s)[kScoreTiles][4], RowState& st, const float (&top)[2], float (&correction)[2]) {
  float base[2];
  SITSRT_UNROLL
  for (int r = 0; r < 2; ++r) {
    const float next = fmaxf(st.max[r], top[r]);
    base[r] = next == -INFINITY ? 0.0f : next;
    correction[r] = expf(st.max[r] - base[r]);  // 0 while max is -inf
    st.max[r] = next;
    st.sum[r] *= correction[r];
  }
  SITSRT_UNROLL
  for (int nt = 0; nt < kScoreTiles; ++nt) {
    SITSRT_UNROLL
    for (int i = 0; i < 4; ++i) {
      s[nt][i] = expf(s[nt][i] - base[i / 2]);
      st.sum[i / 2] += s[nt][i];
    }
  }
}

// The running output rows rescaled by the pass's correction, plus the pass's P V (in float fmas).
SITSRT_LANE void add_pass(float (&out)[4], const float (&pass)[4], const float (&correction)[2]) {
  SITSRT_UNROLL
  for (int i = 0; i < 4; ++i) out[i] = fmaf(out[i], correction[i / 2], pass[i]);
}

// The A fragments of P for k16 step `step` of the pass: score tiles 2 step and 2 step + 1.
SITSRT_LANE void weight_fragments(const float (&s)[kScoreTiles][4], int step, mma::FragA& hi, mma::FragA& lo) {
  const float(&a)[4] = s[2 * step];
  const float(&b)[4] = s[2 * step + 1];
  mma::split_x2(a[0], a[1], hi.r[0], lo.r[0]);
  mma::split_x2(a[2], a[3], hi.r[1], lo.r[1]);
  mma::split_x2(b[0], b[1], hi.r[2], lo.r[2]);
  mma::split_x2(b[2], b[3], hi.r[3], lo.r[3]);
}

}  // namespace sitsrt::cuda::tiles
