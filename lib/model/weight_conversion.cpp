#include "model/weight_conversion.hpp"

#include "core/check.hpp"
#include "core/quant_blocks.hpp"

#include <algorithm>
#include <chrono>
#include <span>
#include <vector>

namespace sitsrt {
namespace {

struct FormatChoice {
  std::string_view option;
  DType type;
};
constexpr FormatChoice kChoices[] = {
    {"f16", DType::kF16},      {"bf16", DType::kBF16},        {"q8", DType::kQ8_0},      {"q4", DType::kQ4_0},
    {"fp8", DType::kFP8_E4M3}, {"q4g128", DType::kQ4_G128},
};

// Weights a MatMul node reads (the token embedding only when tied to the output head).
std::vector<bool> matmul_weights(const graph::Graph& graph) {
  std::vector<bool> used(graph.weights().size(), false);
  for (const graph::Node& node : graph.nodes()) {
    if (node.op != graph::OpKind::kMatMul) continue;
    for (const graph::WeightId w : node.weights) used[static_cast<std::size_t>(w)] = true;
  }
  return used;
}

// Weights of the output head: the MatMul outside the transformer blocks (the embedding when tied).
std::vector<bool> output_head_weights(const graph::Graph& graph) {
  std::vector<bool> head(graph.weights().size(), false);
  for (const graph::Node& node : graph.nodes()) {
    if (node.op != graph::OpKind::kMatMul || node.layer >= 0) continue;
    for (const graph::WeightId w : node.weights) head[static_cast<std::size_t>(w)] = true;
  }
  return head;
}

// The format a matmul weight converts to under `target`: its type, except the output head when
// the policy holds it at 16 bits (F32 -> BF16; F16, BF16 and the smaller quantized types stay).
DType format_for(const graph::Weight& weight, bool is_head, WeightFormat target) {
  if (!target.output_head_16bit || !is_head) return target.type;
  return weight.type == DType::kF32 ? DType::kBF16 : weight.type;
}

// Whether a matmul weight is converted to `to` (the rest are kept as stored).
bool converts(const graph::Weight& weight, DType to) {
  return weight.dims.size() == 2 && weight.type != to && fits_blocks(to, weight.dims[0]);
}

// dst rows = quantize_row(target, dequantize_row(stored, src rows)), FP8 scaled as `scaling`
// says; rows split over the pool (bands of 128 rows for 128 x 128 blocks).
void convert_rows(const std::byte* src, DType stored, std::byte* dst, DType target, Fp8Scaling scaling,
                  std::int64_t rows, std::int64_t cols, ThreadPool& pool) {
  const std::size_t src_stride = row_bytes(stored, cols), dst_stride = row_bytes(target, cols);
  const bool fp8 = target == DType::kFP8_E4M3;
  const std::int64_t band = fp8 && scaling == Fp8Scaling::kBlock128 ? 128 : 1;
  pool.run([&](int t, int n) {
    const Range r = split_range((rows + band - 1) / band, t, n);
    std::vector<float> values(static_cast<std::size_t>(cols * band));
    for (std::int64_t b = r.begin; b < r.end; ++b) {
      const std::int64_t first = b * band, count = std::min(band, rows - first);
      for (std::int64_t i = 0; i < count; ++i) {
        dequantize_row(stored, src + static_cast<std::size_t>(first + i) * src_stride, values.data() + i * cols, cols);
      }
      quantize_rows(target, scaling, values.data(), dst + static_cast<std::size_t>(first) * dst_stride, count, cols);
    }
  });
}

}  // namespace

std::optional<DType> weight_format_alias(std::string_view value) noexcept {
  for (const FormatChoice& c : kChoices) {
    if (c.option == value) return c.type;
  }
  return std::nullopt;
}

std::optional<WeightFormat> parse_weight_format(std::string_view value) {
  if (value.empty() || value == "as-stored") return std::nullopt;
  if (value == "fp8-all") return WeightFormat{DType::kFP8_E4M3, false};
  if (value == "fp8-channel") return WeightFormat{DType::kFP8_E4M3, true, Fp8Scaling::kPerChannel};
  if (value == "fp8-block") return WeightFormat{DType::kFP8_E4M3, true, Fp8Scaling::kBlock128};
  if (const std::optional<DType> type = weight_format_alias(value)) {
    return WeightFormat{*type, *type == DType::kFP8_E4M3};
  }
  raise(ErrorCode::kInvalidArgument, "weights '{}' is not one of {}", value, kWeightFormatChoices);
}

std::uint64_t weight_bytes_after_conversion(const graph::Graph& graph, WeightFormat target) {
  const std::vector<bool> eligible = matmul_weights(graph);
  const std::vector<bool> head = output_head_weights(graph);
  std::uint64_t total = 0;
  for (std::size_t id = 0; id < graph.weights().size(); ++id) {
    const graph::Weight& w = graph.weights()[id];
    const DType to = format_for(w, head[id], target);
    total += eligible[id] && converts(w, to) ? row_bytes(to, w.dims[0]) * static_cast<std::uint64_t>(w.dims[1])
                                             : w.bytes;
  }
  return total;
}

ConvertedWeightSource::ConvertedWeightSource(graph::Graph& graph, const graph::WeightSource& stored,
                                             WeightFormat target, ThreadPool& pool)
    : stored_(stored) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<bool> eligible = matmul_weights(graph);
  const std::vector<bool> head = output_head_weights(graph);
  for (std::size_t id = 0; id < graph.weights().size(); ++id) {
    if (!eligible[id]) continue;
    const graph::Weight weight = graph.weights()[id];  // a copy: set_weight_type changes it
    const DType to = format_for(weight, head[id], target);
    if (head[id] && to != target.type) report_.output_head_type = to;
    // fp8-channel / fp8-block over FP8 scaled otherwise: re-encoded with their scales (but a head
    // the policy keeps as stored)
    const bool head_kept = target.output_head_16bit && head[id];
    const bool rescale =
        !head_kept && to == DType::kFP8_E4M3 && weight.type == DType::kFP8_E4M3 && weight.dims.size() == 2 &&
        stored_.data(weight).size() >=
            row_bytes(weight.type, weight.dims[0]) * static_cast<std::size_t>(weight.dims[1]) &&
        !fp8_rows_scaled_as(target.fp8_scaling, stored_.data(weight).data(), weight.dims[1], weight.dims[0]);
    if (!converts(weight, to) && !rescale) {
      ++report_.tensors_kept;
      continue;
    }
    const std::span<const std::byte> source = stored_.data(weight);
    const std::int64_t cols = weight.dims[0], rows = weight.dims[1];
    if (source.size() < row_bytes(weight.type, cols) * static_cast<std::size_t>(rows)) {
      raise(ErrorCode::kInvalidModel, "weight '{}': {} bytes stored, {} expected", weight.name, source.size(),
            row_bytes(weight.type, cols) * static_cast<std::size_t>(rows));
    }
    AlignedBuffer buffer(row_bytes(to, cols) * static_cast<std::size_t>(rows),
                         "converted weight '" + weight.name + "'");
    convert_rows(source.data(), weight.type, buffer.data(), to, target.fp8_scaling, rows, cols, pool);
    graph.set_weight_type(static_cast<graph::WeightId>(id), to);
    report_.tensors_converted += 1;
    report_.bytes_read += weight.bytes;
    report_.bytes_written += buffer.size();
    converted_.emplace(weight.name, std::move(buffer));
  }
  report_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::span<const std::byte> ConvertedWeightSource::data(const graph::Weight& weight) const {
  if (const auto it = converted_.find(weight.name); it != converted_.end()) {
    if (it->second.data() == nullptr && weight.bytes > 0) {
      raise(ErrorCode::kInternal, "converted weight '{}' was released to the backend", weight.name);
    }
    return {it->second.data(), it->second.size()};
  }
  return stored_.data(weight);
}

void ConvertedWeightSource::release(const graph::Weight& weight) const noexcept {
  if (const auto it = converted_.find(weight.name); it != converted_.end()) {
    it->second = AlignedBuffer();
  } else {
    stored_.release(weight);
  }
}

}  // namespace sitsrt
