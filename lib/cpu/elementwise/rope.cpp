#include "cpu/elementwise/rope.hpp"

#include "core/check.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <vector>

namespace sitsrt::cpu {
namespace {

// Pairs handled per pass: one row's cos/sin live on the stack.
constexpr std::int64_t kPairChunk = 64;
// Pairs whose frequencies are precomputed on the stack per call (rot_dims <= 2048).
constexpr std::int64_t kMaxPairs = 1024;

// One position's cos/sin for every pair, and everything they depend on. A decode step ropes q
// and k of every layer at the same position with the same parameters (48 calls for 24 layers);
// each thread keeps its last table, so they are computed once per step (a call costs ~3.5 us:
// a pow, a cos and a sin per pair). freq_factors are compared by value: a later model may
// reuse the address with other factors.
struct RopeTable {
  bool valid = false;
  std::int32_t pos = 0;
  std::int64_t rot_dims = 0;
  float freq_base = 0.0f, freq_scale = 0.0f;
  bool has_factors = false;
  YarnParams yarn;
  Llama3Params llama3;
  float factors[kMaxPairs] = {};
  float cs[kMaxPairs] = {}, sn[kMaxPairs] = {};

  // Field by field; NaN parameters never match, so they recompute.
  [[nodiscard]] bool holds(const RopeParams& p, std::int32_t position) const noexcept {
    const auto same_yarn = [](const YarnParams& a, const YarnParams& b) {
      return a.enabled == b.enabled && a.original_context == b.original_context && a.beta_fast == b.beta_fast &&
             a.beta_slow == b.beta_slow && a.attn_factor == b.attn_factor;
    };
    const auto same_llama3 = [](const Llama3Params& a, const Llama3Params& b) {
      return a.enabled == b.enabled && a.factor == b.factor && a.low_freq_factor == b.low_freq_factor &&
             a.high_freq_factor == b.high_freq_factor && a.original_context == b.original_context;
    };
    return valid && pos == position && rot_dims == p.rot_dims && freq_base == p.freq_base &&
           freq_scale == p.freq_scale && has_factors == (p.freq_factors != nullptr) && same_yarn(yarn, p.yarn) &&
           same_llama3(llama3, p.llama3) &&
           (!has_factors || std::equal(factors, factors + rot_dims / 2, p.freq_factors));
  }
  void remember(const RopeParams& p, std::int32_t position) noexcept {
    valid = true;
    pos = position;
    rot_dims = p.rot_dims;
    freq_base = p.freq_base;
    freq_scale = p.freq_scale;
    has_factors = p.freq_factors != nullptr;
    yarn = p.yarn;
    llama3 = p.llama3;
    if (has_factors) std::copy(p.freq_factors, p.freq_factors + rot_dims / 2, factors);
  }
};

// The cos/sin tables of the positions a thread roped last, for batches of up to kCachedRows rows:
// a decode step of B sequences ropes q and k of every layer at the same B positions (48 calls for
// 24 layers), so each position's table is computed once per step instead of once per call (16
// streams: ~0.8 ms of a ~40 ms step). Direct-mapped by position; `key` holds the parameters (its
// position unused), and a change of parameters empties every slot.
constexpr std::int64_t kCachedRows = 64;
struct RopeCache {
  static constexpr std::int32_t kSlots = 64;
  struct Slot {
    std::int32_t pos = -1;
    std::vector<float> cs, sn;
  };
  RopeTable key;
  std::vector<double> inv_freq;  // of key's parameters
  double mscale = 1.0;
  std::array<Slot, kSlots> slots;
};

// cos / sin of pairs 0 .. n - 1 at `pos` (inv_freq, mscale: rope_inverse_frequencies).
void fill_angles(double pos, const double* inv_freq, double mscale, std::int64_t n, float* cs, float* sn) {
  const bool scaled = mscale != 1.0;
  for (std::int64_t j = 0; j < n; ++j) {
    const double theta = pos * inv_freq[j];
    cs[j] = static_cast<float>(scaled ? mscale * std::cos(theta) : std::cos(theta));
    sn[j] = static_cast<float>(scaled ? mscale * std::sin(theta) : std::sin(theta));
  }
}

// YaRN's pair index at which a dimension turns n_rotations times over the original context.
double yarn_correction_dim(double rot_dims, double original_context, double n_rotations, double base) {
  return rot_dims * std::log(original_context / (n_rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

void rope_inverse_frequencies(const RopeParams& p, double* inv_freq, double* mscale) {
  const std::int64_t half = p.rot_dims / 2;
  const auto base = static_cast<double>(p.freq_base);
  double ramp_low = 0, ramp_high = 0;
  if (p.yarn.enabled) {
    const auto rot = static_cast<double>(p.rot_dims);
    ramp_low = std::max(0.0, std::floor(yarn_correction_dim(rot, p.yarn.original_context, p.yarn.beta_fast, base)));
    ramp_high = std::min(rot - 1, std::ceil(yarn_correction_dim(rot, p.yarn.original_context, p.yarn.beta_slow, base)));
  }
  for (std::int64_t j = 0; j < half; ++j) {
    const double exponent = -2.0 * static_cast<double>(j) / static_cast<double>(p.rot_dims);
    const double original = std::pow(base, exponent);
    double factor = p.freq_factors != nullptr ? p.freq_factors[j] : 1.0;
    if (p.llama3.enabled) {
      const double wavelength = 2.0 * std::numbers::pi / original;
      const double short_wave = p.llama3.original_context / p.llama3.high_freq_factor;
      const double long_wave = p.llama3.original_context / p.llama3.low_freq_factor;
      if (wavelength > long_wave) {
        factor *= p.llama3.factor;
      } else if (wavelength >= short_wave) {
        const double smooth = (p.llama3.original_context / wavelength - p.llama3.low_freq_factor) /
                              (p.llama3.high_freq_factor - p.llama3.low_freq_factor);
        factor *= 1.0 / ((1.0 - smooth) / p.llama3.factor + smooth);
      }
    }
    if (p.yarn.enabled) {
      // keep = 1 for fast pairs (extrapolate), 0 for slow pairs (interpolate by freq_scale).
      const double y = (static_cast<double>(j) - ramp_low) / std::max(0.001, ramp_high - ramp_low);
      const double keep = 1.0 - std::clamp(y, 0.0, 1.0);
      const auto scale = static_cast<double>(p.freq_scale);
      inv_freq[j] = original * (scale * (1.0 - keep) + keep) / factor;
    } else {
      inv_freq[j] = static_cast<double>(p.freq_scale) * original / factor;
    }
  }
  *mscale = 1.0;
  if (p.yarn.enabled) {
    *mscale = p.yarn.attn_factor * (1.0 + 0.1 * std::log(1.0 / static_cast<double>(p.freq_scale)));
  }
}

// Angles are computed in double (theta = pos * inv_freq_i) and cos/sin are evaluated in double,
// then rounded to float once: the only float error is in the rotation itself. Every row and head
// reuses the row's cos/sin.
void rope(CpuContext& ctx, float* x, std::int64_t ldx, std::int64_t rows, std::int64_t n_heads,
          const std::int32_t* positions, const RopeParams& params) {
  const std::int64_t hd = params.head_dim, rot = params.rot_dims;
  if (hd <= 0 || rot < 0 || rot > hd || rot % 2 != 0 || n_heads < 0 || rows < 0 || rot / 2 > kMaxPairs) {
    raise(ErrorCode::kInvalidArgument, "rope: bad shape head_dim={} rot_dims={} n_heads={} rows={}", hd, rot, n_heads,
          rows);
  }
  if (!(params.freq_base > 0.0f)) raise(ErrorCode::kInvalidArgument, "rope: freq_base {} <= 0", params.freq_base);
  if (params.yarn.enabled && !(params.yarn.original_context > 0.0 && params.freq_scale > 0.0f)) {
    raise(ErrorCode::kInvalidArgument, "rope: YaRN needs original_context > 0 and freq_scale > 0");
  }
  const std::int64_t half = rot / 2;
  if (rows == 0 || half == 0 || n_heads == 0) return;
  const bool neox = params.style == RopeStyle::kNeox;
  // Rotates pairs j0 .. j0 + nj - 1 of every head of `row` by cs / sn (indexed from j0).
  const auto rotate_pairs = [&](float* row, const float* cs, const float* sn, std::int64_t j0, std::int64_t nj) {
    for (std::int64_t h = 0; h < n_heads; ++h) {
      float* head = row + h * hd;
      // normal: pair (2j, 2j+1); neox: pair (j, j + half).
      float* a = neox ? head + j0 : head + 2 * j0;
      float* b = neox ? head + j0 + half : head + 2 * j0 + 1;
      const std::int64_t step = neox ? 1 : 2;
      for (std::int64_t j = 0; j < nj; ++j) {
        const float x0 = a[j * step], x1 = b[j * step];
        a[j * step] = x0 * cs[j] - x1 * sn[j];
        b[j * step] = x0 * sn[j] + x1 * cs[j];
      }
    }
  };
  double inv_freq[kMaxPairs];
  double mscale_d = 1.0;
  if (rows == 1) {  // decode: on the calling thread, with its memoised table
    thread_local RopeTable table;
    if (!table.holds(params, positions[0])) {
      table.valid = false;  // until filled
      rope_inverse_frequencies(params, inv_freq, &mscale_d);
      fill_angles(positions[0], inv_freq, mscale_d, half, table.cs, table.sn);
      table.remember(params, positions[0]);
    }
    rotate_pairs(x, table.cs, table.sn, 0, half);
    return;
  }
  if (rows <= kCachedRows) {  // a decode batch: per-thread tables of its positions
    ctx.pool().run([&](int t, int threads) {
      const Range r = split_range(rows, t, threads);
      if (r.begin >= r.end) return;
      thread_local RopeCache cache;
      if (!cache.key.holds(params, 0)) {
        cache.key.valid = false;  // until filled
        for (RopeCache::Slot& slot : cache.slots) slot.pos = -1;
        cache.inv_freq.resize(static_cast<std::size_t>(half));
        rope_inverse_frequencies(params, cache.inv_freq.data(), &cache.mscale);
        cache.key.remember(params, 0);
      }
      for (std::int64_t i = r.begin; i < r.end; ++i) {
        const std::int32_t pos = positions[i];
        RopeCache::Slot& slot = cache.slots[static_cast<std::size_t>(pos & (RopeCache::kSlots - 1))];
        if (slot.pos != pos) {
          slot.pos = -1;  // until filled
          slot.cs.resize(static_cast<std::size_t>(half));
          slot.sn.resize(static_cast<std::size_t>(half));
          fill_angles(pos, cache.inv_freq.data(), cache.mscale, half, slot.cs.data(), slot.sn.data());
          slot.pos = pos;
        }
        rotate_pairs(x + i * ldx, slot.cs.data(), slot.sn.data(), 0, half);
      }
    });
    return;
  }
  rope_inverse_frequencies(params, inv_freq, &mscale_d);
  ctx.pool().run([&](int t, int threads) {
    const Range r = split_range(rows, t, threads);
    float cs[kPairChunk], sn[kPairChunk];
    for (std::int64_t j0 = 0; j0 < half; j0 += kPairChunk) {
      const std::int64_t nj = std::min(kPairChunk, half - j0);
      for (std::int64_t i = r.begin; i < r.end; ++i) {
        fill_angles(positions[i], inv_freq + j0, mscale_d, nj, cs, sn);
        rotate_pairs(x + i * ldx, cs, sn, j0, nj);
      }
    }
  });
}

}  // namespace sitsrt::cpu
