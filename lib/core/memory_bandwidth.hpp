// Measured DRAM read bandwidth: the physical floor printed beside decode (matvec) figures.
#pragma once

#include "core/thread_pool.hpp"

#include <cstddef>

namespace sitsrt {

// Streams a freshly allocated `bytes` buffer (pick it larger than the last-level cache) with
// every thread of `pool` summing its own contiguous share, `repeats` times, and returns the
// BEST pass in bytes per second (the ceiling a bandwidth-bound kernel can approach; noise
// only ever slows a pass down). Pages are written by the same thread split before timing, so
// first-touch places them near the thread that reads them and no pass takes page faults.
// Allocates and frees the buffer; takes about repeats x bytes / bandwidth plus the page touch.
// Throws sitsrt::Error(kOutOfMemory) if the buffer cannot be allocated.
double measure_read_bandwidth(ThreadPool& pool, std::size_t bytes = std::size_t{512} << 20, int repeats = 5);

}  // namespace sitsrt
