#include "model/hf_config.hpp"

#include "core/check.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

namespace sitsrt {
namespace {

using nlohmann::json;

// The transformers config class defaults this reader applies when a key is absent (or null
// where the class allows None). Shape keys (hidden_size, layers, heads, intermediate_size) are
// required; vocab_size only has a default for Gemma 3 (its multimodal configs omit it).
struct Family {
  std::string_view hf_name;
  std::string_view architecture;  // ModelSpec architecture (graph builder)
  bool mistral = false;
  bool gemma = false;
  bool qwen = false;
  bool text_config = false;  // hyper-parameters nested under "text_config"
  double rms_eps;
  double rope_theta;
  std::int64_t max_positions;
  bool tie_embeddings;
  std::int64_t default_head_dim;  // 0: hidden_size / num_attention_heads
};

constexpr std::array<Family, 6> kFamilies = {{
    {"LlamaForCausalLM", "llama", false, false, false, false, 1e-6, 10000.0, 2048, false, 0},
    {"MistralForCausalLM", "llama", true, false, false, false, 1e-6, 10000.0, 4096 * 32, false, 0},
    {"Qwen2ForCausalLM", "qwen2", false, false, true, false, 1e-6, 10000.0, 32768, false, 0},
    {"Qwen3ForCausalLM", "qwen3", false, false, true, false, 1e-6, 10000.0, 32768, false, 128},
    {"Gemma3ForCausalLM", "gemma3", false, true, false, false, 1e-6, 1000000.0, 131072, true, 256},
    {"Gemma3ForConditionalGeneration", "gemma3", false, true, false, true, 1e-6, 1000000.0, 131072, true, 256},
}};

// Typed access to one JSON object of config.json; messages name the file and the key path.
class Keys {
 public:
  Keys(const json& object, const std::string& file, std::string prefix)
      : object_(object), file_(file), prefix_(std::move(prefix)) {}

  [[nodiscard]] std::string path(std::string_view key) const { return prefix_ + std::string(key); }
  // The value, or nullptr when absent or null.
  [[nodiscard]] const json* find(std::string_view key) const {
    const auto it = object_.find(std::string(key));
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  [[nodiscard]] bool present(std::string_view key) const { return object_.contains(std::string(key)); }
  [[noreturn]] void fail(std::string_view key, std::string_view what) const {
    raise(ErrorCode::kInvalidModel, "{}: key '{}' {}", file_, path(key), what);
  }

  std::optional<std::int64_t> integer(std::string_view key, std::int64_t lo, std::int64_t hi) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number_integer()) fail(key, "must be an integer");
    const std::int64_t n = v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(hi)
                               ? hi + 1
                               : v->get<std::int64_t>();
    if (n < lo || n > hi) fail(key, fmt::format("= {} is out of range [{}, {}]", v->dump(), lo, hi));
    return n;
  }
  std::int64_t require_integer(std::string_view key, std::int64_t lo, std::int64_t hi) const {
    const auto n = integer(key, lo, hi);
    if (!n) fail(key, "is missing");
    return *n;
  }
  // A number > 0 (integers accepted) that stays a normal, finite, non-zero float32: the spec
  // holds these as float, and e.g. an eps of 1e-85 would otherwise become 0 (found by fuzzing).
  std::optional<double> positive(std::string_view key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) fail(key, "must be a number");
    const double d = v->get<double>();
    if (!(d >= std::numeric_limits<float>::min()) || !(d <= std::numeric_limits<float>::max())) {
      fail(key, fmt::format("= {} must be a finite number > 0 within float32 range (1.2e-38 to 3.4e38)", v->dump()));
    }
    return d;
  }
  std::optional<bool> boolean(std::string_view key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) fail(key, "must be true or false");
    return v->get<bool>();
  }
  std::optional<std::string> string(std::string_view key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) fail(key, "must be a string");
    return v->get<std::string>();
  }
  const json* object(std::string_view key) const {
    const json* v = find(key);
    if (v != nullptr && !v->is_object()) fail(key, "must be an object");
    return v;
  }
  const json* array(std::string_view key) const {
    const json* v = find(key);
    if (v != nullptr && !v->is_array()) fail(key, "must be an array");
    return v;
  }
  [[nodiscard]] const std::string& file() const noexcept { return file_; }

 private:
  const json& object_;
  const std::string& file_;
  std::string prefix_;
};

constexpr std::int64_t kMaxDim = std::int64_t{1} << 20;

void read_rope_scaling(const Keys& k, ModelSpec& spec) {
  const json* scaling = k.object("rope_scaling");
  if (scaling == nullptr) return;
  const Keys r(*scaling, k.file(), k.path("rope_scaling."));
  const auto type = r.string("rope_type") ? r.string("rope_type") : r.string("type");
  if (!type) r.fail("rope_type", "is missing");
  RopeScalingSpec& s = spec.rope_scaling;
  if (*type == "default") return;
  const auto factor = r.positive("factor");
  if (!factor) r.fail("factor", "is missing");
  s.factor = static_cast<float>(*factor);
  if (*type == "linear") {
    s.type = RopeScalingType::kLinear;
    spec.rope_freq_scale = 1.0f / s.factor;
  } else if (*type == "llama3") {
    s.type = RopeScalingType::kLlama3;
    s.original_context = r.require_integer("original_max_position_embeddings", 1, std::int64_t{1} << 24);
    s.low_freq_factor = static_cast<float>(r.positive("low_freq_factor").value_or(1.0));
    s.high_freq_factor = static_cast<float>(r.positive("high_freq_factor").value_or(4.0));
    if (!(s.high_freq_factor > s.low_freq_factor)) r.fail("high_freq_factor", "must be greater than low_freq_factor");
  } else if (*type == "yarn") {
    s.type = RopeScalingType::kYarn;
    spec.rope_freq_scale = 1.0f / s.factor;
    // transformers: original_max_position_embeddings, else max_position_embeddings.
    s.original_context =
        r.integer("original_max_position_embeddings", 1, std::int64_t{1} << 24).value_or(spec.n_ctx_train);
    s.yarn_beta_fast = static_cast<float>(r.positive("beta_fast").value_or(32.0));
    s.yarn_beta_slow = static_cast<float>(r.positive("beta_slow").value_or(1.0));
    // attention_factor replaces transformers' default 0.1 ln(factor) + 1; the graph multiplies
    // that default by yarn_attn_factor.
    if (const auto attention = r.positive("attention_factor")) {
      const double standard = s.factor > 1.0f ? 0.1 * std::log(static_cast<double>(s.factor)) + 1.0 : 1.0;
      s.yarn_attn_factor = static_cast<float>(*attention / standard);
    }
    if (r.find("mscale") != nullptr || r.find("mscale_all_dim") != nullptr)
      raise(ErrorCode::kUnsupported, "{}: '{}' (DeepSeek-style YaRN mscale) is not supported", k.file(),
            r.path("mscale"));
  } else {
    raise(ErrorCode::kUnsupported, "{}: '{}' = '{}' is not supported (default, linear, llama3, yarn)", k.file(),
          r.path("rope_type"), *type);
  }
}

// Which layers use the sliding window: layer_types ("sliding_attention" / "full_attention"),
// else Gemma's sliding_window_pattern period, else Qwen's max_window_layers, else all.
void read_window_layers(const Keys& k, const Family& f, ModelSpec& spec) {
  const auto n = static_cast<std::size_t>(spec.n_layer);
  spec.windowed_layers.assign(n, true);
  if (const json* types = k.array("layer_types")) {
    if (types->size() != n) k.fail("layer_types", fmt::format("must list {} layers", n));
    for (std::size_t l = 0; l < n; ++l) {
      const json& t = (*types)[l];
      const std::string* type = t.is_string() ? t.get_ptr<const std::string*>() : nullptr;
      if (type == nullptr || (*type != "sliding_attention" && *type != "full_attention"))
        k.fail("layer_types", fmt::format("[{}] must be \"sliding_attention\" or \"full_attention\"", l));
      spec.windowed_layers[l] = *type == "sliding_attention";
    }
    return;
  }
  if (f.gemma) {
    const std::int64_t period = k.integer("sliding_window_pattern", 1, 4096).value_or(6);
    for (std::size_t l = 0; l < n; ++l) spec.windowed_layers[l] = (l + 1) % static_cast<std::size_t>(period) != 0;
  } else if (f.qwen) {
    const std::int64_t first = k.integer("max_window_layers", 0, 4096).value_or(28);
    for (std::size_t l = 0; l < n; ++l) spec.windowed_layers[l] = static_cast<std::int64_t>(l) >= first;
  }
}

void read_sliding_window(const Keys& k, const Family& f, ModelSpec& spec) {
  const std::int64_t max_window = std::int64_t{1} << 24;
  if (f.gemma) {
    spec.sliding_window = k.integer("sliding_window", 1, max_window).value_or(4096);
  } else if (f.mistral) {
    // MistralConfig defaults to 4096 when the key is absent; null turns the window off.
    spec.sliding_window = k.present("sliding_window") ? k.integer("sliding_window", 1, max_window).value_or(0) : 4096;
  } else if (f.qwen) {
    if (k.boolean("use_sliding_window").value_or(false))
      spec.sliding_window = k.integer("sliding_window", 1, max_window).value_or(4096);
  }
  if (spec.sliding_window > 0)
    read_window_layers(k, f, spec);
  else
    spec.windowed_layers.assign(static_cast<std::size_t>(spec.n_layer), false);
}

std::optional<HfQuantization> read_quantization(const Keys& top) {
  const json* q = top.object("quantization_config");
  if (q == nullptr) return std::nullopt;
  const Keys k(*q, top.file(), "quantization_config.");
  HfQuantization out;
  const auto method = k.string("quant_method");
  if (!method) k.fail("quant_method", "is missing");
  out.method = *method;
  if (out.method == "fp8") {
    if (const json* block = k.array("weight_block_size")) {
      if (block->size() != 2 || !(*block)[0].is_number_integer() || !(*block)[1].is_number_integer() ||
          (*block)[0].get<std::int64_t>() < 1 || (*block)[1].get<std::int64_t>() < 1)
        k.fail("weight_block_size", "must be two positive integers");
      out.fp8_block = {(*block)[0].get<std::int64_t>(), (*block)[1].get<std::int64_t>()};
    }
  } else if (out.method == "awq" || out.method == "gptq") {
    out.bits = static_cast<int>(k.require_integer("bits", 1, 8));
    out.group_size = k.require_integer("group_size", -1, kMaxDim);
    if (out.group_size == 0) k.fail("group_size", "must be -1 or positive");
    if (out.bits != 4)
      raise(ErrorCode::kUnsupported, "{}: '{}' = {}: only 4-bit {} checkpoints are supported", top.file(),
            k.path("bits"), out.bits, out.method);
    if (out.method == "awq") {
      out.zero_point = k.boolean("zero_point").value_or(true);
      out.awq_version = k.string("version").value_or("gemm");
      if (out.awq_version != "gemm" && out.awq_version != "GEMM")
        raise(ErrorCode::kUnsupported, "{}: '{}' = '{}': only the GEMM packing of AWQ is supported", top.file(),
              k.path("version"), out.awq_version);
    } else {
      out.desc_act = k.boolean("desc_act").value_or(false);
      out.sym = k.boolean("sym").value_or(true);
      out.gptq_format = k.string("checkpoint_format").value_or("gptq");
      if (out.gptq_format != "gptq" && out.gptq_format != "gptq_v2")
        raise(ErrorCode::kUnsupported, "{}: '{}' = '{}' is not supported (gptq, gptq_v2)", top.file(),
              k.path("checkpoint_format"), out.gptq_format);
    }
  } else {
    raise(ErrorCode::kUnsupported, "{}: '{}' = '{}' is not supported (fp8, awq, gptq)", top.file(),
          k.path("quant_method"), out.method);
  }
  return out;
}

}  // namespace

std::string_view supported_hf_architectures() noexcept {
  return "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM, "
         "Gemma3ForConditionalGeneration";
}

HfConfig parse_hf_config(std::string_view json_text, const std::string& display_name) {
  json doc;
  // JSON parsers disagree on a repeated key (first or last wins): refuse it, naming the key path.
  struct Level {
    bool array = false;
    std::string name;  // the key it is the value of, "[]" for an array element, "" at the top
    std::set<std::string> keys;
  };
  std::vector<Level> levels;  // the objects and arrays being parsed, innermost last
  std::string pending_key;
  const json::parser_callback_t unique_keys = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        levels.push_back({event == json::parse_event_t::array_start,
                          levels.empty() ? "" : levels.back().array ? "[]" : pending_key, {}});
        pending_key.clear();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        levels.pop_back();
        pending_key.clear();
        break;
      case json::parse_event_t::key:
        pending_key = parsed.get<std::string>();
        if (!levels.empty() && !levels.back().keys.insert(pending_key).second) {
          std::string dotted;
          for (std::size_t i = 1; i < levels.size(); ++i) dotted += levels[i].name + ".";
          raise(ErrorCode::kInvalidModel, "{}: key '{}{}' appears twice (which value would apply is ambiguous)",
                display_name, dotted, pending_key);
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    doc = json::parse(json_text, unique_keys);
  } catch (const json::exception& e) {
    raise(ErrorCode::kInvalidModel, "{}: not valid JSON: {}", display_name, e.what());
  }
  if (!doc.is_object()) raise(ErrorCode::kInvalidModel, "{}: not a JSON object", display_name);
  const Keys top(doc, display_name, "");
  const json* archs = top.array("architectures");
  if (archs == nullptr) top.fail("architectures", "is missing");
  if (archs->size() != 1 || !(*archs)[0].is_string()) top.fail("architectures", "must hold one string");
  HfConfig out;
  out.hf_architecture = (*archs)[0].get<std::string>();
  const Family* family = nullptr;
  for (const Family& f : kFamilies) {
    if (f.hf_name == out.hf_architecture) family = &f;
  }
  if (family == nullptr) {
    raise(ErrorCode::kUnsupported, "{}: key 'architectures': '{}' is not supported (supported: {})", display_name,
          out.hf_architecture, supported_hf_architectures());
  }
  const json* text = family->text_config ? top.object("text_config") : &doc;
  if (text == nullptr) top.fail("text_config", "is missing");
  const Keys k(*text, display_name, family->text_config ? "text_config." : "");

  ModelSpec& spec = out.spec;
  spec.architecture = std::string(family->architecture);
  spec.name = top.string("_name_or_path").value_or("");
  spec.n_embd = k.require_integer("hidden_size", 1, kMaxDim);
  spec.n_layer = k.require_integer("num_hidden_layers", 1, 4096);
  spec.n_head = k.require_integer("num_attention_heads", 1, 4096);
  spec.n_ff = k.require_integer("intermediate_size", 1, kMaxDim * 4);
  spec.n_vocab = family->gemma ? k.integer("vocab_size", 1, std::int64_t{1} << 24).value_or(262208)
                               : k.require_integer("vocab_size", 1, std::int64_t{1} << 24);
  spec.n_ctx_train = k.integer("max_position_embeddings", 1, std::int64_t{1} << 24).value_or(family->max_positions);
  spec.n_head_kv = k.integer("num_key_value_heads", 1, 4096).value_or(spec.n_head);
  if (spec.n_head % spec.n_head_kv != 0)
    k.fail("num_key_value_heads",
           fmt::format("= {} does not divide num_attention_heads {}", spec.n_head_kv, spec.n_head));
  if (const auto hd = k.integer("head_dim", 2, 4096)) {
    spec.head_dim = *hd;
  } else if (family->default_head_dim > 0) {
    spec.head_dim = family->default_head_dim;
  } else {
    if (spec.n_embd % spec.n_head != 0)
      k.fail("hidden_size", fmt::format("= {} is not a multiple of num_attention_heads {}", spec.n_embd, spec.n_head));
    spec.head_dim = spec.n_embd / spec.n_head;
  }
  // Rope rotates pairs: a head must be an even number >= 2 of dimensions.
  if (spec.head_dim < 2 || spec.head_dim % 2 != 0) {
    k.fail(k.present("head_dim") ? "head_dim" : "hidden_size",
           fmt::format("gives a head width of {}, which must be even and at least 2", spec.head_dim));
  }
  spec.rope_dims = spec.head_dim;
  spec.rms_eps = static_cast<float>(k.positive("rms_norm_eps").value_or(family->rms_eps));
  if (!(spec.rms_eps < 1.0f)) k.fail("rms_norm_eps", "must be < 1");
  spec.rope_freq_base = static_cast<float>(k.positive("rope_theta").value_or(family->rope_theta));
  if (!(spec.rope_freq_base > 1.0f)) k.fail("rope_theta", "must be > 1");
  // HF checkpoints keep q/k in the order the reference code rotates: halves (neox pairing).
  spec.rope_neox = true;
  read_rope_scaling(k, spec);
  read_sliding_window(k, *family, spec);
  spec.attn_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(spec.head_dim)));
  // Gemma 3 nests tie_word_embeddings at the top level of multimodal configs.
  spec.tied_output =
      k.boolean("tie_word_embeddings").value_or(top.boolean("tie_word_embeddings").value_or(family->tie_embeddings));
  if (k.boolean("attention_bias").value_or(false) && !family->qwen)
    raise(ErrorCode::kUnsupported, "{}: '{}' = true (biases on every attention projection) is not supported",
          display_name, k.path("attention_bias"));
  if (k.boolean("mlp_bias").value_or(false))
    raise(ErrorCode::kUnsupported, "{}: '{}' = true is not supported", display_name, k.path("mlp_bias"));
  spec.qkv_bias = family->architecture == "qwen2";
  spec.qk_norm = family->architecture == "qwen3" || family->gemma;
  if (family->gemma) {
    const auto act = k.string("hidden_activation").value_or("gelu_pytorch_tanh");
    if (act != "gelu_pytorch_tanh")
      raise(ErrorCode::kUnsupported, "{}: '{}' = '{}' is not supported (gelu_pytorch_tanh)", display_name,
            k.path("hidden_activation"), act);
    spec.ffn_activation = FfnActivation::kGeluTanh;
    spec.post_norms = true;
    spec.embedding_scale = static_cast<float>(std::sqrt(static_cast<double>(spec.n_embd)));
    spec.rope_local_freq_base = static_cast<float>(k.positive("rope_local_base_freq").value_or(10000.0));
    spec.attn_scale = static_cast<float>(1.0 / std::sqrt(k.positive("query_pre_attn_scalar").value_or(256.0)));
    if (const auto cap = k.positive("final_logit_softcapping")) spec.final_logit_softcap = static_cast<float>(*cap);
    if (k.find("attn_logit_softcapping") != nullptr)
      raise(ErrorCode::kUnsupported, "{}: '{}' is not supported (Gemma 2 style attention soft-capping)", display_name,
            k.path("attn_logit_softcapping"));
  } else {
    const auto act = k.string("hidden_act").value_or("silu");
    if (act != "silu")
      raise(ErrorCode::kUnsupported, "{}: '{}' = '{}' is not supported (silu)", display_name, k.path("hidden_act"),
            act);
  }
  out.torch_dtype = top.string("torch_dtype").value_or(top.string("dtype").value_or(""));
  if (!out.torch_dtype.empty() && out.torch_dtype != "float32" && out.torch_dtype != "float16" &&
      out.torch_dtype != "bfloat16")
    top.fail("torch_dtype", fmt::format("= '{}' is not one of float32, float16, bfloat16", out.torch_dtype));
  out.quantization = read_quantization(top);
  return out;
}

}  // namespace sitsrt
