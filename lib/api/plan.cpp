#include "api/plan_builder.hpp"

#include <fmt/format.h>

namespace sitsrt {
namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string mib(std::uint64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

}  // namespace

DevicePlan build_single_device_plan(const graph::Graph& graph, const ModelInfo& info, std::uint64_t budget_bytes,
                                    std::uint64_t weight_bytes) {
  DevicePlan plan;
  plan.context_length = info.context_length;
  PlanDevice cpu;
  cpu.name = info.backend + "0";
  cpu.kind = info.backend;
  cpu.detail = fmt::format("{}, {} threads", info.cpu_isa, info.threads);
  cpu.budget_bytes = budget_bytes;
  cpu.weight_bytes = weight_bytes;
  cpu.kv_bytes_per_request = info.kv_cache_bytes;
  cpu.activation_bytes_per_request = info.activation_bytes;
  plan.devices.push_back(cpu);

  PlanStage stage;
  stage.device = cpu.name;
  stage.first_layer = 0;
  stage.last_layer = graph.n_layers() - 1;
  for (const graph::Node& node : graph.nodes()) {
    if (node.op == graph::OpKind::kEmbed) stage.embedding = true;
    if (node.output == graph.output()) stage.output_head = true;
  }
  stage.weight_bytes = cpu.weight_bytes;
  plan.stages.push_back(stage);
  return plan;
}

std::string DevicePlan::to_table() const {
  std::string out = fmt::format("{:<8} {:<6} {:<28} {:>14} {:>14} {:>14} {:>14}\n", "device", "kind", "detail",
                                "weights", "KV/request", "act/request", "budget");
  for (const PlanDevice& d : devices) {
    out += fmt::format("{:<8} {:<6} {:<28} {:>14} {:>14} {:>14} {:>14}\n", d.name, d.kind, d.detail,
                       mib(d.weight_bytes), mib(d.kv_bytes_per_request), mib(d.activation_bytes_per_request),
                       d.budget_bytes == 0 ? std::string("unlimited") : mib(d.budget_bytes));
  }
  out += fmt::format("\n{:<6} {:<8} {:<14} {:>14}  context {}\n", "stage", "device", "layers", "weights",
                     context_length);
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const PlanStage& s = stages[i];
    std::string layers = s.last_layer >= s.first_layer ? fmt::format("{}-{}", s.first_layer, s.last_layer) : "-";
    if (s.embedding) layers = "embed, " + layers;
    if (s.output_head) layers += ", head";
    out += fmt::format("{:<6} {:<8} {:<14} {:>14}\n", i, s.device, layers, mib(s.weight_bytes));
  }
  return out;
}

std::string DevicePlan::to_json() const {
  std::string out = fmt::format("{{\"context_length\":{},\"devices\":[", context_length);
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const PlanDevice& d = devices[i];
    out += fmt::format(
        "{}{{\"name\":{},\"kind\":{},\"detail\":{},\"budget_bytes\":{},\"weight_bytes\":{},"
        "\"kv_bytes_per_request\":{},\"activation_bytes_per_request\":{}}}",
        i ? "," : "", json_string(d.name), json_string(d.kind), json_string(d.detail), d.budget_bytes,
        d.weight_bytes, d.kv_bytes_per_request, d.activation_bytes_per_request);
  }
  out += "],\"stages\":[";
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const PlanStage& s = stages[i];
    out += fmt::format(
        "{}{{\"device\":{},\"first_layer\":{},\"last_layer\":{},\"embedding\":{},\"output_head\":{},"
        "\"weight_bytes\":{}}}",
        i ? "," : "", json_string(s.device), s.first_layer, s.last_layer, s.embedding, s.output_head,
        s.weight_bytes);
  }
  return out + "]}";
}

}  // namespace sitsrt
