// Shared by the paged-KV attention tests (paged_attention_test, kv_window_test): a scalar
// reference of the cached row layouts (written from the KvType comment, not the library), test
// caches in random block pools, random inputs and the double reference of attention with its
// tolerances.
#pragma once

#include "core/half.hpp"
#include "cpu/attention/attention.hpp"
#include "cpu/cpu_context.hpp"
#include "support/random.hpp"
#include "support/tolerance.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <vector>

namespace sitsrt::test::paged_kv {

using cpu::KvType;

const cpu::Isa kIsas[] = {cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAvx512Vnni};
constexpr KvType kTypes[] = {KvType::kF32, KvType::kF16, KvType::kInt8, KvType::kInt4};

inline const char* type_name(KvType t) {
  switch (t) {
    case KvType::kF32:
      return "f32";
    case KvType::kF16:
      return "f16";
    case KvType::kInt8:
      return "int8";
    case KvType::kInt4:
      return "int4";
  }
  return "?";
}

// ---- Scalar reference of the row layouts (written from the KvType comment, not the library) ----

inline double f16_value(const std::byte* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

// The int4 layout as docs/architecture.md describes it: IQ4_NL's levels, and a scale code that is
// an f16's high byte times 2^-4.
constexpr int kInt4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
inline float int4_scale(std::byte code) {
  return fp16_to_fp32(static_cast<std::uint16_t>(static_cast<unsigned>(code) << 8)) * 0.0625f;
}

// Element e of a stored row of `width` values with heads of d.
inline double stored_value(KvType t, const std::byte* row, std::int64_t width, std::int64_t d, std::int64_t e) {
  switch (t) {
    case KvType::kF32: {
      float f;
      std::memcpy(&f, row + 4 * e, 4);
      return f;
    }
    case KvType::kF16:
      return f16_value(row + 2 * e);
    case KvType::kInt8:
      // The kernel's value is the float product fl(q * scale).
      return static_cast<float>(static_cast<std::int8_t>(row[e])) *
             static_cast<float>(f16_value(row + width + 2 * (e / d)));
    case KvType::kInt4: {
      const unsigned byte = static_cast<unsigned>(row[e / 2]);
      const int index = static_cast<int>((e % 2 == 0 ? byte : byte >> 4) & 0xFu);
      return static_cast<float>(kInt4Levels[index]) * int4_scale(row[width / 2 + e / 32]);
    }
  }
  return 0.0;
}

// The quantization step's half-width for element e (|stored - x| <= this), by the layout's scale;
// for F16 the rounding bound 2^-11 |x| (normal range), F32 exact.
inline double value_error(KvType t, const std::byte* row, std::int64_t width, std::int64_t d, std::int64_t e, double x) {
  switch (t) {
    case KvType::kF32:
      return 0.0;
    case KvType::kF16:
      return std::ldexp(std::fabs(x), -11) + 0x1p-25;
    case KvType::kInt8:
      return 0.5 * f16_value(row + width + 2 * (e / d)) * (1 + 0x1p-20);
    case KvType::kInt4:
      // Within the levels' range a value is at most half the widest gap (24) from its level; the
      // chosen scale code is at most one code (a factor 1.25) below the smallest that clips
      // nothing, so a clipped value lies within 0.2 x 127 x 1.25 = 31.75 |scale| of its level
      // (the subnormal codes 1..3 are up to a factor 2 apart: 127 |scale|).
      return ((static_cast<unsigned>(row[width / 2 + e / 32]) & 0x7Fu) < 4 ? 128.0 : 32.0) *
             std::fabs(int4_scale(row[width / 2 + e / 32])) * (1 + 0x1p-20);
  }
  return 0.0;
}

// x <- H x / sqrt(n) in double (Sylvester order, the kernels' convention).
inline void hadamard(std::vector<double>& x) {
  const auto n = static_cast<std::int64_t>(x.size());
  for (std::int64_t len = 1; len < n; len *= 2) {
    for (std::int64_t i = 0; i < n; i += 2 * len) {
      for (std::int64_t j = i; j < i + len; ++j) {
        const double a = x[static_cast<std::size_t>(j)], b = x[static_cast<std::size_t>(j + len)];
        x[static_cast<std::size_t>(j)] = a + b;
        x[static_cast<std::size_t>(j + len)] = a - b;
      }
    }
  }
  for (double& v : x) v /= std::sqrt(static_cast<double>(n));
}

// ---- Caches ----

struct Layout {
  KvType k = KvType::kF16, v = KvType::kF16;
  bool k_rotated = false, v_rotated = false;
  bool head_major = false;  // blocks stored by head (KvLayerView::k_head_major), where the type allows
};

// Bytes of a head's values in a row, and of its scales (the KvType comment): f32/f16 none, int8
// one f16, int4 one code per 32 values (only whole groups per head are stored by head).
inline std::size_t head_value_bytes(KvType t, std::int64_t d) {
  const auto n = static_cast<std::size_t>(d);
  return t == KvType::kF32 ? 4 * n : t == KvType::kF16 ? 2 * n : t == KvType::kInt8 ? n : n / 2;
}
inline std::size_t head_scale_bytes(KvType t, std::int64_t d) {
  return t == KvType::kInt8 ? 2 : t == KvType::kInt4 ? static_cast<std::size_t>(d) / 32 : 0;
}
inline bool head_major_side(const Layout& l, KvType t, std::int64_t d) {
  return l.head_major && (t != KvType::kInt4 || d % 32 == 0);
}

// One layer's cache in a pool of physical blocks: logical block b in physical block table[b], a
// random permutation of twice as many blocks as needed; rows 8 bytes longer than the layout and
// everything not written 0xFF (NaN as f32/f16 and f16 scales), so a kernel that reads a wrong
// row, block or stride is caught. block_size 0: contiguous.
struct Cache {
  Layout layout;
  std::int64_t n_kv, d, capacity, block_size;
  std::size_t kb, vb;
  std::vector<std::byte> k, v;
  std::vector<std::int32_t> table;

  Cache(const Layout& l, std::int64_t n_kv_heads, std::int64_t head_dim, std::int64_t cap, std::int64_t bs,
        test::Rng& rng)
      : layout(l),
        n_kv(n_kv_heads),
        d(head_dim),
        capacity(cap),
        block_size(bs),
        kb(cpu::kv_row_bytes(l.k, n_kv_heads, head_dim) + 8),
        vb(cpu::kv_row_bytes(l.v, n_kv_heads, head_dim) + 8) {
    std::int64_t rows = cap;
    if (bs > 0) {
      const std::int64_t blocks = (cap + bs - 1) / bs;
      std::vector<std::int32_t> physical(static_cast<std::size_t>(2 * blocks));
      std::iota(physical.begin(), physical.end(), 0);
      for (std::size_t i = physical.size() - 1; i > 0; --i) std::swap(physical[i], physical[rng.next() % (i + 1)]);
      table.assign(physical.begin(), physical.begin() + blocks);
      rows = 2 * blocks * bs;
    }
    k.assign(kb * static_cast<std::size_t>(rows), std::byte{0xFF});
    v.assign(vb * static_cast<std::size_t>(rows), std::byte{0xFF});
  }

  [[nodiscard]] cpu::KvLayerView view() {
    cpu::KvLayerView view = cpu::contiguous_kv(layout.k, layout.v, k.data(), v.data(), kb, vb, capacity);
    if (block_size > 0) {
      view.block_size = block_size;
      view.block_table = table;
    }
    view.k_rotated = layout.k_rotated;
    view.v_rotated = layout.v_rotated;
    view.k_head_major = head_major_side(layout, layout.k, d);
    view.v_head_major = head_major_side(layout, layout.v, d);
    return view;
  }

  // The same cache with row-major sides: a head-major side's head rows gathered by the
  // layout's definition (in each block of block_size rows of `row_bytes`, head g of row r at
  // (g * block_size + r) * head-row bytes from the block's start, its values then its scales);
  // bytes outside them 0xFF.
  [[nodiscard]] Cache row_major() const {
    Cache out = *this;
    out.layout.head_major = false;
    const auto bs = static_cast<std::size_t>(block_size > 0 ? block_size : capacity);
    const auto gather = [&](KvType t, const std::vector<std::byte>& src, std::vector<std::byte>& dst,
                            std::size_t row_bytes) {
      if (!head_major_side(layout, t, d)) return;
      const std::size_t values = head_value_bytes(t, d), scales = head_scale_bytes(t, d), hb = values + scales;
      const std::size_t all_values = values * static_cast<std::size_t>(n_kv);
      std::fill(dst.begin(), dst.end(), std::byte{0xFF});
      for (std::size_t row = 0; row < src.size() / row_bytes; ++row) {
        const std::size_t block = row / bs, r = row % bs;
        for (std::size_t g = 0; g < static_cast<std::size_t>(n_kv); ++g) {
          const std::byte* head = src.data() + block * bs * row_bytes + (g * bs + r) * hb;
          std::memcpy(dst.data() + row * row_bytes + g * values, head, values);
          std::memcpy(dst.data() + row * row_bytes + all_values + g * scales, head + values, scales);
        }
      }
    };
    gather(layout.k, k, out.k, kb);
    gather(layout.v, v, out.v, vb);
    return out;
  }

  // Position p's row (row-major sides; row_major() first for a head-major cache).
  [[nodiscard]] const std::byte* k_row(std::int64_t p) const { return k.data() + row(p) * kb; }
  [[nodiscard]] const std::byte* v_row(std::int64_t p) const { return v.data() + row(p) * vb; }

 private:
  [[nodiscard]] std::size_t row(std::int64_t p) const {
    if (block_size == 0) return static_cast<std::size_t>(p);
    return static_cast<std::size_t>(table[static_cast<std::size_t>(p / block_size)] * block_size + p % block_size);
  }
};

struct Case {
  std::int64_t group, head_dim, pos0, rows;
  std::int64_t window = 0;
  std::int64_t n_kv = 2;
};

// Keys and values for positions [0, pos0 + rows) (Gaussian, per-position magnitudes, a few
// outlier channels in K as real keys have) and q rows for positions pos0.. .
struct Inputs {
  Case c;
  std::int64_t n_heads, width, ldkv, ldq;
  cpu::AttentionShape shape;
  std::vector<float> k, v, q;

  Inputs(const Case& cs, std::uint64_t seed)
      : c(cs),
        n_heads(cs.n_kv * cs.group),
        width(cs.n_kv * cs.head_dim),
        ldkv(cs.n_kv * cs.head_dim + 3),
        ldq(cs.n_kv * cs.group * cs.head_dim + 5),
        shape{n_heads, cs.n_kv, cs.head_dim, static_cast<float>(1.0 / std::sqrt(static_cast<double>(cs.head_dim))),
              cs.window} {
    test::Rng rng(seed);
    const std::int64_t total = c.pos0 + c.rows;
    k.resize(static_cast<std::size_t>(total * ldkv));
    v.resize(k.size());
    for (std::int64_t p = 0; p < total; ++p) {
      const float ks = std::exp2(rng.uniform(-1.0f, 1.0f));
      for (std::int64_t e = 0; e < width; ++e) {
        const bool outlier = e % c.head_dim == 3 || e % c.head_dim == c.head_dim / 2 + 1;
        k[static_cast<std::size_t>(p * ldkv + e)] = rng.normal() * ks * (outlier ? 8.0f : 1.0f);
        v[static_cast<std::size_t>(p * ldkv + e)] = rng.normal() * std::exp2(rng.uniform(-1.0f, 1.0f));
      }
    }
    q.assign(static_cast<std::size_t>(c.rows * ldq), std::nanf(""));
    for (std::int64_t i = 0; i < c.rows; ++i) {
      for (std::int64_t e = 0; e < n_heads * c.head_dim; ++e) q[static_cast<std::size_t>(i * ldq + e)] = rng.normal();
    }
  }

  // Stores positions [0, pos0) then [pos0, pos0 + rows) (two calls, as a turn after a turn).
  void store(cpu::CpuContext& ctx, Cache& cache) const {
    const cpu::KvLayerView view = cache.view();
    if (c.pos0 > 0) cpu::kv_store(ctx, view, k.data(), ldkv, v.data(), ldkv, c.pos0, c.n_kv, c.head_dim, 0);
    cpu::kv_store(ctx, view, k.data() + c.pos0 * ldkv, ldkv, v.data() + c.pos0 * ldkv, ldkv, c.rows, c.n_kv, c.head_dim,
                  c.pos0);
  }

  [[nodiscard]] std::int64_t first(std::int64_t i) const {
    const std::int64_t pos = c.pos0 + i;
    return c.window > 0 ? std::max<std::int64_t>(0, pos - c.window + 1) : 0;
  }
};

constexpr float kSentinel = -777.0f;

inline std::vector<float> run_attention(cpu::Isa isa, int threads, const Inputs& in, Cache& cache) {
  cpu::CpuContext ctx(threads, isa);
  ctx.reserve_scratch(cpu::attention_scratch_floats(cache.capacity, in.shape));
  std::vector<float> out(in.q.size(), kSentinel);
  cpu::attention(ctx, in.q.data(), in.ldq, in.c.rows, in.c.pos0, cache.view(), in.shape, out.data(), in.ldq);
  return out;
}

// Expected outputs with two tolerances: `tight` against softmax over the values the kernel
// reads (the stored, dequantized ones; rotated q and output rotated in double), `loose`
// against the original float inputs.
//
// Tight: as attention_test (Higham dot bound on the scores, softmax_weighted_tolerance on the
// outputs), plus the float rotations: a component of fl(H q) is a log2(d)-level butterfly sum,
// off by <= gamma(log2 d + 1) * sum|q| / sqrt(d), which moves a score by that times sum_e |k_e|;
// the rotated-back output adds gamma(log2 d + 1) * sum_e |o_e| / sqrt(d) and spreads the
// rotated-domain tolerances as sum_e tol_e / sqrt(d).
// Loose: quantization moves each stored value by at most err = |scale| / 2 (INT8/INT4 with the
// layout's f16 scale, signed for INT4; F16 2^-11 |x|), so a score by at most delta_t = scale_q * sum_e |q_e| err_e
// (in the rotated domain when K is rotated: q . k = Hq . Hk). With delta = max_t delta_t, every
// softmax weight moves by a factor within [e^-2delta, e^2delta], so per value channel
//   |o_quant - o| <= (e^{2 delta} - 1) sum_t p_t |v^_t| + sum_t p_t err_v(t)
// (p the exact softmax of the original scores), mapped through H (sum / sqrt(d)) when V is
// rotated; the tight tolerance is added for the kernel's own rounding.
struct Reference {
  std::vector<double> exact, tight, original, loose;
};

// Rows read instead of the cache's for query row i at position p (an exact recent window,
// cpu::KvLayerView::recent_window): an f16 row of width values, or null for the cache's row.
struct RowOverride {
  std::function<const std::byte*(std::int64_t i, std::int64_t p)> k, v;
};

// Rows first_row .. of the inputs' query rows.
inline Reference reference(const Inputs& in, const Cache& cache, const RowOverride* override_rows = nullptr,
                           std::int64_t first_row = 0) {
  if (cache.layout.head_major) return reference(in, cache.row_major(), override_rows, first_row);
  const Case& c = in.c;
  const std::int64_t d = c.head_dim, width = in.width;
  const double scale = in.shape.scale;
  const int levels = static_cast<int>(std::log2(static_cast<double>(d))) + 1;
  Reference ref;
  for (std::int64_t i = first_row; i < c.rows; ++i) {
    const std::int64_t first = in.first(i), n = c.pos0 + i - first + 1;
    for (std::int64_t h = 0; h < in.n_heads; ++h) {
      const std::int64_t g = h / c.group;
      std::vector<double> qh(static_cast<std::size_t>(d));
      double q_abs = 0.0;
      for (std::int64_t e = 0; e < d; ++e) {
        qh[static_cast<std::size_t>(e)] = in.q[static_cast<std::size_t>(i * in.ldq + h * d + e)];
        q_abs += std::fabs(qh[static_cast<std::size_t>(e)]);
      }
      std::vector<double> qs = qh;  // q in the stored K domain
      if (cache.layout.k_rotated) hadamard(qs);
      std::vector<double> s(static_cast<std::size_t>(n)), s0(s.size()), delta(s.size());
      double score_err = 0.0, max_delta = 0.0;
      // The row (and its type) the kernel reads for position p.
      const auto row_of = [&](bool k_side, std::int64_t p) -> std::pair<KvType, const std::byte*> {
        const auto& pick = override_rows == nullptr ? nullptr : (k_side ? override_rows->k : override_rows->v);
        if (pick) {
          if (const std::byte* row = pick(i, p)) return {KvType::kF16, row};
        }
        return k_side ? std::pair{cache.layout.k, cache.k_row(p)} : std::pair{cache.layout.v, cache.v_row(p)};
      };
      for (std::int64_t t = 0; t < n; ++t) {
        const std::int64_t p = first + t;
        const auto [k_type, k_row] = row_of(true, p);
        double dot = 0.0, abs = 0.0, k_abs = 0.0, dot0 = 0.0, dl = 0.0;
        std::vector<double> ks(static_cast<std::size_t>(d));
        for (std::int64_t e = 0; e < d; ++e)
          ks[static_cast<std::size_t>(e)] = in.k[static_cast<std::size_t>(p * in.ldkv + g * d + e)];
        if (cache.layout.k_rotated) hadamard(ks);  // the rotated original values, as quantized
        for (std::int64_t e = 0; e < d; ++e) {
          const double kv = stored_value(k_type, k_row, width, d, g * d + e);
          dot += qs[static_cast<std::size_t>(e)] * kv;
          abs += std::fabs(qs[static_cast<std::size_t>(e)] * kv);
          k_abs += std::fabs(kv);
          dot0 += qh[static_cast<std::size_t>(e)] * in.k[static_cast<std::size_t>(p * in.ldkv + g * d + e)];
          dl += std::fabs(qs[static_cast<std::size_t>(e)]) *
                value_error(k_type, k_row, width, d, g * d + e, ks[static_cast<std::size_t>(e)]);
        }
        s[static_cast<std::size_t>(t)] = dot * scale;
        s0[static_cast<std::size_t>(t)] = dot0 * scale;
        double err = test::dot_tolerance(d, abs * scale, 2);
        if (cache.layout.k_rotated) err += test::gamma(levels + 2) * q_abs / std::sqrt(double(d)) * k_abs * scale;
        score_err = std::max(score_err, err);
        max_delta = std::max(max_delta, dl * scale);
      }
      const auto softmax = [](std::vector<double> x) {
        const double m = *std::max_element(x.begin(), x.end());
        double z = 0.0;
        for (double& v : x) z += v = std::exp(v - m);
        for (double& v : x) v /= z;
        return x;
      };
      const std::vector<double> pr = softmax(s), p0 = softmax(s0);
      std::vector<double> o(static_cast<std::size_t>(d)), tol(o.size()), o0(o.size()), qerr(o.size());
      for (std::int64_t e = 0; e < d; ++e) {
        double acc = 0.0, wabs = 0.0, acc0 = 0.0, w0abs = 0.0, werr = 0.0;
        for (std::int64_t t = 0; t < n; ++t) {
          const std::int64_t p = first + t;
          const auto [v_type, v_row] = row_of(false, p);
          const double vv = stored_value(v_type, v_row, width, d, g * d + e);
          acc += pr[static_cast<std::size_t>(t)] * vv;
          wabs += pr[static_cast<std::size_t>(t)] * std::fabs(vv);
          acc0 += p0[static_cast<std::size_t>(t)] * in.v[static_cast<std::size_t>(p * in.ldkv + g * d + e)];
          w0abs += p0[static_cast<std::size_t>(t)] * std::fabs(vv);
          // err_v bound in the stored domain (the stored value stands in for x: F16's relative
          // bound then errs by a factor 1 + 2^-11, covered by the 2^-25 floor and the slack below).
          werr +=
              p0[static_cast<std::size_t>(t)] * value_error(v_type, v_row, width, d, g * d + e, vv);
        }
        o[static_cast<std::size_t>(e)] = acc;
        tol[static_cast<std::size_t>(e)] = test::softmax_weighted_tolerance(score_err, n, wabs);
        o0[static_cast<std::size_t>(e)] = acc0;
        qerr[static_cast<std::size_t>(e)] = std::expm1(2.0 * max_delta) * w0abs + werr;
      }
      if (cache.layout.v_rotated) {
        double o_abs = 0.0, tol_sum = 0.0, qerr_sum = 0.0;
        for (std::int64_t e = 0; e < d; ++e) {
          o_abs += std::fabs(o[static_cast<std::size_t>(e)]);
          tol_sum += tol[static_cast<std::size_t>(e)];
          qerr_sum += qerr[static_cast<std::size_t>(e)];
        }
        hadamard(o);
        const double sq = std::sqrt(static_cast<double>(d));
        std::fill(tol.begin(), tol.end(), tol_sum / sq + test::gamma(levels + 1) * o_abs / sq);
        std::fill(qerr.begin(), qerr.end(), qerr_sum / sq);
      }
      for (std::int64_t e = 0; e < d; ++e) {
        const auto x = static_cast<std::size_t>(e);
        ref.exact.push_back(o[x]);
        ref.tight.push_back(tol[x]);
        ref.original.push_back(o0[x]);
        ref.loose.push_back(1.01 * (tol[x] + qerr[x]));  // 1% for the double evaluation of the bound
      }
    }
  }
  return ref;
}

inline std::vector<float> output_elements(const Inputs& in, const std::vector<float>& out) {
  std::vector<float> actual;
  for (std::int64_t i = 0; i < in.c.rows; ++i) {
    for (std::int64_t e = 0; e < in.n_heads * in.c.head_dim; ++e)
      actual.push_back(out[static_cast<std::size_t>(i * in.ldq + e)]);
    for (std::int64_t e = in.n_heads * in.c.head_dim; e < in.ldq && i + 1 < in.c.rows; ++e) {
      REQUIRE(out[static_cast<std::size_t>(i * in.ldq + e)] == kSentinel);  // gaps untouched
    }
  }
  return actual;
}

inline std::uint64_t seed_of(const Case& c, const Layout& l, std::int64_t bs) {
  return static_cast<std::uint64_t>(c.group * 7919 + c.head_dim * 131 + c.pos0 * 17 + c.rows * 5 + c.window * 3 +
                                    c.n_kv + static_cast<int>(l.k) * 1000003 + static_cast<int>(l.v) * 100003 +
                                    (l.k_rotated ? 77 : 0) + (l.v_rotated ? 777 : 0) + bs * 31);
}

}  // namespace sitsrt::test::paged_kv
