#include "model/hf_quant.hpp"

#include "core/check.hpp"
#include "core/half.hpp"
#include "core/quant_blocks.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace sitsrt::hf {
namespace {

using safetensors::ElementType;

[[noreturn]] void bad(const RawTensor& t, std::string_view what) {
  raise(ErrorCode::kInvalidModel, "tensor '{}' ({} [{}]): {}", t.name, safetensors::name(t.type),
        fmt::join(t.shape, ", "), what);
}

void expect(const RawTensor& t, ElementType type, std::vector<std::int64_t> shape) {
  if (t.type != type || t.shape != shape) {
    bad(t, fmt::format("expected {} [{}]", safetensors::name(type), fmt::join(shape, ", ")));
  }
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  if (t.data.size() != static_cast<std::size_t>(n) * static_cast<std::size_t>(safetensors::element_bytes(type)))
    bad(t, "data size does not match the shape");
}

std::uint32_t word(const RawTensor& t, std::int64_t i) {
  std::uint32_t w = 0;
  std::memcpy(&w, t.data.data() + i * 4, 4);
  return w;
}

float scalar(const RawTensor& t, std::int64_t i) {
  switch (t.type) {
    case ElementType::kF32: {
      float f = 0;
      std::memcpy(&f, t.data.data() + i * 4, 4);
      return f;
    }
    case ElementType::kF16:
    case ElementType::kBF16: {
      std::uint16_t h = 0;
      std::memcpy(&h, t.data.data() + i * 2, 2);
      return t.type == ElementType::kF16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
    }
    default:
      bad(t, "scales must be F32, F16 or BF16");
  }
}

std::int64_t elements(const RawTensor& t) {
  std::int64_t n = 1;
  for (const std::int64_t d : t.shape) n *= d;
  return n;
}

// Shapes shared by AWQ and GPTQ: groups and scales [groups, rows] f16, qzeros [groups, rows/8].
Int4GroupWeights prepare(std::int64_t rows, std::int64_t cols, std::int64_t group_size, const RawTensor& qzeros,
                         const RawTensor& scales, const RawTensor& qweight) {
  if (rows < 8 || rows % 8 != 0 || cols < 1) bad(qweight, "output features must be a positive multiple of 8");
  Int4GroupWeights w;
  w.rows = rows;
  w.cols = cols;
  w.group_size = group_size < 0 ? cols : group_size;
  if (w.group_size < 1) bad(scales, "group_size must be -1 or positive");
  w.groups = (cols + w.group_size - 1) / w.group_size;
  expect(scales, ElementType::kF16, {w.groups, rows});
  expect(qzeros, ElementType::kI32, {w.groups, rows / 8});
  w.levels.resize(static_cast<std::size_t>(rows * cols));
  w.zeros.resize(static_cast<std::size_t>(rows * w.groups));
  w.scales.resize(static_cast<std::size_t>(rows * w.groups));
  for (std::int64_t g = 0; g < w.groups; ++g)
    for (std::int64_t r = 0; r < rows; ++r)
      w.scales[static_cast<std::size_t>(r * w.groups + g)] = scalar(scales, g * rows + r);
  return w;
}

}  // namespace

float Int4GroupWeights::value(std::int64_t row, std::int64_t col) const noexcept {
  const auto g = static_cast<std::size_t>(row * groups + group(col));
  return scales[g] * static_cast<float>(static_cast<int>(levels[static_cast<std::size_t>(row * cols + col)]) -
                                        static_cast<int>(zeros[g]));
}

Int4GroupWeights unpack_awq(const RawTensor& qweight, const RawTensor& qzeros, const RawTensor& scales,
                            std::int64_t group_size) {
  if (qweight.type != ElementType::kI32 || qweight.shape.size() != 2)
    bad(qweight, "AWQ qweight must be I32 [in, out/8]");
  const std::int64_t cols = qweight.shape[0], rows = qweight.shape[1] * 8;
  expect(qweight, ElementType::kI32, {cols, rows / 8});
  Int4GroupWeights w = prepare(rows, cols, group_size, qzeros, scales, qweight);
  if (cols % w.group_size != 0)
    bad(qweight, fmt::format("input features {} are not whole groups of {}", cols, w.group_size));
  // A transpose ([in, out] words -> [out, in] levels), in tiles of input columns so that both
  // the words read and the level rows written stay in cache.
  constexpr std::int64_t kTile = 64;
  for (std::int64_t c0 = 0; c0 < cols; c0 += kTile) {
    const std::int64_t c1 = std::min(cols, c0 + kTile);
    for (std::int64_t j = 0; j < rows / 8; ++j) {
      for (int k = 0; k < 8; ++k) {
        std::uint8_t* out = w.levels.data() + (8 * j + kAwqOrder[k]) * cols;
        for (std::int64_t c = c0; c < c1; ++c) out[c] = (word(qweight, c * (rows / 8) + j) >> (4 * k)) & 15u;
      }
    }
  }
  for (std::int64_t g = 0; g < w.groups; ++g) {
    for (std::int64_t j = 0; j < rows / 8; ++j) {
      const std::uint32_t packed = word(qzeros, g * (rows / 8) + j);
      for (int k = 0; k < 8; ++k)
        w.zeros[static_cast<std::size_t>((8 * j + kAwqOrder[k]) * w.groups + g)] = (packed >> (4 * k)) & 15u;
    }
  }
  return w;
}

Int4GroupWeights unpack_gptq(const RawTensor& qweight, const RawTensor& qzeros, const RawTensor& scales,
                             const RawTensor& g_idx, std::int64_t group_size, bool zeros_minus_one) {
  if (qweight.type != ElementType::kI32 || qweight.shape.size() != 2)
    bad(qweight, "GPTQ qweight must be I32 [in/8, out]");
  const std::int64_t cols = qweight.shape[0] * 8, rows = qweight.shape[1];
  expect(qweight, ElementType::kI32, {cols / 8, rows});
  Int4GroupWeights w = prepare(rows, cols, group_size, qzeros, scales, qweight);
  for (std::int64_t i = 0; i < cols / 8; ++i) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::uint32_t packed = word(qweight, i * rows + r);
      for (int k = 0; k < 8; ++k) w.levels[static_cast<std::size_t>(r * cols + 8 * i + k)] = (packed >> (4 * k)) & 15u;
    }
  }
  for (std::int64_t g = 0; g < w.groups; ++g) {
    for (std::int64_t j = 0; j < rows / 8; ++j) {
      const std::uint32_t packed = word(qzeros, g * (rows / 8) + j);
      for (int k = 0; k < 8; ++k) {
        w.zeros[static_cast<std::size_t>((8 * j + k) * w.groups + g)] =
            static_cast<std::uint8_t>(((packed >> (4 * k)) & 15u) + (zeros_minus_one ? 1u : 0u));
      }
    }
  }
  if (!g_idx.data.empty()) {
    expect(g_idx, ElementType::kI32, {cols});
    bool trivial = true;
    w.group_of_column.resize(static_cast<std::size_t>(cols));
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto g = static_cast<std::int32_t>(word(g_idx, c));
      if (g < 0 || g >= w.groups) bad(g_idx, fmt::format("g_idx[{}] = {} is not a group in [0, {})", c, g, w.groups));
      w.group_of_column[static_cast<std::size_t>(c)] = g;
      trivial = trivial && g == c / w.group_size;
    }
    if (trivial) w.group_of_column.clear();  // no act-order: groups are contiguous
  } else if (cols % w.group_size != 0) {
    bad(qweight, fmt::format("input features {} are not whole groups of {}", cols, w.group_size));
  }
  return w;
}

float e4m3_to_float(std::uint8_t code) noexcept {
  const bool negative = (code & 0x80u) != 0;
  const int exponent = (code >> 3) & 15;
  const int mantissa = code & 7;
  float v = 0.0f;
  if (exponent == 15 && mantissa == 7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    v = std::ldexp(static_cast<float>(mantissa) / 8.0f, -6);
  } else {
    v = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  }
  return negative ? -v : v;
}

float Fp8Weights::scale(std::int64_t row, std::int64_t col) const noexcept {
  switch (layout) {
    case Scales::kPerTensor:
      return scales[0];
    case Scales::kPerRow:
      return scales[static_cast<std::size_t>(row)];
    case Scales::kBlock: {
      const std::int64_t block_cols_count = (cols + block_cols - 1) / block_cols;
      return scales[static_cast<std::size_t>((row / block_rows) * block_cols_count + col / block_cols)];
    }
  }
  return 0.0f;
}

Fp8Weights read_fp8(const RawTensor& weight, const RawTensor& scale, std::span<const std::int64_t> block) {
  if (weight.type != ElementType::kF8_E4M3 || weight.shape.size() != 2)
    bad(weight, "FP8 weight must be F8_E4M3 [out, in]");
  Fp8Weights w;
  w.rows = weight.shape[0];
  w.cols = weight.shape[1];
  expect(weight, ElementType::kF8_E4M3, weight.shape);
  w.codes = {reinterpret_cast<const std::uint8_t*>(weight.data.data()), weight.data.size()};
  if (scale.type != ElementType::kF32 && scale.type != ElementType::kBF16 && scale.type != ElementType::kF16)
    bad(scale, "scales must be F32, F16 or BF16");
  if (!block.empty()) {
    if (block.size() != 2 || block[0] < 1 || block[1] < 1) bad(scale, "block size must be two positive integers");
    w.layout = Fp8Weights::Scales::kBlock;
    w.block_rows = block[0];
    w.block_cols = block[1];
    expect(scale, scale.type, {(w.rows + block[0] - 1) / block[0], (w.cols + block[1] - 1) / block[1]});
  } else {
    const std::int64_t n = elements(scale);
    const bool per_tensor = n == 1 && scale.shape.size() <= 1;
    const bool per_row = n == w.rows && (scale.shape == std::vector<std::int64_t>{w.rows} ||
                                         scale.shape == std::vector<std::int64_t>{w.rows, 1});
    if (!per_tensor && !per_row)
      bad(scale, fmt::format("expected a per-tensor [] / [1] or per-row [{}] / [{}, 1] scale", w.rows, w.rows));
    w.layout = per_tensor ? Fp8Weights::Scales::kPerTensor : Fp8Weights::Scales::kPerRow;
    expect(scale, scale.type, scale.shape);
  }
  w.scales.resize(static_cast<std::size_t>(elements(scale)));
  for (std::size_t i = 0; i < w.scales.size(); ++i) {
    w.scales[i] = scalar(scale, static_cast<std::int64_t>(i));
    if (!std::isfinite(w.scales[i])) bad(scale, fmt::format("scale {} is not finite", i));
  }
  return w;
}

std::vector<std::byte> pack_q4_g128(const Int4GroupWeights& w, std::string_view name) {
  if (w.group_size != kGroup128) {
    raise(ErrorCode::kUnsupported,
          "tensor '{}': group_size {} is not supported (the INT4 g128 weight format holds groups of {} input "
          "features)",
          name, w.group_size, kGroup128);
  }
  if (w.cols % kGroup128 != 0)
    raise(ErrorCode::kUnsupported, "tensor '{}': {} input features are not whole groups of {}", name, w.cols,
          kGroup128);
  const std::int64_t blocks = w.cols / kGroup128;
  std::vector<std::int64_t> block_group(static_cast<std::size_t>(blocks));
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t g = w.group(b * kGroup128);
    for (std::int64_t c = b * kGroup128; c < (b + 1) * kGroup128; ++c) {
      if (w.group(c) != g) {
        raise(ErrorCode::kUnsupported,
              "tensor '{}': act-order g_idx puts input features {} and {} (one {}-column block) in groups {} and {}; "
              "serving it would need the columns and the input activations reordered, which is not supported",
              name, b * kGroup128, c, kGroup128, g, w.group(c));
      }
    }
    block_group[static_cast<std::size_t>(b)] = g;
  }
  std::vector<std::byte> out(static_cast<std::size_t>(w.rows * blocks) * sizeof(BlockQ4_G128));
  for (std::int64_t r = 0; r < w.rows; ++r) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t g = block_group[static_cast<std::size_t>(b)];
      const auto at = static_cast<std::size_t>(r * w.groups + g);
      const std::uint8_t* levels = w.levels.data() + r * w.cols + b * kGroup128;
      BlockQ4_G128 block{};
      block.d = fp32_to_fp16(w.scales[at]);  // exact: the scale is a widened fp16
      unsigned zero = w.zeros[at], shift = 0;
      if (zero > 15) {  // GPTQ v1's stored 15: d * (q - 16) = d * ((q - 1) - 15) when no q is 0
        for (int i = 0; i < kGroup128; ++i) {
          if (levels[i] == 0) {
            raise(ErrorCode::kUnsupported,
                  "tensor '{}': output {} group {} has zero point {} and level 0, which INT4 g128 (zero points "
                  "0..15) cannot hold",
                  name, r, g, zero);
          }
        }
        zero = 15;
        shift = 1;
      }
      block.zero = static_cast<std::uint8_t>(zero);
      for (int s = 0; s < kGroup128 / kQBlock; ++s) {
        for (int j = 0; j < kQBlock / 2; ++j) {
          const unsigned lo = levels[s * kQBlock + j] - shift, hi = levels[s * kQBlock + kQBlock / 2 + j] - shift;
          block.qs[s * kQBlock / 2 + j] = static_cast<std::uint8_t>(lo | (hi << 4));
        }
      }
      std::memcpy(out.data() + static_cast<std::size_t>(r * blocks + b) * sizeof(BlockQ4_G128), &block, sizeof block);
    }
  }
  return out;
}

std::vector<std::byte> pack_fp8_e4m3(const Fp8Weights& w, std::string_view name) {
  if (w.cols % kFp8Block != 0) {
    raise(ErrorCode::kUnsupported, "tensor '{}': {} input features are not whole FP8 E4M3 blocks of {}", name, w.cols,
          kFp8Block);
  }
  if (w.layout == Fp8Weights::Scales::kBlock && w.block_cols % kFp8Block != 0) {
    raise(ErrorCode::kUnsupported, "tensor '{}': weight_block_size columns {} are not a multiple of {}", name,
          w.block_cols, kFp8Block);
  }
  const std::int64_t blocks = w.cols / kFp8Block;
  std::vector<std::byte> out(static_cast<std::size_t>(w.rows * blocks) * sizeof(BlockFP8_E4M3));
  for (std::int64_t r = 0; r < w.rows; ++r) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      BlockFP8_E4M3 block{};
      block.d = w.scale(r, b * kFp8Block);  // one scale per 64 columns: block_cols is a multiple of 64
      const std::uint8_t* codes = w.codes.data() + r * w.cols + b * kFp8Block;
      for (int i = 0; i < kFp8Block; ++i) {
        if ((codes[i] & 0x7fu) == 0x7fu)
          raise(ErrorCode::kInvalidModel, "tensor '{}': element [{}, {}] is NaN", name, r, b * kFp8Block + i);
      }
      std::memcpy(block.qs, codes, kFp8Block);
      std::memcpy(out.data() + static_cast<std::size_t>(r * blocks + b) * sizeof(BlockFP8_E4M3), &block, sizeof block);
    }
  }
  return out;
}

}  // namespace sitsrt::hf
