// How the AVX-512 decode kernels request weight bytes ahead of their use: how far ahead, and into
// which cache level. Decode streams every weight row once from DRAM, and the hardware prefetchers
// alone leave the core waiting. The best request differs by core (docs/performance.md, session 32):
// - Intel Xeon with AMX (sessions 1-31): prefetcht0 1.5 KiB ahead of each row stream (2 KiB ahead in a
//   single tile stream); longer distances measured level or slower (sessions 5 and 8).
// - AMD Zen 4: with prefetcht0 the integer kernels streamed a third of the read bandwidth (Q4_0R
//   11 GB/s on one core against a 27 GB/s probe); prefetcht1 (towards L2, which holds more
//   outstanding misses than L1) 4 KiB ahead: 16-21 GB/s, and 2-thread decode of the 0.35B Q4_0
//   80-93 -> 144-158 tok/s, FP8 51-61 -> 75-84.
// The AVX2 kernels keep their prefetcht0 1.5 KiB ahead on every CPU: on Zen 4 at --isa avx2 this
// policy took Q8_0 decode from 77-97 to 51 tok/s.
// Chosen once per process from the CPU vendor; SITSRT_DECODE_PREFETCH=l1|l2[:ROW_BYTES[:STREAM_BYTES]]
// (empty: as unset) overrides it, for measuring other machines without a rebuild. Prefetches never
// change results.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace sitsrt::cpu {

struct DecodePrefetch {
  std::size_t row_ahead = 1536;     // bytes ahead in each of a pass's row streams
  std::size_t stream_ahead = 2048;  // bytes ahead in a layout read as one stream (Q8_0P tiles)
  bool to_l2 = false;               // prefetcht1 instead of prefetcht0
};

// The policy for a CPU vendor string (CPUID leaf 0: "GenuineIntel", "AuthenticAMD", ...).
DecodePrefetch decode_prefetch_for_vendor(std::string_view vendor) noexcept;
// `spec` as SITSRT_DECODE_PREFETCH takes it, over `base`; throws sitsrt::Error naming the
// variable when it does not parse.
DecodePrefetch parse_decode_prefetch(std::string_view spec, DecodePrefetch base);
// This process's policy: the CPU's, or the environment's override, chosen when the library is
// loaded (static initialization); an invalid override is ignored here and reported by
// check_decode_prefetch_setting. A plain object, not a function-local static: the kernels read it
// inside their loops, where a guarded initialization would put a possible call in the loop and
// cost the AVX-512 GEMMs their registers (Q4_0 prefill on Zen 4 lost 30% that way).
extern const DecodePrefetch kProcessDecodePrefetch;
inline const DecodePrefetch& decode_prefetch() noexcept {
  return kProcessDecodePrefetch;
}
// "l2, 4096 B ahead" (and ", 2048 B in one stream" where that differs): what ModelInfo reports.
std::string describe(const DecodePrefetch& policy);
// Throws sitsrt::Error when SITSRT_DECODE_PREFETCH is set and invalid (CpuContext calls it, so an
// engine refuses to start on a mistyped setting instead of silently measuring the default).
void check_decode_prefetch_setting();

namespace detail {
// For the kernel files. Internal linkage, as every helper the ISA files share (matmul_kernels.hpp's
// ODR note).
namespace {

inline const DecodePrefetch& prefetch_policy() noexcept {
  return kProcessDecodePrefetch;
}

// One cache line at p towards L1 or L2. An asm statement: GCC 12 at -O2 deletes a loop whose body
// is only builtin prefetches (attend_rows.hpp's note).
inline void prefetch_line(const void* p, bool to_l2) noexcept {
#if defined(__x86_64__)
  if (to_l2) {
    asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
  } else {
    asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
  }
#else
  __builtin_prefetch(p, 0, to_l2 ? 2 : 3);
#endif
}

// The line row_ahead bytes past p (a weight row's read position), as the policy says.
inline void prefetch_ahead(const void* p) noexcept {
  const DecodePrefetch& policy = prefetch_policy();
  prefetch_line(static_cast<const char*>(p) + policy.row_ahead, policy.to_l2);
}

}  // namespace
}  // namespace detail
}  // namespace sitsrt::cpu
