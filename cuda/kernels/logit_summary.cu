// Logit summaries on the device (core/logit_summary.hpp, logit_summary_record.hpp), so that only
// a few hundred bytes a row cross to the host. Two kernels:
//   1. per (row, chunk of kChunk ids), a block stages the chunk in shared memory (the only read
//      of the row: 16 blocks over a 128k vocabulary) and writes a chunk record: its largest
//      number and first id, its softmax sums relative to its own max (CUDA's expf, in double), and
//      its k best, sorted;
//   2. per row, a block merges the chunk records: the row's max and first id, the sums rescaled to
//      the row's max (sum = sum_c s_c e^(m_c - M), weighted = sum_c e^(m_c - M) (w_c + s_c (m_c - M))),
//      and the k best of the chunks' lists (every one of the row's k best is among its chunk's k
//      best).
// A row's e_i are rounded relative to its chunk's max instead of the row's, and CUDA's expf is
// within 2 ulp of the C library's: the sums equal the CPU's to ~1e-7 relative, not bit for bit.
// The ids, values and order of the k best and the max are the CPU's exactly. Every reduction
// has a fixed order (shuffle butterflies, then warp 0 over the warps; chunks merged by thread),
// so a row's summary is the same whatever else is in the launch.
//
// The k best of a list (both kernels): the kept-th smallest order key (descending_key) by radix
// select, a byte a pass from the top, counted in a shared histogram; then every item with a
// smaller key, and the first items (in index order, a tile at a time) holding the kept-th key
// itself; then a rank sort by (key, id). Index order is id order for equal keys in both lists
// (a chunk's ids increase; the merged list is chunk after chunk, each sorted by (key, id)).
#include "cuda_backend/kernels/grid_dependency.hpp"
#include "cuda_backend/kernels/launch.hpp"
#include "cuda_backend/logit_summary_record.hpp"

#include <climits>
#include <cmath>

namespace sitsrt::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 8192;  // ids per chunk block (32 KB of shared memory)
constexpr unsigned kFullMask = 0xffffffffu;

struct Best {
  float value;
  int index;  // INT_MAX: none yet
};

__device__ bool beats(const Best& a, const Best& b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

__device__ Best warp_best(Best b) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const Best other{__shfl_xor_sync(kFullMask, b.value, offset), __shfl_xor_sync(kFullMask, b.index, offset)};
    if (beats(other, b)) b = other;
  }
  return b;
}

template <typename T>
__device__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

struct Reduction {
  float value[kWarps];
  int index[kWarps];
  int count[kWarps];
  double sum[kWarps];
  double weighted[kWarps];
};

// The block's best (value, index), count and two double sums, the same in every thread.
struct BlockTotals {
  Best best;
  int count;
  double sum;
  double weighted;
};

__device__ BlockTotals block_totals(Best best, int count, double sum, double weighted, Reduction& r) {
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  best = warp_best(best);
  count = warp_sum(count);
  sum = warp_sum(sum);
  weighted = warp_sum(weighted);
  if (lane == 0) {
    r.value[warp] = best.value;
    r.index[warp] = best.index;
    r.count[warp] = count;
    r.sum[warp] = sum;
    r.weighted[warp] = weighted;
  }
  __syncthreads();
  Best b = lane < kWarps ? Best{r.value[lane], r.index[lane]} : Best{-INFINITY, INT_MAX};
  int c = lane < kWarps ? r.count[lane] : 0;
  double s = lane < kWarps ? r.sum[lane] : 0.0, w = lane < kWarps ? r.weighted[lane] : 0.0;
  b = warp_best(b);  // every warp reduces the same values the same way
  c = warp_sum(c);
  s = warp_sum(s);
  w = warp_sum(w);
  __syncthreads();  // r is reused by the next reduction
  return {b, c, s, w};
}

struct Selection {
  unsigned hist[256];
  std::uint32_t prefix;
  int remaining;
  int better;
  int warp_items[kWarps];
  std::uint32_t key[kMaxSummaryBest];
  int id[kMaxSummaryBest];
  float logit[kMaxSummaryBest];
};

// Writes the `kept` best items of `items` (1 <= kept <= its count of items, <= kMaxSummaryBest)
// to out[0 .. kept) as (id, logit), best first. Items: size() and item(i, &logit, &id) (false:
// no item at i), equal keys in increasing id along i.
template <typename Items>
__device__ void write_best(const Items& items, int kept, Selection& sel, SummaryPair* out) {
  const int n = items.size();
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  if (threadIdx.x == 0) {
    sel.prefix = 0;
    sel.remaining = kept;
    sel.better = 0;
  }
  std::uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int d = static_cast<int>(threadIdx.x); d < 256; d += kThreads) sel.hist[d] = 0;
    __syncthreads();
    const std::uint32_t prefix = sel.prefix;
    for (int i = static_cast<int>(threadIdx.x); i < n; i += kThreads) {
      float logit;
      int id;
      if (!items.item(i, &logit, &id)) continue;
      const std::uint32_t key = descending_key(logit);
      if ((key & mask) == prefix) atomicAdd(&sel.hist[(key >> shift) & 0xffu], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int below = 0, digit = 0;
      const int wanted = sel.remaining;
      for (; digit < 255 && below + static_cast<int>(sel.hist[digit]) < wanted; ++digit) {
        below += static_cast<int>(sel.hist[digit]);
      }
      sel.prefix = prefix | (static_cast<std::uint32_t>(digit) << shift);
      sel.remaining = wanted - below;
    }
    mask |= 0xffu << shift;
    __syncthreads();
  }
  const std::uint32_t threshold = sel.prefix;  // the kept-th smallest key
  const int ties = sel.remaining;              // items holding it to take (>= 1)
  const int better = kept - ties;              // items with smaller keys: all taken

  for (int i = static_cast<int>(threadIdx.x); i < n; i += kThreads) {
    float logit;
    int id;
    if (!items.item(i, &logit, &id)) continue;
    const std::uint32_t key = descending_key(logit);
    if (key < threshold) {
      const int slot = atomicAdd(&sel.better, 1);
      sel.key[slot] = key;
      sel.id[slot] = id;
      sel.logit[slot] = logit;
    }
  }
  int taken = 0;  // the same in every thread: each adds the same tile totals
  for (int base = 0; base < n && taken < ties; base += kThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    float logit = 0.0f;
    int id = 0;
    const bool tie = i < n && items.item(i, &logit, &id) && descending_key(logit) == threshold;
    const unsigned ballot = __ballot_sync(kFullMask, tie);
    if (lane == 0) sel.warp_items[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kWarps; ++w) {
      before += w < warp ? sel.warp_items[w] : 0;
      total += sel.warp_items[w];
    }
    const int rank = taken + before + __popc(ballot & ((1u << lane) - 1u));
    if (tie && rank < ties) {
      sel.key[better + rank] = threshold;
      sel.id[better + rank] = id;
      sel.logit[better + rank] = logit;
    }
    taken += total;
    __syncthreads();  // warp_items is rewritten by the next tile
  }
  __syncthreads();
  // Rank by (key, id), a total order: the same list whatever order the slots were filled in.
  for (int t = static_cast<int>(threadIdx.x); t < kept; t += kThreads) {
    const std::uint32_t key = sel.key[t];
    const int id = sel.id[t];
    int rank = 0;
    for (int j = 0; j < kept; ++j) rank += (sel.key[j] < key || (sel.key[j] == key && sel.id[j] < id)) ? 1 : 0;
    out[rank] = {id, sel.logit[t]};
  }
  __syncthreads();  // sel is reused by the caller's next selection
}

// A chunk staged in shared memory: item i is id begin + i, unless NaN.
struct ChunkItems {
  const float* values;
  int n;
  int begin;
  __device__ int size() const { return n; }
  __device__ bool item(int i, float* logit, int* id) const {
    const float x = values[i];
    *logit = x;
    *id = begin + i;
    return !isnan(x);
  }
};

// A record's header from a block's totals: `first` the best and count, `sums` the sums.
__device__ void write_header(const BlockTotals& first, const BlockTotals& sums, int kept, SummaryHeader* header) {
  header->exp_sum = sums.sum;
  header->exp_weighted = sums.weighted;
  header->max = first.best.value;
  header->argmax = first.best.index == INT_MAX ? -1 : first.best.index;
  header->count = kept;
  header->pad = 0;
}

__device__ SummaryHeader* record_at(std::byte* records, std::size_t index, std::size_t record_bytes) {
  return reinterpret_cast<SummaryHeader*>(records + index * record_bytes);
}

// grid (chunks, rows): one chunk record per block at (row * chunks + chunk).
__global__ void __launch_bounds__(kThreads)
    summary_chunk_kernel(const float* __restrict__ logits, int vocab, int k, std::byte* __restrict__ chunks,
                         std::size_t record_bytes) {
  begin_dependent_grid();
  __shared__ float s_values[kChunk];
  __shared__ Reduction s_reduction;
  __shared__ Selection s_selection;
  const int begin = static_cast<int>(blockIdx.x) * kChunk;
  const int n = min(kChunk, vocab - begin);
  const float* row = logits + static_cast<std::size_t>(blockIdx.y) * static_cast<std::size_t>(vocab) + begin;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kThreads) s_values[i] = row[i];
  __syncthreads();

  Best best{-INFINITY, INT_MAX};
  int numbers = 0;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kThreads) {
    const float x = s_values[i];
    if (isnan(x)) continue;
    ++numbers;
    if (beats({x, begin + i}, best)) best = {x, begin + i};
  }
  const BlockTotals first = block_totals(best, numbers, 0.0, 0.0, s_reduction);
  const float max = first.best.value;

  // Softmax sums relative to the chunk's max (terms e > 0 only: NaN and underflow left out).
  double sum = 0.0, weighted = 0.0;
  if (isfinite(max)) {
    for (int i = static_cast<int>(threadIdx.x); i < n; i += kThreads) {
      const float shifted = s_values[i] - max;
      const float e = expf(shifted);
      if (e > 0.0f) {
        sum += static_cast<double>(e);
        weighted += static_cast<double>(e) * static_cast<double>(shifted);
      }
    }
  }
  const BlockTotals sums = block_totals(best, 0, sum, weighted, s_reduction);

  const std::size_t index = static_cast<std::size_t>(blockIdx.y) * gridDim.x + blockIdx.x;
  SummaryHeader* header = record_at(chunks, index, record_bytes);
  const int kept = min(k, first.count);
  if (threadIdx.x == 0) write_header(first, sums, kept, header);
  if (kept > 0)
    write_best(ChunkItems{s_values, n, begin}, kept, s_selection, reinterpret_cast<SummaryPair*>(header + 1));
}

// The chunk records' lists one after another: item c * k + j is pair j of chunk c's record.
struct MergedItems {
  const std::byte* chunks;
  std::size_t record_bytes;
  int n_chunks;
  int k;
  __device__ int size() const { return n_chunks * k; }
  __device__ bool item(int i, float* logit, int* id) const {
    const auto* header =
        reinterpret_cast<const SummaryHeader*>(chunks + static_cast<std::size_t>(i / k) * record_bytes);
    if (i % k >= header->count) return false;
    const SummaryPair pair = reinterpret_cast<const SummaryPair*>(header + 1)[i % k];
    *logit = pair.logit;
    *id = pair.id;
    return true;
  }
};

// grid (rows): the row's summary record from its chunks' records.
__global__ void __launch_bounds__(kThreads)
    summary_merge_kernel(const std::byte* __restrict__ chunks, int n_chunks, int k, std::size_t record_bytes,
                         std::byte* __restrict__ records) {
  begin_dependent_grid();
  __shared__ Reduction s_reduction;
  __shared__ Selection s_selection;
  const std::byte* row_chunks = chunks + static_cast<std::size_t>(blockIdx.x) * n_chunks * record_bytes;

  Best best{-INFINITY, INT_MAX};
  int count = 0;
  for (int c = static_cast<int>(threadIdx.x); c < n_chunks; c += kThreads) {
    const auto* h = reinterpret_cast<const SummaryHeader*>(row_chunks + static_cast<std::size_t>(c) * record_bytes);
    count += h->count;
    if (h->argmax >= 0 && beats({h->max, h->argmax}, best)) best = {h->max, h->argmax};
  }
  const BlockTotals first = block_totals(best, count, 0.0, 0.0, s_reduction);
  const float max = first.best.value;

  double sum = 0.0, weighted = 0.0;
  if (isfinite(max)) {
    for (int c = static_cast<int>(threadIdx.x); c < n_chunks; c += kThreads) {
      const auto* h = reinterpret_cast<const SummaryHeader*>(row_chunks + static_cast<std::size_t>(c) * record_bytes);
      if (!isfinite(h->max)) continue;                                            // no finite number: no terms
      const double gap = static_cast<double>(h->max) - static_cast<double>(max);  // <= 0
      const double factor = exp(gap);
      sum += h->exp_sum * factor;
      weighted += factor * (h->exp_weighted + h->exp_sum * gap);
    }
  }
  const BlockTotals sums = block_totals(best, 0, sum, weighted, s_reduction);

  auto* header = reinterpret_cast<SummaryHeader*>(records + static_cast<std::size_t>(blockIdx.x) * record_bytes);
  const int kept = min(k, first.count);
  if (threadIdx.x == 0) write_header(first, sums, kept, header);
  if (kept > 0) {
    write_best(MergedItems{row_chunks, record_bytes, n_chunks, k}, kept, s_selection,
               reinterpret_cast<SummaryPair*>(header + 1));
  }
}

}  // namespace

std::int64_t logit_summary_chunks(std::int64_t vocab) {
  return (vocab + kChunk - 1) / kChunk;
}

void launch_logit_summaries(const float* logits, std::int64_t rows, std::int64_t vocab, std::int64_t k,
                            std::byte* chunk_records, std::byte* records, cudaStream_t stream) {
  if (rows <= 0) return;
  const std::size_t record_bytes = summary_record_bytes(k);
  const auto chunks = static_cast<unsigned>(logit_summary_chunks(vocab));
  launch_kernel(summary_chunk_kernel, dim3(chunks, static_cast<unsigned>(rows)), kThreads, 0, stream, logits,
                static_cast<int>(vocab), static_cast<int>(k), chunk_records, record_bytes);
  launch_kernel(summary_merge_kernel, static_cast<unsigned>(rows), kThreads, 0, stream, chunk_records,
                static_cast<int>(chunks), static_cast<int>(k), record_bytes, records);
}

}  // namespace sitsrt::cuda
