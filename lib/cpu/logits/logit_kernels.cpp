// The scalar definitions of the logit passes, the level choice, and the probe that ties the
// vector exp to the C library's expf.
#include "cpu/logits/logit_kernels.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace sitsrt::cpu {
namespace detail {
namespace {

LogitMax max_logit_generic(const float* logits, std::int64_t n) {
  LogitMax best{-std::numeric_limits<float>::infinity(), -1};
  for (std::int64_t i = 0; i < n; ++i) {
    const float logit = logits[i];
    if (std::isnan(logit)) continue;
    if (best.index < 0 || logit > best.value) best = {logit, i};  // ties keep the first
  }
  return best;
}

ExpSums exp_sums_generic(const float* logits, std::int64_t n, float max) {
  ExpSums sums{0.0, 0.0};
  for (std::int64_t i = 0; i < n; ++i) {
    const float shifted = logits[i] - max;
    const float e = std::exp(shifted);
    if (e > 0.0f) {  // also skips NaN; avoids 0 * -inf for -inf logits
      sums.sum += e;
      sums.weighted += static_cast<double>(e) * shifted;
    }
  }
  return sums;
}

std::int64_t first_above_generic(const float* logits, std::int64_t from, std::int64_t n, float threshold) {
  while (from < n && !(logits[from] > threshold)) ++from;
  return from;
}

void exp_row_generic(const float* x, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = std::exp(x[i]);
}

void draw_weights_generic(const float* logits, std::int64_t n, float max, double inv_temperature, float* out) {
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = std::isnan(logits[i])
                 ? 0.0f
                 : static_cast<float>(std::exp(static_cast<double>(logits[i] - max) * inv_temperature));
  }
}

constexpr LogitKernels kGeneric{max_logit_generic, exp_sums_generic, first_above_generic, exp_row_generic,
                                draw_weights_generic};

// Inputs where an exp implementation shows its structure: every table slot and rounding
// direction across the softmax range [-104, 0], both sides of each underflow threshold, the
// overflow side, the specials, subnormal inputs.
std::vector<float> exp_probe_inputs() {
  std::vector<float> x;
  for (int i = 0; i <= 20800; ++i) x.push_back(-0.005f * static_cast<float>(i) - 1e-7f * static_cast<float>(i % 7));
  for (const float edge : {-0x1.9fe368p6f, -0x1.9d1d9ep6f, -88.0f, 88.0f, 0x1.62e42ep6f}) {
    float below = edge;
    float above = edge;
    for (int i = 0; i < 8; ++i) {
      x.push_back(below);
      x.push_back(above);
      below = std::nextafter(below, -INFINITY);
      above = std::nextafter(above, INFINITY);
    }
  }
  for (int i = 0; i < 2000; ++i) x.push_back(0.045f * static_cast<float>(i));  // (0, 90)
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (const float special : {0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
                              std::numeric_limits<float>::min(), -std::numeric_limits<float>::max()}) {
    x.push_back(special);
  }
  return x;
}

// Logits (max 0) whose draw exponents cover the range where weights are not 0: a fine sweep of
// [-120, 0], the neighbours of draw_exp_constants::kZeroBelow, ties with max, -inf and NaN.
std::vector<float> draw_probe_logits() {
  std::vector<float> x;
  for (int i = 0; i <= 24000; ++i) x.push_back(-0.005f * static_cast<float>(i) - 1e-7f * static_cast<float>(i % 11));
  float edge = -200.0f;
  for (int i = 0; i < 8; ++i) {
    x.push_back(edge);
    edge = std::nextafter(edge, 0.0f);
  }
  for (const float special : {0.0f, -0.0f, -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::max()}) {
    x.push_back(special);
  }
  return x;
}

}  // namespace

bool draw_weights_match_libm(const LogitKernels& kernels) noexcept {
  try {
    const std::vector<float> logits = draw_probe_logits();
    const auto n = static_cast<std::int64_t>(logits.size());
    std::vector<float> got(logits.size()), want(logits.size());
    for (const double inv_temperature : {1.0, 1.0 / 0.7, 1.0 / 1.3, 4.0}) {
      kernels.draw_weights(logits.data(), n, 0.0f, inv_temperature, got.data());
      draw_weights_generic(logits.data(), n, 0.0f, inv_temperature, want.data());
      if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) != 0) return false;
    }
    return true;
  } catch (...) {  // allocation failure: take the scalar loop
    return false;
  }
}

const LogitKernels& logit_kernels_generic() noexcept {
  return kGeneric;
}

const LogitKernels& logit_kernels_for(Isa isa) noexcept {
#if defined(SITSRT_X86_KERNELS)
  if (isa == Isa::kAvx512 || isa == Isa::kAvx512Vnni || isa == Isa::kAmx) return logit_kernels_avx512();
  if (isa == Isa::kAvx2) return logit_kernels_avx2();
#endif
  (void)isa;
  return kGeneric;
}

bool exp_matches_libm(const LogitKernels& kernels) noexcept {
  try {
    const std::vector<float> x = exp_probe_inputs();
    std::vector<float> got(x.size());
    kernels.exp_row(x.data(), got.data(), static_cast<std::int64_t>(x.size()));
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float want = std::exp(x[i]);
      if (std::isnan(want) ? !std::isnan(got[i])
                           : std::bit_cast<std::uint32_t>(want) != std::bit_cast<std::uint32_t>(got[i])) {
        return false;
      }
    }
    return true;
  } catch (...) {  // allocation failure: take the scalar loop
    return false;
  }
}

}  // namespace detail

namespace {

// The passes that compare only, at the best level this CPU has.
const detail::LogitKernels& fastest_kernels() noexcept {
  static const detail::LogitKernels& fastest = detail::logit_kernels_for(detect_isa());
  return fastest;
}

// The fastest level if `agrees` (a probe against the scalar form) accepts it, else the generic one.
const detail::LogitKernels& probed(bool (*agrees)(const detail::LogitKernels&) noexcept) noexcept {
  const detail::LogitKernels& fastest = fastest_kernels();
  return &fastest == &detail::logit_kernels_generic() || agrees(fastest) ? fastest : detail::logit_kernels_generic();
}

// exp_sums' level: the fastest, if its exp agrees with this C library's expf.
const detail::LogitKernels& exp_kernels() noexcept {
  static const detail::LogitKernels& chosen = probed(detail::exp_matches_libm);
  return chosen;
}

// draw_weights' level: the fastest, if it agrees with the scalar form on the probe set.
const detail::LogitKernels& draw_kernels() noexcept {
  static const detail::LogitKernels& chosen = probed(detail::draw_weights_match_libm);
  return chosen;
}

// Orders by logit, descending; equal logits rank the lower id first.
bool ranks_higher(const IdLogit& a, const IdLogit& b) noexcept {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

}  // namespace

LogitMax max_logit(std::span<const float> logits) noexcept {
  return fastest_kernels().max_logit(logits.data(), static_cast<std::int64_t>(logits.size()));
}

ExpSums exp_sums(std::span<const float> logits, float max) noexcept {
  return exp_kernels().exp_sums(logits.data(), static_cast<std::int64_t>(logits.size()), max);
}

std::int64_t first_above(std::span<const float> logits, std::int64_t from, float threshold) noexcept {
  return fastest_kernels().first_above(logits.data(), from, static_cast<std::int64_t>(logits.size()), threshold);
}

void draw_weights(std::span<const float> logits, float max, double inv_temperature, std::span<float> out) noexcept {
  draw_kernels().draw_weights(logits.data(), static_cast<std::int64_t>(logits.size()), max, inv_temperature,
                              out.data());
}

void top_k_logits(std::span<const float> logits, std::int64_t k, std::vector<IdLogit>& out) {
  const auto n = static_cast<std::int64_t>(logits.size());
  const auto kept = static_cast<std::size_t>(std::clamp<std::int64_t>(k, 0, n));
  out.clear();
  if (kept == 0) return;
  // A heap whose front is the worst kept. Ids arrive in increasing order, so a newcomer that
  // ties the worst loses (its id is larger): only logits strictly above the worst can enter.
  std::int64_t id = 0;
  for (; id < n && out.size() < kept; ++id) {
    if (std::isnan(logits[id])) continue;
    out.push_back({static_cast<std::int32_t>(id), logits[id]});
    std::push_heap(out.begin(), out.end(), ranks_higher);
  }
  if (out.size() == kept) {
    const detail::LogitKernels& kernels = fastest_kernels();
    while ((id = kernels.first_above(logits.data(), id, n, out.front().logit)) < n) {
      std::pop_heap(out.begin(), out.end(), ranks_higher);
      out.back() = {static_cast<std::int32_t>(id), logits[id]};
      std::push_heap(out.begin(), out.end(), ranks_higher);
      ++id;
    }
  }
  std::sort_heap(out.begin(), out.end(), ranks_higher);  // best first
}

void summarize_logits(std::span<const float> logits, std::int64_t k, LogitSummary& out) {
  const LogitMax largest = max_logit(logits);
  out.max = largest.value;
  out.argmax = largest.index;
  out.exp_sum = out.exp_weighted = 0.0;
  if (std::isfinite(largest.value)) {
    const ExpSums sums = exp_sums(logits, largest.value);
    out.exp_sum = sums.sum;
    out.exp_weighted = sums.weighted;
  }
  top_k_logits(logits, k, out.best);
}

}  // namespace sitsrt::cpu
