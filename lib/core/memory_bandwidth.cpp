#include "core/memory_bandwidth.hpp"

#include "core/aligned_buffer.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#if defined(__unix__)
#include <unistd.h>
#endif

namespace sitsrt {
namespace {

// Sum of 64-bit words read as four interleaved streams (the range in quarters), each with a
// software prefetch ahead of it, and eight independent accumulators per stream, so the memory
// system and not the add chain sets the pace. This is how the fastest decode kernels read (four
// rows at a time, prefetching): one plain linear stream measured ~30% below them on this
// machine's cores, which made the "floor" a wrong yardstick. Compiled for the widest vector unit
// present (lib/core has no ISA flags): 16-byte SSE2 loads also measured low.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
std::uint64_t
sum_words(const std::uint64_t* p, std::size_t n) {
  constexpr std::size_t kStreams = 4, kLine = 8, kAhead = 1536 / 8;  // words
  const std::size_t quarter = n / kStreams / kLine * kLine;
  std::uint64_t acc[kStreams][8] = {};
  for (std::size_t i = 0; i < quarter; i += kLine) {
    for (std::size_t s = 0; s < kStreams; ++s) {
      const std::uint64_t* q = p + s * quarter + i;
      __builtin_prefetch(q + kAhead);
      for (std::size_t l = 0; l < kLine; ++l) acc[s][l] += q[l];
    }
  }
  std::uint64_t total = 0;
  for (std::size_t i = kStreams * quarter; i < n; ++i) total += p[i];
  for (const auto& stream : acc) {
    for (std::uint64_t a : stream) total += a;
  }
  return total;
}

}  // namespace

std::size_t dram_probe_bytes() noexcept {
  std::size_t last_level = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE)
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) last_level = static_cast<std::size_t>(l3);
#endif
  return std::max(std::size_t{512} << 20, 2 * last_level);
}

double measure_read_bandwidth(ThreadPool& pool, std::size_t bytes, int repeats) {
  if (bytes == 0) bytes = dram_probe_bytes();
  const std::size_t words = std::max<std::size_t>(bytes / 8, 4096);
  // Huge pages, as the resident weights use: the floor is what the machine can stream at best.
  AlignedBuffer buffer(words * 8, "memory bandwidth probe", AlignedBuffer::Pages::kHuge);
  auto* data = buffer.as<std::uint64_t>();
  const auto share = [&](int t, int n) { return split_range(static_cast<std::int64_t>(words), t, n, 512); };
  pool.run([&](int t, int n) {
    const Range r = share(t, n);
    for (std::int64_t i = r.begin; i < r.end; ++i) data[i] = static_cast<std::uint64_t>(i);
  });
  std::atomic<std::uint64_t> sink{0};  // the sums are published, so the reads cannot be elided
  const auto pass = [&] {
    pool.run([&](int t, int n) {
      const Range r = share(t, n);
      sink.fetch_add(sum_words(data + r.begin, static_cast<std::size_t>(r.end - r.begin)), std::memory_order_relaxed);
    });
  };
  pass();  // warm-up: wakes the workers and settles the clocks
  double best = 0.0;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    const auto start = std::chrono::steady_clock::now();
    pass();
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
    best = std::max(best, static_cast<double>(words * 8) / seconds.count());
  }
  return best;
}

}  // namespace sitsrt
