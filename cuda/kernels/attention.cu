// Paged attention over quantized K/V rows (ops::KvType layouts, the same bytes the CPU backend
// writes): a store kernel writes the step's new rows through each sequence's block table
// (centering, channel scales, Hadamard rotation and int8/int4 quantization as
// device_formats.hpp computes them), then one block per (row, query head) attends over the
// row's positions in chunks of 256 with a running max (online softmax), dequantizing K and V
// element by element from the cache. Decode rows (up to kAttentionSplitMaxRows) are split over
// the sequence instead (flash-decoding, below), the query heads of a GQA group in one block;
// longer steps take the tiled kernel on the tensor cores where the caller listed tiles
// (attention_tiled.cu), else the same kernel as one split per row (AttentionLaunch::staged). The
// one-pass kernel per (row, head) remains for shapes those do not take (a group above 8 heads,
// head_dim above 256).
#include "cuda_backend/device_formats.hpp"
#include "cuda_backend/kernels/dynamic_shared.hpp"
#include "cuda_backend/kernels/grid_dependency.hpp"
#include "cuda_backend/kernels/head_rotation.hpp"
#include "cuda_backend/kernels/launch.hpp"
#include "cuda_backend/kernels/rope_math.hpp"

#include <cmath>

namespace sitsrt::cuda {
namespace {

constexpr int kStoreThreads = 256;
constexpr int kAttendThreads = 128;
constexpr int kChunk = 256;
constexpr int kDimsPerThread = static_cast<int>(kMaxHeadDim / kAttendThreads);

__device__ inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ inline void store_u16(std::uint8_t* p, std::uint16_t v) {
  p[0] = static_cast<std::uint8_t>(v & 0xffu);
  p[1] = static_cast<std::uint8_t>(v >> 8);
}

// One row of `width` values from shared memory into `type`'s layout at dst.
__device__ void store_row(int type, const float* buf, std::uint8_t* dst, std::int64_t width, std::int64_t head_dim) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  switch (type) {
    case 0:  // byte stores: an f32 plane after an int4 / int8 one may start at any address
      for (std::int64_t e = threadIdx.x; e < width; e += blockDim.x) {
        const std::uint32_t bits = float_bits(buf[e]);
        store_u16(dst + 4 * e, static_cast<std::uint16_t>(bits & 0xffffu));
        store_u16(dst + 4 * e + 2, static_cast<std::uint16_t>(bits >> 16));
      }
      return;
    case 1:  // byte stores too: planes after an int4 / int8 one may start at an odd address
      for (std::int64_t e = threadIdx.x; e < width; e += blockDim.x) store_u16(dst + 2 * e, float_to_half(buf[e]));
      return;
    case 2:  // a warp per head: its max |x|, the f16 scale, the levels
      for (std::int64_t g = warp; g < width / head_dim; g += warps) {
        float amax = 0.0f;
        for (std::int64_t d = lane; d < head_dim; d += 32) amax = fmaxf(amax, fabsf(buf[g * head_dim + d]));
        amax = warp_max(amax);
        const std::uint16_t h = int8_scale(amax);
        for (std::int64_t d = lane; d < head_dim; d += 32) {
          const int q = quantize_level(buf[g * head_dim + d], h, -127.0f, 127.0f);
          dst[g * head_dim + d] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
        }
        if (lane == 0) store_u16(dst + width + 2 * g, h);
      }
      return;
    default:  // int4 (core/kv_int4.hpp): a warp per group of 32, a lane per value
      for (std::int64_t g = warp; g < width / 32; g += warps) {
        const float x = buf[32 * g + lane];
        // As kv_int4::quantize_group: the maxima ignore NaN, each candidate's squared error is
        // summed by xor-butterfly (the host's tree order), the first least error wins.
        const float pos = warp_max(x > 0.0f ? x : 0.0f), neg = warp_max(-x > 0.0f ? -x : 0.0f);
        std::uint8_t code = 0;
        int q = 8;
        if (pos > 0.0f || neg > 0.0f) {
          float best_error = 0.0f;
          for (int c = 0; c < kv_int4::kCandidates; ++c) {
            const std::uint8_t candidate = kv_int4::candidate(pos, neg, c);
            const float scale = kv_int4::scale_of(candidate);
            int index = 0;
            float e = kv_int4::squared_error(x, scale, kv_int4::div_rn(1.0f, scale), &index);
            for (int off = 16; off > 0; off /= 2) e = __fadd_rn(e, __shfl_xor_sync(0xffffffffu, e, off));
            if (c == 0 || e < best_error) {
              code = candidate;
              best_error = e;
              q = index;
            }
          }
        }
        const int next = __shfl_down_sync(0xffffffffu, q, 1);
        if (lane % 2 == 0) dst[16 * g + lane / 2] = static_cast<std::uint8_t>(q | next << 4);
        if (lane == 0) dst[width / 2 + g] = code;
      }
      return;
  }
}

__global__ void kv_store_kernel(AttentionLaunch a) {
  begin_dependent_grid();
  SITSRT_DYNAMIC_SHARED(float, buf);
  const std::int64_t r = blockIdx.x;
  if (a.rope.count > 0) {  // a folded rope pair: this row of Q and K rotated first, in place
    const double pos = static_cast<double>(a.rope_positions[r]);
    for (int t = 0; t < a.rope.count; ++t) {
      const RopeTarget target = a.rope.t[t];
      rope_row(target.x + r * target.ldx, target.n_heads, a.rope_head_dim, a.rope_rot_dims, a.rope_neox, pos,
               a.rope_inv_freq, a.rope_mscale, threadIdx.x, blockDim.x);
    }
    __syncthreads();  // the block's writes to K are visible to its reads below
  }
  const AttentionSequenceDesc& s = a.sequences[a.row_sequence[r]];
  const std::int64_t width = a.n_kv_heads * a.head_dim;
  const std::int64_t phys = physical_row(s, s.pos0 + (r - s.row_begin));
  for (std::int64_t e = threadIdx.x; e < width; e += blockDim.x) {
    float x = a.k[r * a.ldk + e];
    if (s.k_offset != nullptr) x -= s.k_offset[e];
    if (s.k_scale != nullptr) x = x / s.k_scale[e];
    buf[e] = x;
  }
  __syncthreads();
  if (s.k_rotated != 0) hadamard_heads(buf, width, a.head_dim);
  store_row(s.k_type, buf, s.k + phys * s.k_row_bytes, width, a.head_dim);
  if (s.k_recent != nullptr) store_row(1, buf, a.k_exact + r * 2 * width, width, a.head_dim);  // as quantized
  __syncthreads();
  for (std::int64_t e = threadIdx.x; e < width; e += blockDim.x) buf[e] = a.v[r * a.ldv + e];
  __syncthreads();
  if (s.v_rotated != 0) hadamard_heads(buf, width, a.head_dim);
  store_row(s.v_type, buf, s.v + phys * s.v_row_bytes, width, a.head_dim);
  if (s.v_recent != nullptr) store_row(1, buf, a.v_exact + r * 2 * width, width, a.head_dim);
}

// After attention: each windowed side's copies of a sequence's last min(rows, window) rows of the
// step go to its ring (position p to row p % window), where the next steps find them.
__global__ void kv_commit_recent_kernel(AttentionLaunch a) {
  begin_dependent_grid();
  const std::int64_t r = blockIdx.x;
  const AttentionSequenceDesc& s = a.sequences[a.row_sequence[r]];
  const std::int64_t p = s.pos0 + (r - s.row_begin);
  if (s.recent_window <= 0 || p < s.pos0 + s.n_rows - s.recent_window) return;
  const std::int64_t bytes = 2 * a.n_kv_heads * a.head_dim, slot = p % s.recent_window;
  for (std::int64_t b = threadIdx.x; b < bytes; b += blockDim.x) {
    if (s.k_recent != nullptr) s.k_recent[slot * bytes + b] = a.k_exact[r * bytes + b];
    if (s.v_recent != nullptr) s.v_recent[slot * bytes + b] = a.v_exact[r * bytes + b];
  }
}

__global__ void attention_kernel(AttentionLaunch a) {
  begin_dependent_grid();
  __shared__ float q[kMaxHeadDim];
  __shared__ float weights[kChunk];
  __shared__ float reduced[2];
  const std::int64_t r = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const AttentionSequenceDesc& s = a.sequences[a.row_sequence[r]];
  const std::int64_t hd = a.head_dim, width = a.n_kv_heads * hd;
  const std::int64_t g = h / (a.n_heads / a.n_kv_heads);
  const std::int64_t pos = s.pos0 + (r - s.row_begin);
  const std::int64_t lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
  const std::int64_t exact_from = exact_begin(s, lo, pos);
  // Position p's K (V) row and the type it is read as: the f16 copy inside the exact window.
  const auto k_at = [&](std::int64_t p, int* type) {
    const bool exact = s.k_recent != nullptr && p >= exact_from;
    *type = exact ? 1 : s.k_type;
    return exact ? exact_row(s, a.k_exact, s.k_recent, width, p) : s.k + physical_row(s, p) * s.k_row_bytes;
  };
  const auto v_at = [&](std::int64_t p, int* type) {
    const bool exact = s.v_recent != nullptr && p >= exact_from;
    *type = exact ? 1 : s.v_type;
    return exact ? exact_row(s, a.v_exact, s.v_recent, width, p) : s.v + physical_row(s, p) * s.v_row_bytes;
  };

  for (std::int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    const float x = a.q[r * a.ldq + h * hd + d];
    q[d] = s.k_scale != nullptr ? x * s.k_scale[g * hd + d] : x;  // q . k = (q s) . (k / s)
  }
  __syncthreads();
  if (s.k_rotated != 0) hadamard_heads(q, hd, hd);

  float m = -INFINITY, l = 0.0f;
  float acc[kDimsPerThread];
#pragma unroll
  for (int j = 0; j < kDimsPerThread; ++j) acc[j] = 0.0f;
  for (std::int64_t c = lo; c <= pos; c += kChunk) {
    const int n = static_cast<int>(pos - c + 1 < kChunk ? pos - c + 1 : kChunk);
    for (int i = warp; i < n; i += warps) {
      int k_type = 0;
      const std::uint8_t* krow = k_at(c + i, &k_type);
      float dot = 0.0f;
      for (std::int64_t d = lane; d < hd; d += 32)
        dot = fmaf(q[d], kv_element(k_type, krow, width, hd, g * hd + d), dot);
      dot = warp_sum(dot);
      if (lane == 0) weights[i] = dot * a.scale;
    }
    __syncthreads();
    if (warp == 0) {
      float cmax = -INFINITY;
      for (int i = lane; i < n; i += 32) cmax = fmaxf(cmax, weights[i]);
      cmax = warp_max(cmax);
      if (lane == 0) reduced[0] = cmax;
    }
    __syncthreads();
    const float new_m = fmaxf(m, reduced[0]);
    for (int i = threadIdx.x; i < n; i += blockDim.x) weights[i] = expf(weights[i] - new_m);
    __syncthreads();
    if (warp == 0) {
      float sum = 0.0f;
      for (int i = lane; i < n; i += 32) sum += weights[i];
      sum = warp_sum(sum);
      if (lane == 0) reduced[1] = sum;
    }
    __syncthreads();
    const float correction = expf(m - new_m);  // 0 on the first chunk (m = -inf)
    l = l * correction + reduced[1];
#pragma unroll
    for (int j = 0; j < kDimsPerThread; ++j) acc[j] *= correction;
    for (int i = 0; i < n; ++i) {
      int v_type = 0;
      const std::uint8_t* vrow = v_at(c + i, &v_type);
      const float w = weights[i];
#pragma unroll
      for (int j = 0; j < kDimsPerThread; ++j) {
        const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(j) * blockDim.x;
        if (d < hd) acc[j] = fmaf(w, kv_element(v_type, vrow, width, hd, g * hd + d), acc[j]);
      }
    }
    m = new_m;
    __syncthreads();  // before the next chunk overwrites the weights
  }

  float* out = a.out + r * a.ldo + h * hd;
  if (s.v_rotated == 0) {
#pragma unroll
    for (int j = 0; j < kDimsPerThread; ++j) {
      const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(j) * blockDim.x;
      if (d < hd) out[d] = acc[j] / l;
    }
    return;
  }
  // Rotated V: the sum is of rotated rows; rotating it back gives the output (H H = I).
#pragma unroll
  for (int j = 0; j < kDimsPerThread; ++j) {
    const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(j) * blockDim.x;
    if (d < hd) q[d] = acc[j] / l;
  }
  __syncthreads();
  hadamard_heads(q, hd, hd);
  for (std::int64_t d = threadIdx.x; d < hd; d += blockDim.x) out[d] = q[d];
}

// ---- flash-decoding: decode rows split over the sequence, GQA heads together ----------------
// Block (row, kv head, split) attends the split's share of the row's positions for every query
// head of the KV head's group, so each K and V element is read once for the group; it leaves the
// running max, the sum of weights and the unnormalised output per head in `partials`. A second
// kernel merges the kAttentionSplits partials of each (row, head). The grid depends only on the
// rows and heads (a split with no positions leaves an empty partial), so decode graphs replay it
// whatever the lengths.
constexpr int kSplitChunk = 32;  // positions scored per pass: a split of a 300-position row takes two
constexpr int kSplitDims = static_cast<int>(kSplitMaxHeadDim / kAttendThreads);
constexpr std::size_t kSplitMaxSharedBytes = 48 * 1024;  // without opting in to more

// Where KV head g's values and scales sit in a cached row of `width` values, and the bytes of the
// same head as a row of its own (kv_element(type, compact, head_dim, head_dim, d) reads it).
struct HeadSlice {
  std::int64_t value_offset, value_bytes, scale_offset, scale_bytes, compact_stride;
};

__device__ inline HeadSlice head_slice(int type, std::int64_t width, std::int64_t hd, std::int64_t g) {
  const std::int64_t compact = kv_row_bytes(type, hd, hd);
  const std::int64_t stride = (compact + 3) / 4 * 4;
  switch (type) {
    case 0:
      return {4 * g * hd, 4 * hd, 0, 0, stride};
    case 1:
      return {2 * g * hd, 2 * hd, 0, 0, stride};
    case 2:  // int8 values, then one f16 scale per head
      return {g * hd, hd, width + 2 * g, 2, stride};
    default:  // int4 nibbles, then one scale code per 32 values
      return {g * hd / 2, hd / 2, width / 2 + g * (hd / kv_int4::kGroup), hd / kv_int4::kGroup, stride};
  }
}

// The largest of 16, 4 and 1 bytes that every row start of rows `row_bytes` apart from p keeps.
__device__ inline int row_alignment(const void* p, std::int64_t row_bytes) {
  const auto bits = reinterpret_cast<std::uintptr_t>(p) | static_cast<std::uintptr_t>(row_bytes);
  return bits % 16 == 0 ? 16 : bits % 4 == 0 ? 4 : 1;
}

// A head slice's values of n rows copied a Word at a time (its value offset and bytes multiples
// of the word, the rows' starts aligned to it).
template <typename Word, typename RowOf>
__device__ void copy_head_values(const RowOf& row_of, const HeadSlice& slice, std::int64_t c, int n,
                                 std::uint8_t* dst) {
  const std::int64_t per_row = slice.value_bytes / static_cast<std::int64_t>(sizeof(Word));
  for (std::int64_t idx = threadIdx.x; idx < n * per_row; idx += blockDim.x) {
    const std::int64_t i = idx / per_row, w = idx % per_row;
    const auto* src = reinterpret_cast<const Word*>(row_of(c + i) + slice.value_offset);
    reinterpret_cast<Word*>(dst + i * slice.compact_stride)[w] = src[w];
  }
}

// Copies head g of the n rows of positions c.. (row_of(p): the row of position p, whose every
// row start keeps `alignment` bytes: row_alignment) into shared memory as compact rows
// (slice.compact_stride apart): every thread's loads independent, so the chunk's rows arrive
// together instead of one dependent load per position; 16 bytes a load where the slice, the rows
// and the staging area allow (an f16 head of 128: 16 loads a row instead of 64), else 4.
template <typename RowOf>
__device__ void stage_head_rows(const RowOf& row_of, int alignment, const HeadSlice& slice, std::int64_t c, int n,
                                std::uint8_t* dst) {
  const auto fits = [&](std::int64_t word) {
    return alignment % word == 0 && slice.value_offset % word == 0 && slice.value_bytes % word == 0 &&
           slice.compact_stride % word == 0 && reinterpret_cast<std::uintptr_t>(dst) % word == 0;
  };
  if (fits(16)) {
    copy_head_values<uint4>(row_of, slice, c, n, dst);
  } else if (fits(4)) {
    copy_head_values<std::uint32_t>(row_of, slice, c, n, dst);
  } else {
    for (std::int64_t idx = threadIdx.x; idx < n * slice.value_bytes; idx += blockDim.x) {
      const std::int64_t i = idx / slice.value_bytes, b = idx % slice.value_bytes;
      dst[i * slice.compact_stride + b] = row_of(c + i)[slice.value_offset + b];
    }
  }
  for (std::int64_t idx = threadIdx.x; idx < n * slice.scale_bytes; idx += blockDim.x) {
    const std::int64_t i = idx / slice.scale_bytes, b = idx % slice.scale_bytes;
    dst[i * slice.compact_stride + slice.value_bytes + b] = row_of(c + i)[slice.scale_offset + b];
  }
}

// Floats of the split kernel's shared memory before the staged rows: q and weights per head, the
// running values; rounded up to 4 so the rows start 16-byte aligned (stage_head_rows' wide loads).
__host__ __device__ inline std::int64_t split_float_prefix(std::int64_t group, std::int64_t hd) {
  return (group * (hd + kSplitChunk + 3) + 3) / 4 * 4;
}

// Shared bytes of the split kernel: the float prefix, the staged rows.
inline std::size_t split_shared_bytes(std::int64_t group, std::int64_t hd, int k_type, int v_type) {
  const auto stride = [&](int type) { return (kv_row_bytes(type, hd, hd) + 3) / 4 * 4; };
  return static_cast<std::size_t>(split_float_prefix(group, hd)) * sizeof(float) +
         static_cast<std::size_t>(kSplitChunk * (stride(k_type) + stride(v_type)));
}

__device__ inline float* partial_of(const AttentionLaunch& a, std::int64_t r, std::int64_t h, int split) {
  return a.partials + ((r * a.n_heads + h) * kAttentionSplits + split) * (a.head_dim + 2);
}

// Row r, heads [h0, h0 + heads): the splits' partials merged (rescaled to the largest max),
// normalised, rotated back where V is stored rotated, written to out (one contiguous run).
// buf: heads * head_dim floats and scale: heads * kAttentionSplits floats of shared memory; every
// thread of the block calls it. The partials are read past L1 (__ldcg): in the split kernel's
// own merge other blocks wrote them during this launch.
__device__ void merge_heads(const AttentionLaunch& a, std::int64_t r, std::int64_t h0, int heads, bool v_rotated,
                            float* buf, float* scale) {
  const std::int64_t hd = a.head_dim;
  if (threadIdx.x < static_cast<unsigned>(heads)) {  // one thread per head: its splits' weights
    const std::int64_t h = h0 + threadIdx.x;
    float* weights = scale + threadIdx.x * kAttentionSplits;
    float top = -INFINITY;
    for (int k = 0; k < kAttentionSplits; ++k) top = fmaxf(top, __ldcg(partial_of(a, r, h, k)));
    float total = 0.0f;
    for (int k = 0; k < kAttentionSplits; ++k) {
      const float* p = partial_of(a, r, h, k);
      const float max = __ldcg(p), sum = __ldcg(p + 1);
      weights[k] = sum > 0.0f ? expf(max - top) : 0.0f;  // an empty split counts for nothing
      total += sum * weights[k];
    }
    for (int k = 0; k < kAttentionSplits; ++k) weights[k] /= total;
  }
  __syncthreads();
  for (std::int64_t e = threadIdx.x; e < heads * hd; e += blockDim.x) {
    const std::int64_t hh = e / hd, d = e % hd;
    const float* weights = scale + hh * kAttentionSplits;
    float sum = 0.0f;
    for (int k = 0; k < kAttentionSplits; ++k)
      sum = fmaf(__ldcg(partial_of(a, r, h0 + hh, k) + 2 + d), weights[k], sum);
    buf[e] = sum;
  }
  __syncthreads();
  if (v_rotated) hadamard_heads(buf, heads * hd, hd);  // H H = I: back from the rotated basis
  float* out = a.out + r * a.ldo + h0 * hd;
  for (std::int64_t e = threadIdx.x; e < heads * hd; e += blockDim.x) out[e] = buf[e];
}

// kDirect: one split covering all of the row's positions, whose output is normalised (and rotated
// back) here instead of left for the merge: the GQA-shared, staged kernel for steps too long to
// split (prefill), in one launch.
template <bool kDirect>
__global__ void attention_split_kernel(AttentionLaunch a) {
  begin_dependent_grid();
  SITSRT_DYNAMIC_SHARED(float, smem);
  const std::int64_t r = blockIdx.x, g = blockIdx.y;
  const int split = static_cast<int>(blockIdx.z);
  constexpr int kSplits = kDirect ? 1 : kAttentionSplits;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int group = static_cast<int>(a.n_heads / a.n_kv_heads);
  const AttentionSequenceDesc& s = a.sequences[a.row_sequence[r]];
  const std::int64_t hd = a.head_dim, width = a.n_kv_heads * hd;
  float* q = smem;                     // [group][hd]
  float* w = q + group * hd;           // [group][kSplitChunk]
  float* m = w + group * kSplitChunk;  // [group] running max
  float* l = m + group;                // [group] running sum
  float* correction = l + group;       // [group] this chunk's rescale
  // Head slices of the stored rows and of the exact f16 copies (a windowed side's chunks inside
  // the window); a side's staging area fits the wider of the two.
  const HeadSlice k_stored = head_slice(s.k_type, width, hd, g), v_stored = head_slice(s.v_type, width, hd, g);
  const HeadSlice exact_slice = head_slice(1, width, hd, g);
  const std::int64_t k_stride = s.k_recent != nullptr && exact_slice.compact_stride > k_stored.compact_stride
                                    ? exact_slice.compact_stride
                                    : k_stored.compact_stride;
  auto* k_rows = reinterpret_cast<std::uint8_t*>(smem + split_float_prefix(group, hd));  // [kSplitChunk][k_stride]
  std::uint8_t* v_rows = k_rows + kSplitChunk * k_stride;

  const std::int64_t pos = s.pos0 + (r - s.row_begin);
  const std::int64_t lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
  const std::int64_t span = (pos - lo + kSplits) / kSplits;  // ceil(len / splits)
  const std::int64_t begin = lo + split * span;
  const std::int64_t end = begin + span < pos + 1 ? begin + span : pos + 1;
  const std::int64_t exact_from = exact_begin(s, lo, pos);
  const int k_aligned = row_alignment(s.k, s.k_row_bytes), v_aligned = row_alignment(s.v, s.v_row_bytes);
  const int k_exact_aligned = min(row_alignment(a.k_exact, 2 * width), row_alignment(s.k_recent, 2 * width));
  const int v_exact_aligned = min(row_alignment(a.v_exact, 2 * width), row_alignment(s.v_recent, 2 * width));

  for (std::int64_t e = threadIdx.x; e < group * hd; e += blockDim.x) {
    const std::int64_t hh = e / hd, d = e % hd;
    const float x = a.q[r * a.ldq + (g * group + hh) * hd + d];
    q[e] = s.k_scale != nullptr ? x * s.k_scale[g * hd + d] : x;  // q . k = (q s) . (k / s)
  }
  for (int hh = threadIdx.x; hh < group; hh += blockDim.x) {
    m[hh] = -INFINITY;
    l[hh] = 0.0f;
  }
  __syncthreads();
  if (s.k_rotated != 0) hadamard_heads(q, group * hd, hd);

  float acc[kSplitMaxGroup][kSplitDims];
#pragma unroll
  for (int hh = 0; hh < kSplitMaxGroup; ++hh) {
#pragma unroll
    for (int j = 0; j < kSplitDims; ++j) acc[hh][j] = 0.0f;
  }
  for (std::int64_t c = begin; c < end;) {
    int n = static_cast<int>(end - c < kSplitChunk ? end - c : kSplitChunk);
    if (c < exact_from && c + n > exact_from) n = static_cast<int>(exact_from - c);  // quantized, then exact
    const bool k_exact = s.k_recent != nullptr && c >= exact_from, v_exact = s.v_recent != nullptr && c >= exact_from;
    const HeadSlice k_slice = k_exact ? exact_slice : k_stored;  // copies: references would put them on the stack
    const HeadSlice v_slice = v_exact ? exact_slice : v_stored;
    const int k_type = k_exact ? 1 : s.k_type, v_type = v_exact ? 1 : s.v_type;
    // K and V loads in flight together
    if (k_exact) {
      stage_head_rows([&](std::int64_t p) { return exact_row(s, a.k_exact, s.k_recent, width, p); }, k_exact_aligned,
                      k_slice, c, n, k_rows);
    } else {
      stage_head_rows([&](std::int64_t p) { return s.k + physical_row(s, p) * s.k_row_bytes; }, k_aligned, k_slice, c,
                      n, k_rows);
    }
    if (v_exact) {
      stage_head_rows([&](std::int64_t p) { return exact_row(s, a.v_exact, s.v_recent, width, p); }, v_exact_aligned,
                      v_slice, c, n, v_rows);
    } else {
      stage_head_rows([&](std::int64_t p) { return s.v + physical_row(s, p) * s.v_row_bytes; }, v_aligned, v_slice, c,
                      n, v_rows);
    }
    __syncthreads();
    for (int i = warp; i < n; i += warps) {  // a warp per position: one K row for the whole group
      const std::uint8_t* krow = k_rows + i * k_slice.compact_stride;
      float dot[kSplitMaxGroup];
#pragma unroll
      for (int hh = 0; hh < kSplitMaxGroup; ++hh) dot[hh] = 0.0f;
      for (std::int64_t d = lane; d < hd; d += 32) {
        const float k = kv_element(k_type, krow, hd, hd, d);
#pragma unroll
        for (int hh = 0; hh < kSplitMaxGroup; ++hh) {
          if (hh < group) dot[hh] = fmaf(q[hh * hd + d], k, dot[hh]);
        }
      }
#pragma unroll
      for (int hh = 0; hh < kSplitMaxGroup; ++hh) {
        if (hh >= group) break;
        const float v = warp_sum(dot[hh]);
        if (lane == 0) w[hh * kSplitChunk + i] = v * a.scale;
      }
    }
    __syncthreads();
    for (int hh = warp; hh < group; hh += warps) {  // a warp per head: max, weights, sum
      float* wh = w + hh * kSplitChunk;
      float cmax = -INFINITY;
      for (int i = lane; i < n; i += 32) cmax = fmaxf(cmax, wh[i]);
      const float new_m = fmaxf(m[hh], warp_max(cmax));
      float sum = 0.0f;
      for (int i = lane; i < n; i += 32) {
        wh[i] = expf(wh[i] - new_m);
        sum += wh[i];
      }
      sum = warp_sum(sum);
      if (lane == 0) {
        const float rescale = expf(m[hh] - new_m);  // 0 on the first chunk (m = -inf)
        correction[hh] = rescale;
        l[hh] = l[hh] * rescale + sum;
        m[hh] = new_m;
      }
    }
    __syncthreads();
#pragma unroll
    for (int hh = 0; hh < kSplitMaxGroup; ++hh) {
      if (hh >= group) break;
#pragma unroll
      for (int j = 0; j < kSplitDims; ++j) acc[hh][j] *= correction[hh];
    }
    for (int i = 0; i < n; ++i) {  // one V element per thread and dimension, for the whole group
      const std::uint8_t* vrow = v_rows + i * v_slice.compact_stride;
#pragma unroll
      for (int j = 0; j < kSplitDims; ++j) {
        const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(j) * blockDim.x;
        if (d >= hd) break;
        const float v = kv_element(v_type, vrow, hd, hd, d);
#pragma unroll
        for (int hh = 0; hh < kSplitMaxGroup; ++hh) {
          if (hh < group) acc[hh][j] = fmaf(w[hh * kSplitChunk + i], v, acc[hh][j]);
        }
      }
    }
    __syncthreads();  // before the next chunk overwrites the weights and the staged rows
    c += n;
  }
  if constexpr (kDirect) {  // normalise into q's buffer (q is done with), rotate back, write
#pragma unroll
    for (int hh = 0; hh < kSplitMaxGroup; ++hh) {
      if (hh >= group) break;
#pragma unroll
      for (int j = 0; j < kSplitDims; ++j) {
        const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(j) * blockDim.x;
        if (d < hd) q[hh * hd + d] = acc[hh][j] / l[hh];
      }
    }
    __syncthreads();
    if (s.v_rotated != 0) hadamard_heads(q, group * hd, hd);  // H H = I
    float* out = a.out + r * a.ldo + g * group * hd;
    for (std::int64_t e = threadIdx.x; e < group * hd; e += blockDim.x) out[e] = q[e];
  } else {
#pragma unroll
    for (int hh = 0; hh < kSplitMaxGroup; ++hh) {
      if (hh >= group) break;
      float* out = partial_of(a, r, g * group + hh, split);
      if (threadIdx.x == 0) {
        out[0] = m[hh];
        out[1] = l[hh];
      }
#pragma unroll
      for (int j = 0; j < kSplitDims; ++j) {
        const std::int64_t d = threadIdx.x + static_cast<std::int64_t>(j) * blockDim.x;
        if (d < hd) out[2 + d] = acc[hh][j];
      }
    }
    if (a.split_counters != nullptr) {
      // The last of the (row, KV head)'s splits to finish merges its heads: every thread's partials
      // made visible device-wide, then the count (the threadfence reduction pattern).
      __threadfence();
      __syncthreads();
      bool mine = false;
      if (threadIdx.x == 0) {
        __threadfence();
        unsigned* counter = a.split_counters + r * a.n_kv_heads + g;
        mine = atomicAdd(counter, 1u) == kAttentionSplits - 1;
        if (mine) *counter = 0;  // every split has counted: zero for the next launch
      }
      if (__syncthreads_or(mine)) {
        __threadfence();
        // q and the weights are done with: group * head_dim and group * kAttentionSplits floats.
        merge_heads(a, r, g * group, group, s.v_rotated != 0, q, w);
      }
    }
  }
}

// out row r, head h: the splits' partials merged (rescaled to the largest max), normalised, and
// rotated back where V is stored rotated.
__global__ void attention_merge_kernel(AttentionLaunch a) {
  begin_dependent_grid();
  __shared__ float buf[kSplitMaxHeadDim];
  __shared__ float scale[kAttentionSplits];
  const std::int64_t r = blockIdx.x, h = blockIdx.y;
  merge_heads(a, r, h, 1, a.sequences[a.row_sequence[r]].v_rotated != 0, buf, scale);
}

}  // namespace

bool launch_attention(const AttentionLaunch& a, cudaStream_t stream) {
  if (a.n_rows <= 0) return false;
  const std::size_t shared = static_cast<std::size_t>(a.n_kv_heads * a.head_dim) * sizeof(float);
  launch_kernel(kv_store_kernel, static_cast<unsigned>(a.n_rows), kStoreThreads, shared, stream, a);
  // The split kernel's shared memory depends on the K/V types, which are per sequence: the
  // widest of the step's sequences bounds it.
  const std::size_t split_shared =
      a.n_kv_heads > 0 ? split_shared_bytes(a.n_heads / a.n_kv_heads, a.head_dim, a.widest_k_type, a.widest_v_type) : 0;
  const bool staged = attention_group_fits(a.n_heads, a.n_kv_heads, a.head_dim) && split_shared <= kSplitMaxSharedBytes;
  const bool tiled = a.tile_rows != nullptr && launch_attention_tiled(a, stream);
  if (tiled) {
    // the tensor cores' tiles (kernels/attention_tiled.cu)
  } else if (staged && a.staged && a.partials != nullptr && a.n_rows <= kAttentionSplitMaxRows) {
    const dim3 split_grid(static_cast<unsigned>(a.n_rows), static_cast<unsigned>(a.n_kv_heads), kAttentionSplits);
    launch_kernel(attention_split_kernel<false>, split_grid, kAttendThreads, split_shared, stream, a);
    if (a.split_counters == nullptr) {  // else the splits merge themselves
      const dim3 merge_grid(static_cast<unsigned>(a.n_rows), static_cast<unsigned>(a.n_heads));
      launch_kernel(attention_merge_kernel, merge_grid, kAttendThreads, 0, stream, a);
    }
  } else if (staged && a.staged) {
    const dim3 grid(static_cast<unsigned>(a.n_rows), static_cast<unsigned>(a.n_kv_heads), 1);
    launch_kernel(attention_split_kernel<true>, grid, kAttendThreads, split_shared, stream, a);
  } else {
    const dim3 grid(static_cast<unsigned>(a.n_rows), static_cast<unsigned>(a.n_heads));
    launch_kernel(attention_kernel, grid, kAttendThreads, 0, stream, a);
  }
  // The step's exact copies into the rings, once every row has read them.
  if (a.k_exact != nullptr || a.v_exact != nullptr) {
    launch_kernel(kv_commit_recent_kernel, static_cast<unsigned>(a.n_rows), kStoreThreads, 0, stream, a);
  }
  return tiled;
}

}  // namespace sitsrt::cuda
