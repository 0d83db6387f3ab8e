#include "cpu/decode_prefetch.hpp"

#include "core/check.hpp"

#if defined(SITSRT_X86_KERNELS)
#include <cpuid.h>
#endif

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>

namespace sitsrt::cpu {
namespace {

constexpr const char* kVariable = "SITSRT_DECODE_PREFETCH";
constexpr std::size_t kMaxAhead = std::size_t{1} << 20;  // past L2 it only evicts what is in use

std::string cpu_vendor() {
#if defined(SITSRT_X86_KERNELS)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return {};
  char vendor[12];
  std::memcpy(vendor, &ebx, 4);  // the 12 characters come in EBX, EDX, ECX
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::string(vendor, sizeof vendor);
#else
  return {};
#endif
}

std::size_t parse_bytes(std::string_view text, std::string_view spec) {
  std::size_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || value == 0 || value > kMaxAhead) {
    raise(ErrorCode::kInvalidArgument, "{}='{}': '{}' is not a byte count in 1..{}", kVariable, spec, text, kMaxAhead);
  }
  return value;
}

}  // namespace

DecodePrefetch decode_prefetch_for_vendor(std::string_view vendor) noexcept {
  // Hygon's Dhyana is a Zen core.
  if (vendor == "AuthenticAMD" || vendor == "HygonGenuine") {
    return DecodePrefetch{.row_ahead = 4096, .stream_ahead = 4096, .to_l2 = true};
  }
  return DecodePrefetch{};
}

DecodePrefetch parse_decode_prefetch(std::string_view spec, DecodePrefetch base) {
  const std::size_t colon = spec.find(':');
  const std::string_view level = spec.substr(0, colon);
  if (level == "l1") {
    base.to_l2 = false;
  } else if (level == "l2") {
    base.to_l2 = true;
  } else {
    raise(ErrorCode::kInvalidArgument, "{}='{}': expected l1 or l2, then :ROW_BYTES[:STREAM_BYTES]", kVariable, spec);
  }
  if (colon == std::string_view::npos) return base;
  std::string_view rest = spec.substr(colon + 1);
  const std::size_t second = rest.find(':');
  base.row_ahead = parse_bytes(rest.substr(0, second), spec);
  base.stream_ahead = second == std::string_view::npos ? base.row_ahead : parse_bytes(rest.substr(second + 1), spec);
  return base;
}

namespace {
DecodePrefetch process_policy() noexcept {
  const DecodePrefetch own = decode_prefetch_for_vendor(cpu_vendor());
  const char* spec = std::getenv(kVariable);
  if (spec == nullptr || *spec == '\0') return own;  // set but empty: as unset
  try {
    return parse_decode_prefetch(spec, own);
  } catch (...) {
    return own;  // CpuContext reports it (check_decode_prefetch_setting) before any kernel runs
  }
}
}  // namespace

// Until this runs (static initialization of this file), it reads as zeros: prefetches at the
// read position, harmless; no kernel runs before main.
extern const DecodePrefetch kProcessDecodePrefetch = process_policy();

std::string describe(const DecodePrefetch& policy) {
  std::string text = std::string(policy.to_l2 ? "l2" : "l1") + ", " + std::to_string(policy.row_ahead) + " B ahead";
  if (policy.stream_ahead != policy.row_ahead) text += ", " + std::to_string(policy.stream_ahead) + " B in one stream";
  return text;
}

void check_decode_prefetch_setting() {
  const char* spec = std::getenv(kVariable);
  if (spec != nullptr && *spec != '\0') (void)parse_decode_prefetch(spec, DecodePrefetch{});
}

}  // namespace sitsrt::cpu
