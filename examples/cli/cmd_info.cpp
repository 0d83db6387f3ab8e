// sitsrt info: metadata, tensor table, parameter count and bytes by type of a GGUF file.
#include "commands.hpp"

#include "core/printable.hpp"
#include "formats/gguf.hpp"
#include "model/hf_model.hpp"
#include "model/model_spec.hpp"

#include <sitsrt/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

namespace sitsrt::cli {
namespace {

constexpr std::size_t kArrayPreview = 8;

nlohmann::json value_to_json(const gguf::Value& v, bool preview) {
  if (const auto* u = std::get_if<std::uint64_t>(&v.data)) return *u;
  if (const auto* i = std::get_if<std::int64_t>(&v.data)) return *i;
  if (const auto* d = std::get_if<double>(&v.data)) return *d;
  if (const auto* b = std::get_if<bool>(&v.data)) return *b;
  if (const auto* s = std::get_if<std::string>(&v.data)) return *s;
  const auto& a = std::get<gguf::Array>(v.data);
  nlohmann::json items = nlohmann::json::array();
  const std::size_t n = preview ? std::min(a.items.size(), kArrayPreview) : a.items.size();
  for (std::size_t i = 0; i < n; ++i) items.push_back(value_to_json(a.items[i], preview));
  if (!preview) return items;
  return {{"type", std::string(gguf::name(a.element_type))}, {"length", a.items.size()}, {"first", items}};
}

std::string value_to_text(const gguf::Value& v) {
  if (const auto* a = std::get_if<gguf::Array>(&v.data)) {
    return fmt::format("[{} x {}] {}", a->items.size(), gguf::name(a->element_type),
                       value_to_json(v, true)["first"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  const std::string s = value_to_json(v, true).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return s.size() > 120 ? s.substr(0, 117) + "..." : s;
}

}  // namespace

namespace {

// What the architecture adds to a plain llama block, in one line (empty for plain llama).
std::string model_features(const ModelSpec& spec) {
  std::vector<std::string> f;
  if (spec.rope_neox) f.emplace_back("neox rope");
  if (spec.rope_scaling.type != RopeScalingType::kNone) {
    f.push_back(fmt::format("rope scaling {} x{:g}", name(spec.rope_scaling.type), spec.rope_scaling.factor));
  }
  if (spec.rope_freq_factors) f.emplace_back("rope factors (rope_freqs.weight)");
  if (spec.sliding_window > 0) {
    const auto windowed = std::count(spec.windowed_layers.begin(), spec.windowed_layers.end(), true);
    f.push_back(fmt::format("sliding window {} on {} of {} layers", spec.sliding_window, windowed, spec.n_layer));
  }
  if (spec.rope_local_freq_base > 0.0f) f.push_back(fmt::format("local rope base {:g}", spec.rope_local_freq_base));
  if (spec.qkv_bias) f.emplace_back("qkv bias");
  if (spec.qk_norm) f.emplace_back("q/k norm");
  if (spec.post_norms) f.emplace_back("post norms");
  if (spec.embedding_scale != 1.0f) f.push_back(fmt::format("embedding x{:g}", spec.embedding_scale));
  if (spec.ffn_activation == FfnActivation::kGeluTanh) f.emplace_back("GeGLU(tanh)");
  if (spec.final_logit_softcap > 0.0f) f.push_back(fmt::format("logit soft-cap {:g}", spec.final_logit_softcap));
  std::string out;
  for (const auto& s : f) out += (out.empty() ? "" : ", ") + s;
  return out;
}

nlohmann::json spec_json(const ModelSpec& spec) {
  return {{"architecture", spec.architecture}, {"n_vocab", spec.n_vocab}, {"n_embd", spec.n_embd},
          {"n_layer", spec.n_layer}, {"n_head", spec.n_head}, {"n_head_kv", spec.n_head_kv},
          {"head_dim", spec.head_dim}, {"n_ff", spec.n_ff}, {"n_ctx_train", spec.n_ctx_train},
          {"rms_eps", spec.rms_eps}, {"rope_freq_base", spec.rope_freq_base},
          {"tied_output", spec.tied_output}, {"features", model_features(spec)}};
}

void print_spec(const ModelSpec& spec) {
  fmt::print("model       {} '{}': n_embd {}, {} layers, {} heads ({} kv, head dim {}), ffn {}, vocab {}, "
             "trained context {}{}\n",
             printable(spec.architecture), printable(spec.name), spec.n_embd, spec.n_layer, spec.n_head, spec.n_head_kv, spec.head_dim,
             spec.n_ff, spec.n_vocab, spec.n_ctx_train, spec.tied_output ? ", tied output head" : "");
  const std::string features = model_features(spec);
  if (!features.empty()) fmt::print("features    {}\n", features);
}

// A Hugging Face directory: the spec from config.json and the text model's tensors under
// their GGUF names (with the checkpoint's names beside them).
int hf_info(const std::string& path, bool json) {
  const HfModel model = open_hf_model(path);
  std::int64_t params = 0;
  for (const auto& t : model.tensors.tensors()) params += t.elements();
  if (json) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& t : model.tensors.tensors()) {
      tensors.push_back({{"name", t.name}, {"hf_name", t.source_name}, {"type", name(t.type)}, {"dims", t.dims},
                         {"bytes", t.bytes}});
    }
    const nlohmann::json doc = {{"path", path}, {"format", "huggingface"},
                                {"hf_architecture", model.config.hf_architecture},
                                {"torch_dtype", model.config.torch_dtype}, {"parameters", params},
                                {"model", spec_json(model.config.spec)}, {"tensors", tensors}};
    fmt::print("{}\n", doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  }
  fmt::print("directory   {}\n", printable(path));
  fmt::print("format      Hugging Face {} ({}), tensor prefix '{}'\n", printable(model.config.hf_architecture),
             model.config.torch_dtype.empty() ? "dtype not stated" : printable(model.config.torch_dtype),
             printable(model.prefix));
  fmt::print("parameters  {} ({:.3f} M)\n", params, static_cast<double>(params) / 1e6);
  print_spec(model.config.spec);
  fmt::print("\ntensors ({}):\n", model.tensors.tensors().size());
  fmt::print("  {:<32} {:<6} {:<18} {:>12}  {}\n", "name", "type", "dims", "bytes", "checkpoint name");
  for (const auto& t : model.tensors.tensors()) {
    fmt::print("  {:<32} {:<6} {:<18} {:>12}  {}\n", printable(t.name), name(t.type),
               fmt::format("[{}]", fmt::join(t.dims, ", ")), t.bytes, printable(t.source_name));
  }
  return 0;
}

}  // namespace

int info_command(int argc, char** argv) {
  Args args("sitsrt info", "Describe a model (GGUF file or Hugging Face directory): metadata, tensors, parameters, bytes by type.",
            {{"model", 'm', "PATH", "GGUF file or Hugging Face directory; may also be given as the first argument", ""},
             {"json", 0, "", "machine-readable output", ""},
             {"full", 0, "", "with --json: print whole metadata arrays (vocabularies can be large)", ""},
             weights_option_spec(),
             {"threads", 't', "N", "with --weights: conversion threads", "all cores"}});
  args.parse(argc, argv, 2);
  if (args.has("help")) {
    fmt::print("{}", args.help());
    return 0;
  }
  std::string path = args.get_or("model", args.positional().empty() ? "" : args.positional()[0]);
  if (path.empty()) throw UsageError("no model given: pass -m FILE.gguf or -m HF_DIR");
  if (is_hf_model_directory(path)) return hf_info(path, args.has("json"));
  const gguf::File file = gguf::File::open(path);

  std::int64_t params = 0;
  std::map<std::string, std::pair<std::int64_t, std::uint64_t>> by_type;  // type -> (tensors, bytes)
  for (const auto& t : file.tensors()) {
    params += t.elements();
    auto& entry = by_type[std::string(name(t.type))];
    entry.first += 1;
    entry.second += t.bytes;
  }
  // --weights: load an engine to convert the matmul weights and report the cost.
  std::optional<ModelInfo> converted;
  if (const std::string weights = args.get_or("weights", "as-stored"); weights != "as-stored") {
    EngineOptions o;
    o.model_path = path;
    o.weights = weights;
    o.threads = static_cast<int>(args.get_int("threads", 0, 0, 1024));
    converted = Engine(std::move(o)).model_info();
  }
  std::string spec_error;
  std::optional<ModelSpec> spec;
  try {
    spec = read_model_spec(file);
  } catch (const Error& e) {
    spec_error = e.what();
  }

  if (args.has("json")) {
    nlohmann::json metadata = nlohmann::json::object();
    for (const auto& kv : file.metadata()) metadata[kv.key] = value_to_json(kv.value, !args.has("full"));
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& t : file.tensors()) {
      tensors.push_back({{"name", t.name}, {"type", name(t.type)}, {"dims", t.dims}, {"bytes", t.bytes},
                         {"offset", file.data_offset() + t.offset}});
    }
    nlohmann::json types = nlohmann::json::object();
    for (const auto& [type, e] : by_type) types[type] = {{"tensors", e.first}, {"bytes", e.second}};
    nlohmann::json doc = {{"path", path}, {"gguf_version", file.version()}, {"file_bytes", file.file_size()},
                          {"alignment", file.alignment()}, {"parameters", params}, {"bytes_by_type", types},
                          {"metadata", metadata}, {"tensors", tensors}};
    if (converted) {
      doc["weights"] = weights_json(*converted);
      doc["weights"]["weight_bytes"] = converted->weight_bytes;
    }
    if (spec) {
      doc["model"] = spec_json(*spec);
    } else {
      doc["model_error"] = spec_error;
    }
    fmt::print("{}\n", doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  }

  fmt::print("file        {}\n", printable(path));
  fmt::print("format      GGUF v{}, {} bytes, alignment {}\n", file.version(), file.file_size(), file.alignment());
  fmt::print("parameters  {} ({:.3f} M)\n", params, static_cast<double>(params) / 1e6);
  if (spec) {
    print_spec(*spec);
  } else {
    fmt::print("model       cannot be run: {}\n", spec_error);
  }
  fmt::print("\nbytes by type:\n");
  for (const auto& [type, e] : by_type) {
    fmt::print("  {:<6} {:>5} tensors {:>14} bytes\n", type, e.first, e.second);
  }
  if (converted) {
    fmt::print("\nweights     {}\n", weights_text(*converted));
    fmt::print("            {} bytes of weights in the engine after conversion\n", converted->weight_bytes);
  }
  fmt::print("\nmetadata ({} keys):\n", file.metadata().size());
  for (const auto& kv : file.metadata()) fmt::print("  {:<44} {}\n", printable(kv.key), printable(value_to_text(kv.value)));
  fmt::print("\ntensors ({}):\n", file.tensors().size());
  fmt::print("  {:<32} {:<6} {:<18} {:>12} {:>12}\n", "name", "type", "dims", "bytes", "offset");
  for (const auto& t : file.tensors()) {
    fmt::print("  {:<32} {:<6} {:<18} {:>12} {:>12}\n", printable(t.name), name(t.type),
               fmt::format("[{}]", fmt::join(t.dims, ", ")), t.bytes, file.data_offset() + t.offset);
  }
  return 0;
}

}  // namespace sitsrt::cli
