// CPU levels for tests: the cases of each level registered apart, so a level this CPU lacks
// shows as a skipped ctest test (support/skip.hpp), and a test-only cap, SITSRT_TEST_ISA_CAP=<level>
// (generic, avx2, avx512, avx512vnni, amx), that makes the cases above that level skip, so a
// machine with AVX-512 can show how a smaller one reports them. The cap only gates the tests'
// cases (test::isa_supported); the library still dispatches to what the CPU has.
#pragma once

#include "cpu/cpu_context.hpp"
#include "support/skip.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdlib>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace sitsrt::test {

inline constexpr cpu::Isa kAllIsas[] = {cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAvx512Vnni,
                                        cpu::Isa::kAmx};

// The level named by SITSRT_TEST_ISA_CAP, or the highest level when it is unset or empty.
inline cpu::Isa isa_cap() {
  const char* cap = std::getenv("SITSRT_TEST_ISA_CAP");
  if (cap == nullptr || *cap == '\0') return kAllIsas[std::size(kAllIsas) - 1];
  for (const cpu::Isa isa : kAllIsas) {
    if (cpu::name(isa) == cap) return isa;
  }
  throw std::invalid_argument(std::string("SITSRT_TEST_ISA_CAP=") + cap +
                              " names no level (generic, avx2, avx512, avx512vnni, amx)");
}

// True when this CPU runs `isa` and the cap allows it.
inline bool isa_supported(cpu::Isa isa) {
  return static_cast<int>(isa) <= static_cast<int>(isa_cap()) && cpu::isa_supported(isa);
}

// Why isa_supported(isa) is false, for SITSRT_SKIP.
inline std::string isa_skip_reason(cpu::Isa isa) {
  if (static_cast<int>(isa) > static_cast<int>(isa_cap())) {
    return std::string(cpu::name(isa)) + ": above SITSRT_TEST_ISA_CAP=" + std::string(cpu::name(isa_cap()));
  }
  if (isa == cpu::Isa::kAmx) return "this CPU or its OS kernel offers no AMX-BF16 tiles (amx)";
  return "this CPU lacks " + std::string(cpu::name(isa));
}

// Skips the running case unless isa_supported(isa).
#define SITSRT_REQUIRE_ISA(isa)                                                                 \
  do {                                                                                          \
    if (!::sitsrt::test::isa_supported(isa)) SITSRT_SKIP(::sitsrt::test::isa_skip_reason(isa)); \
  } while (false)

namespace detail {

using IsaCaseBody = void (*)(cpu::Isa);

// Runs one level's case: skipped where that level is not available.
class IsaCase final : public Catch::ITestInvoker {
 public:
  IsaCase(IsaCaseBody body, cpu::Isa isa) : body_(body), isa_(isa) {}
  void invoke() const override {
    SITSRT_REQUIRE_ISA(isa_);
    body_(isa_);
  }

 private:
  IsaCaseBody body_;
  cpu::Isa isa_;
};

template <std::size_t N>
std::vector<cpu::Isa> isa_levels(const cpu::Isa (&levels)[N]) {
  return {levels, levels + N};
}
template <class... Isas>
std::vector<cpu::Isa> isa_levels(cpu::Isa first, Isas... rest) {
  return {first, rest...};
}

// One Catch2 case per level, named "<name> (<level>)"; all but the generic one tagged [gated].
inline bool register_isa_cases(IsaCaseBody body, const char* name, const char* tags,
                               const std::vector<cpu::Isa>& levels, const char* file, std::size_t line) {
  for (const cpu::Isa isa : levels) {
    const std::string case_name = std::string(name) + " (" + std::string(cpu::name(isa)) + ")";
    const std::string case_tags = std::string(tags) + (isa == cpu::Isa::kGeneric ? "" : "[gated]");
    const Catch::AutoReg registrar(new IsaCase(body, isa), Catch::SourceLineInfo(file, line), "",
                                   Catch::NameAndTags(case_name, case_tags));
  }
  return true;
}

}  // namespace detail
}  // namespace sitsrt::test

#define SITSRT_ISA_CONCAT_(a, b) a##b
#define SITSRT_ISA_CONCAT(a, b) SITSRT_ISA_CONCAT_(a, b)
#define SITSRT_ISA_TEST_CASE_(fn, isa, name, tags, ...)                                                                \
  static void fn(::sitsrt::cpu::Isa isa);                                                                              \
  [[maybe_unused]] static const bool SITSRT_ISA_CONCAT(fn, _registered) = ::sitsrt::test::detail::register_isa_cases(  \
      &fn, name, tags, ::sitsrt::test::detail::isa_levels(__VA_ARGS__), __FILE__, static_cast<std::size_t>(__LINE__)); \
  static void fn(const ::sitsrt::cpu::Isa isa)

// A test case run once per listed level, as its own Catch2 case "<name> (<level>)" with the level
// in `isa`; the levels: cpu::Isa values or an array of them. A level this CPU lacks (or above
// SITSRT_TEST_ISA_CAP) skips; the generic case is not [gated] and runs with the executable's other
// cases.
//   SITSRT_ISA_TEST_CASE(isa, "rms_norm matches a double reference", "[kernels]", kIsas) { ... }
#define SITSRT_ISA_TEST_CASE(isa, name, tags, ...) \
  SITSRT_ISA_TEST_CASE_(SITSRT_ISA_CONCAT(sitsrt_isa_case_, __LINE__), isa, name, tags, __VA_ARGS__)
