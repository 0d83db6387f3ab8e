// Portable row primitives (see vec_kernels.hpp): plain loops the compiler can vectorise for the
// baseline target, std::exp for the exponentials. Same algorithm and scratch layout as the ISA
// files so every level is tested by the same cases.
#include "core/half.hpp"
#include "cpu/attention/kv_quant.hpp"
#include "cpu/vec_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace sitsrt::cpu::detail {
namespace {

constexpr std::int64_t pad16(std::int64_t v) {
  return (v + 15) / 16 * 16;
}

// Dot product over dp (a multiple of 16) padded floats with 16 partial sums, the same
// association as one 16-lane register (keeps the generic level numerically like the others).
inline float dot_padded(const float* a, const float* b, std::int64_t dp) {
  float acc[16] = {};
  for (std::int64_t c = 0; c < dp; c += 16) {
    for (int l = 0; l < 16; ++l) acc[l] += a[c + l] * b[c + l];
  }
  float s = 0.0f;
  for (int l = 0; l < 8; ++l) acc[l] += acc[l + 8];
  for (int l = 0; l < 4; ++l) acc[l] += acc[l + 4];
  s = (acc[0] + acc[2]) + (acc[1] + acc[3]);
  return s;
}

// One chunk of one (query row, kv head) pair (see AttendArgs): scores for all `group` heads
// reading each key once, softmax numerators exp(s - max) with a float sum per head (16 partial
// sums), then the value sum reading each value once.
// Rows are widened by dequantize_span (kv_quant.hpp): the reference the SIMD levels match.
template <KvType T>
struct RowOf {
  static void widen(const std::byte* row, const AttendSide& side, std::int64_t d, float* dst) {
    dequantize_span(T, row, side.width, d, side.e0, d, dst);
  }
};

template <typename KRow, typename VRow>
struct AttendGeneric {
  static void run(const AttendArgs& a);
};

template <typename KRow, typename VRow>
void AttendGeneric<KRow, VRow>::run(const AttendArgs& a) {
  const std::int64_t d = a.head_dim, dp = pad16(d), g = a.group, n = a.n;
  float* qp = a.scratch;             // g x dp, pre-scaled
  float* s = qp + g * dp;            // g x kAttendChunk
  float* kv = s + g * kAttendChunk;  // one widened row, dp
  for (std::int64_t h = 0; h < g; ++h) {
    for (std::int64_t c = 0; c < dp; ++c) qp[h * dp + c] = c < d ? a.q[h * d + c] * a.scale : 0.0f;
  }
  std::fill(kv, kv + dp, 0.0f);
  for (std::int64_t p = 0; p < n; ++p) {
    KRow::widen(a.k.rows[p], a.k, d, kv);
    for (std::int64_t h = 0; h < g; ++h) s[h * kAttendChunk + p] = dot_padded(qp + h * dp, kv, dp);
  }
  for (std::int64_t h = 0; h < g; ++h) {
    float* sh = s + h * kAttendChunk;
    float max = -std::numeric_limits<float>::infinity();
    for (std::int64_t p = 0; p < n; ++p) max = std::max(max, sh[p]);
    float sum[16] = {};
    for (std::int64_t p = 0; p < n; ++p) {
      sh[p] = std::exp(sh[p] - max);
      sum[p % 16] += sh[p];
    }
    float total = 0.0f;
    for (float part : sum) total += part;
    a.max[h] = max;
    a.sum[h] = total;
  }
  std::fill(a.o, a.o + g * dp, 0.0f);
  for (std::int64_t p = 0; p < n; ++p) {
    VRow::widen(a.v.rows[p], a.v, d, kv);
    for (std::int64_t h = 0; h < g; ++h) {
      const float weight = s[h * kAttendChunk + p];
      float* oh = a.o + h * dp;
      for (std::int64_t c = 0; c < dp; ++c) oh[c] += weight * kv[c];
    }
  }
}

void swiglu_row_generic(const float* gate, const float* up, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g * up[i] / (1.0f + std::exp(-g));
  }
}

void geglu_row_generic(const float* gate, const float* up, float* out, std::int64_t n) {
  constexpr float kTwoSqrt2OverPi = 1.5957691216057308f;
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g * up[i] / (1.0f + std::exp(-kTwoSqrt2OverPi * (g + 0.044715f * g * g * g)));
  }
}

void f32_to_f16_row_generic(const float* src, std::uint16_t* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void int4_quantize_groups_generic(const float* x, std::int64_t groups, std::byte* indices, std::byte* codes) {
  quantize_int4_groups(x, groups, indices, codes);
}

constexpr VecKernels kGenericVec = {
    attend_table<AttendGeneric, RowOf<KvType::kF32>, RowOf<KvType::kF16>, RowOf<KvType::kInt8>, RowOf<KvType::kInt4>>(),
    swiglu_row_generic,
    geglu_row_generic,
    f32_to_f16_row_generic,
    int4_quantize_groups_generic,
};

}  // namespace

const VecKernels& vec_kernels_generic() noexcept {
  return kGenericVec;
}

}  // namespace sitsrt::cpu::detail
