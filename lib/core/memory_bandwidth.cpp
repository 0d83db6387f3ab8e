#include "core/memory_bandwidth.hpp"

#include "core/aligned_buffer.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>

namespace sitsrt {
namespace {

// Sum of 64-bit words with eight independent accumulators, so the memory system and not the
// add chain sets the pace. Compiled for the widest vector unit present (lib/core has no ISA
// flags): with 16-byte SSE2 loads one core measured 30% below what the AVX-512 decode kernels
// stream, which would make the "floor" a wrong yardstick for them.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
std::uint64_t
sum_words(const std::uint64_t* p, std::size_t n) {
  std::uint64_t acc[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += p[i + l];
  }
  for (; i < n; ++i) acc[0] += p[i];
  std::uint64_t total = 0;
  for (std::uint64_t a : acc) total += a;
  return total;
}

}  // namespace

double measure_read_bandwidth(ThreadPool& pool, std::size_t bytes, int repeats) {
  const std::size_t words = std::max<std::size_t>(bytes / 8, 4096);
  AlignedBuffer buffer(words * 8, "memory bandwidth probe");
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
