// Passes over one row of logits that sampling and the per-token statistics make on the host
// after every decode step: the largest logit (greedy choice, softmax shift, the finiteness check)
// and the softmax sums. Over a 32k vocabulary these ran ~0.4 ms a sequence in scalar code, ~7% of
// a 16-sequence decode step. Every level gives the same bits as the scalar definitions below,
// because token logprobs are what audit replay compares (docs/audit.md).
#pragma once

#include "core/logit_summary.hpp"
#include "cpu/cpu_context.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace sitsrt::cpu {

// The largest non-NaN value and the first index holding it. When every number is -inf, -inf and
// the first non-NaN index; when there is no number (all NaN, or empty), -inf and index -1.
struct LogitMax {
  float value;
  std::int64_t index;
};

// Softmax sums over e_i = expf(l_i - max) (float subtraction, the C library's expf):
// sum = sum e_i and weighted = sum e_i * (l_i - max), both in double, added in index order,
// terms with e_i > 0 only (NaN and underflowed terms are left out).
struct ExpSums {
  double sum;
  double weighted;
};

// Fastest level this CPU has that agreed with the C library's expf on a probe set at first use
// (bit for bit; else the scalar loop, which calls expf itself).
LogitMax max_logit(std::span<const float> logits) noexcept;
ExpSums exp_sums(std::span<const float> logits, float max) noexcept;
std::int64_t first_above(std::span<const float> logits, std::int64_t from, float threshold) noexcept;

// The k best logits as (id, logit), best first: larger logit first, equal logits the lower id
// first, NaN never; k is clamped to the row. `out` is reused (no allocation once it has grown).
// A heap of the k kept, fed only by the logits above its worst, which first_above finds: the
// row is read once at vector speed and the heap sees O(k log(n / k)) candidates on random rows.
using sitsrt::IdLogit;  // core/logit_summary.hpp
void top_k_logits(std::span<const float> logits, std::int64_t k, std::vector<IdLogit>& out);

// The weights a sampler draws from when every logit is a candidate: out[i] =
// (float) std::exp((double)(logits[i] - max) * inv_temperature) (float subtraction, the C
// library's double exp), 0 for NaN; max is the largest logit, so every exponent is <= 0. The
// vector levels compute the exp in double to a few ulp and hand each value lying near a float
// rounding boundary to std::exp, so the floats are the library's (draw_exp_constants.hpp); the
// level is taken only where it agreed with the scalar form on a probe set at first use.
// out.size() >= logits.size().
void draw_weights(std::span<const float> logits, float max, double inv_temperature, std::span<float> out) noexcept;

// The summary of one row (core/logit_summary.hpp) with its k best: max_logit, then exp_sums when
// the max is finite, then top_k_logits; `out.best` is reused.
void summarize_logits(std::span<const float> logits, std::int64_t k, LogitSummary& out);

namespace detail {

struct LogitKernels {
  LogitMax (*max_logit)(const float* logits, std::int64_t n);
  ExpSums (*exp_sums)(const float* logits, std::int64_t n, float max);
  // The first j in [from, n) with logits[j] > threshold (never a NaN), or n.
  std::int64_t (*first_above)(const float* logits, std::int64_t from, std::int64_t n, float threshold);
  // out[i] = expf(x[i]) as exp_sums computes it (for the probe and the tests).
  void (*exp_row)(const float* x, float* out, std::int64_t n);
  void (*draw_weights)(const float* logits, std::int64_t n, float max, double inv_temperature, float* out);
};

const LogitKernels& logit_kernels_generic() noexcept;
#if defined(SITSRT_X86_KERNELS)
const LogitKernels& logit_kernels_avx2() noexcept;
const LogitKernels& logit_kernels_avx512() noexcept;
#endif
// The table for `isa` (callers check isa_supported).
const LogitKernels& logit_kernels_for(Isa isa) noexcept;
// True when `kernels.exp_row` equals std::exp on the probe set (0 ulp; specials included).
bool exp_matches_libm(const LogitKernels& kernels) noexcept;
// True when `kernels.draw_weights` equals the scalar form on a probe set: exponents across
// [-120, 0] at several temperatures, the zero threshold's neighbours, -inf, NaN, ties with max.
bool draw_weights_match_libm(const LogitKernels& kernels) noexcept;

}  // namespace detail
}  // namespace sitsrt::cpu
