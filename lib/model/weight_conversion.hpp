// Load-time conversion of matmul weights to another format (EngineOptions::weights): each
// eligible tensor is decoded row by row with dequantize_row of its stored type and encoded with
// quantize_row of the target into an owned 64-byte-aligned buffer; every other tensor is still
// served from the model file.
#pragma once

#include "core/aligned_buffer.hpp"
#include "core/dtype.hpp"
#include "core/quant_blocks.hpp"
#include "core/thread_pool.hpp"
#include "graph/weight_source.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace sitsrt {

// The values EngineOptions::weights accepts, as listed in error messages and --help.
inline constexpr std::string_view kWeightFormatChoices =
    "as-stored, f16, bf16, q8, q4, fp8, q4g128, fp8-all, fp8-channel, fp8-block";

// The format an EngineOptions::weights value names ("fp8" -> kFP8_E4M3, ...); nullopt for
// "as-stored", "fp8-all" (a conversion policy, not a type name) and anything unknown.
std::optional<DType> weight_format_alias(std::string_view value) noexcept;

// What an EngineOptions::weights value asks for.
struct WeightFormat {
  DType type = DType::kF32;
  // "fp8": the output head stays at 16 bits (an F32 head becomes BF16, a 16-bit or smaller one
  // stays as stored), as FP8 checkpoints (vLLM, TensorRT-LLM) keep lm_head in BF16: it is the
  // most error-sensitive matmul (docs/performance.md). "fp8-all" converts the head as well.
  bool output_head_16bit = false;
  // How FP8 weights are scaled: "fp8" searches a scale per block of 64 (the lowest weight
  // error); "fp8-channel" one scale per output row (quantize_row_fp8_per_channel), the
  // convention of vLLM / TensorRT-LLM FP8 checkpoints; "fp8-block" one per 128 x 128 block
  // (quantize_band_fp8_block128), DeepSeek-V3's and Qwen3-FP8's. The CUDA backend's prefill GEMM
  // takes the last two FP8 x FP8 on Hopper.
  Fp8Scaling fp8_scaling = Fp8Scaling::kSearchedBlock;
};

// The conversion an EngineOptions::weights value names: nullopt for "as-stored" (or empty);
// throws kInvalidArgument naming the option and the valid values otherwise.
std::optional<WeightFormat> parse_weight_format(std::string_view value);

struct WeightConversionReport {
  int tensors_converted = 0;
  // Matmul weights left as stored: already in the target format, or rows that are not whole
  // blocks of it (e.g. a 172-wide FFN row for a 64- or 128-element format).
  int tensors_kept = 0;
  // The output head's format after the conversion when the policy kept it out of the target
  // (WeightFormat::output_head_16bit); nullopt otherwise. A head converted to BF16 is counted
  // in tensors_converted, one left as stored in tensors_kept.
  std::optional<DType> output_head_type;
  std::uint64_t bytes_read = 0;     // stored bytes of the converted tensors
  std::uint64_t bytes_written = 0;  // their bytes in the target format
  double seconds = 0.0;             // wall time of the conversion
};

// Bytes of all of `graph`'s weights once ConvertedWeightSource has converted them to `target`
// (computed without converting, so a memory budget can be checked first).
std::uint64_t weight_bytes_after_conversion(const graph::Graph& graph, WeightFormat target);

class ConvertedWeightSource final : public graph::WeightSource {
 public:
  // Converts, in `graph` and into owned buffers, every weight that a MatMul node reads, whose
  // stored type differs from `target.type` and whose rows are whole blocks of it (the output
  // head: see WeightFormat::output_head_16bit); the graph's
  // Weight type and bytes (and its node costs) then describe the converted format. The token
  // embedding converts only when it is also the output head (a tied model): a table used only
  // for lookups is read one row per token, so it stays as stored. Rows are split over `pool`.
  ConvertedWeightSource(graph::Graph& graph, const graph::WeightSource& stored, WeightFormat target, ThreadPool& pool);

  // Throws kInternal for a converted weight after release().
  [[nodiscard]] std::span<const std::byte> data(const graph::Weight& weight) const override;
  // Frees a converted weight's buffer (the backend holds a copy); others: the stored source's.
  void release(const graph::Weight& weight) const noexcept override;
  [[nodiscard]] const WeightConversionReport& report() const noexcept { return report_; }

 private:
  const graph::WeightSource& stored_;
  // By tensor name; release() empties an entry (the name stays, so data() can refuse it).
  mutable std::unordered_map<std::string, AlignedBuffer> converted_;
  WeightConversionReport report_;
};

}  // namespace sitsrt
