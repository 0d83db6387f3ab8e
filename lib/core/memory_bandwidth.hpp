// Measured DRAM read bandwidth: the physical floor printed beside decode (matvec) figures.
#pragma once

#include "core/thread_pool.hpp"

#include <cstddef>

namespace sitsrt {

// The probe size that measures DRAM rather than cache: twice the last-level cache, at least
// 512 MiB. (This machine's L3 is 300 MiB: a 256 MiB probe read 31-56 GB/s depending on how much
// of it stayed in L3, against a steady 32-33 GB/s from 512 MiB up.)
std::size_t dram_probe_bytes() noexcept;

// Streams a freshly allocated `bytes` buffer (0: dram_probe_bytes()) with
// every thread of `pool` summing its own contiguous share, `repeats` times, and returns the
// BEST pass in bytes per second (the ceiling a bandwidth-bound kernel can approach; noise
// only ever slows a pass down). Pages are written by the same thread split before timing, so
// first-touch places them near the thread that reads them and no pass takes page faults.
// Allocates and frees the buffer; takes about repeats x bytes / bandwidth plus the page touch.
// Throws sitsrt::Error(kOutOfMemory) if the buffer cannot be allocated.
double measure_read_bandwidth(ThreadPool& pool, std::size_t bytes = 0, int repeats = 5);

}  // namespace sitsrt
