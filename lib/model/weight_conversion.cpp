#include "model/weight_conversion.hpp"

#include "core/check.hpp"
#include "core/quant_blocks.hpp"

#include <chrono>
#include <vector>

namespace sitsrt {
namespace {

struct FormatChoice {
  std::string_view option;
  DType type;
};
constexpr FormatChoice kChoices[] = {
    {"f16", DType::kF16},  {"bf16", DType::kBF16},    {"q8", DType::kQ8_0},
    {"q4", DType::kQ4_0},  {"fp8", DType::kFP8_E4M3}, {"q4g128", DType::kQ4_G128},
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

// Whether an eligible weight is converted to `target` (the rest are kept as stored).
bool converts(const graph::Weight& weight, bool eligible, DType target) {
  return eligible && weight.dims.size() == 2 && weight.type != target && fits_blocks(target, weight.dims[0]);
}

// dst rows = quantize_row(target, dequantize_row(stored, src rows)), rows split over the pool.
void convert_rows(const std::byte* src, DType stored, std::byte* dst, DType target, std::int64_t rows,
                  std::int64_t cols, ThreadPool& pool) {
  const std::size_t src_stride = row_bytes(stored, cols), dst_stride = row_bytes(target, cols);
  pool.run([&](int t, int n) {
    const Range r = split_range(rows, t, n);
    std::vector<float> row(static_cast<std::size_t>(cols));
    for (std::int64_t i = r.begin; i < r.end; ++i) {
      dequantize_row(stored, src + static_cast<std::size_t>(i) * src_stride, row.data(), cols);
      quantize_row(target, row.data(), dst + static_cast<std::size_t>(i) * dst_stride, cols);
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

std::optional<DType> parse_weight_format(std::string_view value) {
  if (value.empty() || value == "as-stored") return std::nullopt;
  if (const std::optional<DType> type = weight_format_alias(value)) return type;
  raise(ErrorCode::kInvalidArgument, "weights '{}' is not one of {}", value, kWeightFormatChoices);
}

std::uint64_t weight_bytes_after_conversion(const graph::Graph& graph, DType target) {
  const std::vector<bool> eligible = matmul_weights(graph);
  std::uint64_t total = 0;
  for (std::size_t id = 0; id < graph.weights().size(); ++id) {
    const graph::Weight& w = graph.weights()[id];
    total += converts(w, eligible[id], target) ? row_bytes(target, w.dims[0]) * static_cast<std::uint64_t>(w.dims[1])
                                               : w.bytes;
  }
  return total;
}

ConvertedWeightSource::ConvertedWeightSource(graph::Graph& graph, const graph::WeightSource& stored, DType target,
                                             ThreadPool& pool)
    : stored_(stored) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<bool> eligible = matmul_weights(graph);
  for (std::size_t id = 0; id < graph.weights().size(); ++id) {
    if (!eligible[id]) continue;
    const graph::Weight weight = graph.weights()[id];  // a copy: set_weight_type changes it
    if (!converts(weight, true, target)) {
      ++report_.tensors_kept;
      continue;
    }
    const std::span<const std::byte> source = stored_.data(weight);
    const std::int64_t cols = weight.dims[0], rows = weight.dims[1];
    if (source.size() < row_bytes(weight.type, cols) * static_cast<std::size_t>(rows)) {
      raise(ErrorCode::kInvalidModel, "weight '{}': {} bytes stored, {} expected", weight.name, source.size(),
            row_bytes(weight.type, cols) * static_cast<std::size_t>(rows));
    }
    AlignedBuffer buffer(row_bytes(target, cols) * static_cast<std::size_t>(rows),
                         "converted weight '" + weight.name + "'");
    convert_rows(source.data(), weight.type, buffer.data(), target, rows, cols, pool);
    graph.set_weight_type(static_cast<graph::WeightId>(id), target);
    report_.tensors_converted += 1;
    report_.bytes_read += weight.bytes;
    report_.bytes_written += buffer.size();
    converted_.emplace(weight.name, std::move(buffer));
  }
  report_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::span<const std::byte> ConvertedWeightSource::data(const graph::Weight& weight) const {
  if (const auto it = converted_.find(weight.name); it != converted_.end()) {
    return {it->second.data(), it->second.size()};
  }
  return stored_.data(weight);
}

}  // namespace sitsrt
