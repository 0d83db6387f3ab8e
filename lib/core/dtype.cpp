#include "core/dtype.hpp"

#include "core/check.hpp"

#include <array>
#include <cctype>

namespace sitsrt {
namespace {

constexpr std::array<DTypeTraits, kDTypeCount> kTraits = {{
    {"f32", 1, 4, false},
    {"f16", 1, 2, false},
    {"bf16", 1, 2, false},
    {"q8_0", 32, 34, true},
    {"q4_0", 32, 18, true},
    {"q4_1", 32, 20, true},
    {"q5_0", 32, 22, true},
    {"q5_1", 32, 24, true},
    {"fp8_e4m3", 64, 68, true},
    {"q4_g128", 128, 68, true},
    // K-quant section
    {"q2_k", 256, 84, true}, {"q3_k", 256, 110, true}, {"q4_k", 256, 144, true}, {"q5_k", 256, 176, true},
    {"q6_k", 256, 210, true}, {"q8_k", 256, 292, true}, {"iq4_nl", 32, 18, true},
}};

}  // namespace

const DTypeTraits& traits(DType type) noexcept { return kTraits[static_cast<std::size_t>(type)]; }

std::optional<DType> dtype_from_name(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kTraits.size(); ++i) {
    const auto& candidate = kTraits[i].name;
    if (candidate.size() != name.size()) continue;
    bool equal = true;
    for (std::size_t c = 0; c < name.size(); ++c) {
      if (std::tolower(static_cast<unsigned char>(name[c])) != candidate[c]) {
        equal = false;
        break;
      }
    }
    if (equal) return static_cast<DType>(i);
  }
  return std::nullopt;
}

bool fits_blocks(DType type, std::int64_t n) noexcept {
  return n >= 0 && n % traits(type).block_size == 0;
}

std::size_t row_bytes(DType type, std::int64_t n) {
  const auto& t = traits(type);
  if (!fits_blocks(type, n)) {
    raise(ErrorCode::kInvalidArgument, "{} elements are not a whole number of {}-element {} blocks", n,
          t.block_size, t.name);
  }
  return static_cast<std::size_t>(n / t.block_size) * static_cast<std::size_t>(t.block_bytes);
}

}  // namespace sitsrt
