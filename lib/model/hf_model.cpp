#include "model/hf_model.hpp"

#include "core/check.hpp"
#include "core/half.hpp"
#include "formats/safetensors.hpp"
#include "model/hf_names.hpp"
#include "model/hf_quant.hpp"

#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace sitsrt {
namespace {

namespace fs = std::filesystem;
using safetensors::ElementType;

constexpr std::uintmax_t kMaxConfigBytes = 16u << 20;

std::string read_text(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) raise(ErrorCode::kIo, "{}: cannot read: {}", path, ec.message());
  if (size > kMaxConfigBytes) raise(ErrorCode::kInvalidModel, "{}: {} bytes is too large for a config", path, size);
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) raise(ErrorCode::kIo, "{}: cannot read", path);
  return text.str();
}

std::optional<DType> weight_type(ElementType type) {
  switch (type) {
    case ElementType::kF32:
      return DType::kF32;
    case ElementType::kF16:
      return DType::kF16;
    case ElementType::kBF16:
      return DType::kBF16;
    default:
      return std::nullopt;
  }
}

// The projections of a block, as HF names them after "layers.N.".
constexpr std::string_view kLinearLayers[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                              "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                              "mlp.down_proj"};

hf::RawTensor raw(const safetensors::Checkpoint& ckpt, const std::string& dir, const std::string& name,
                  bool optional = false) {
  const auto entry = ckpt.find(name);
  if (!entry) {
    if (optional) return {};
    raise(ErrorCode::kInvalidModel, "{}: missing tensor '{}' of the quantized checkpoint", dir, name);
  }
  return {entry->info->name, entry->info->type, entry->info->shape, ckpt.data(*entry)};
}

// The companion tensors of one quantized linear layer, by method.
std::vector<std::string> companions(const HfQuantization& q) {
  if (q.method == "awq") return {"qweight", "qzeros", "scales"};
  if (q.method == "gptq") return {"qweight", "qzeros", "scales", "g_idx"};
  return {"weight", q.fp8_block.empty() ? "weight_scale" : "weight_scale_inv"};
}

// Validates the quantized linear layers, then refuses the model: the weight formats that would
// hold these levels without a float round trip are not in this build yet. Layer 0 is unpacked
// completely (packing, zero points, g_idx ranges); later layers must hold the same companions
// with the same dtypes and shapes (unpacking all of a 7B model would take seconds to refuse it).
[[noreturn]] void refuse_quantized(const HfModel& model, const safetensors::Checkpoint& ckpt, const std::string& dir) {
  const HfQuantization& q = *model.config.quantization;
  const std::vector<std::string> parts = companions(q);
  std::int64_t checked = 0;
  for (const std::string_view linear : kLinearLayers) {
    const std::string first = fmt::format("{}layers.0.{}.", model.prefix, linear);
    const bool g_idx_optional = !q.desc_act;
    try {
      if (q.method == "awq") {
        (void)hf::unpack_awq(raw(ckpt, dir, first + "qweight"), raw(ckpt, dir, first + "qzeros"),
                             raw(ckpt, dir, first + "scales"), q.group_size);
      } else if (q.method == "gptq") {
        (void)hf::unpack_gptq(raw(ckpt, dir, first + "qweight"), raw(ckpt, dir, first + "qzeros"),
                              raw(ckpt, dir, first + "scales"), raw(ckpt, dir, first + "g_idx", g_idx_optional),
                              q.group_size, q.gptq_format == "gptq");
      } else {
        (void)hf::read_fp8(raw(ckpt, dir, first + parts[0]), raw(ckpt, dir, first + parts[1]), q.fp8_block);
      }
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kInvalidModel) throw;
      raise(ErrorCode::kInvalidModel, "{}: {}", dir, e.what());
    }
    for (std::int64_t l = 1; l < model.config.spec.n_layer; ++l) {
      const std::string base = fmt::format("{}layers.{}.{}.", model.prefix, l, linear);
      for (const std::string& part : parts) {
        const hf::RawTensor want = raw(ckpt, dir, first + part, true);
        const hf::RawTensor got = raw(ckpt, dir, base + part, part == "g_idx" && g_idx_optional);
        if (want.type != got.type || want.shape != got.shape) {
          raise(ErrorCode::kInvalidModel, "{}: tensor '{}' is {} [{}], layer 0 has {} [{}]", dir, base + part,
                safetensors::name(got.type), fmt::join(got.shape, ", "), safetensors::name(want.type),
                fmt::join(want.shape, ", "));
        }
      }
    }
    checked += model.config.spec.n_layer;
  }
  raise(ErrorCode::kUnsupported,
        "{}: quantization_config.quant_method '{}' is not supported yet: its {} quantized linear layers are valid, "
        "but this build has no {} weight format to serve them without a float round trip",
        dir, q.method, checked, q.method == "fp8" ? "FP8 E4M3" : "INT4 g128");
}

// Norm and bias vectors as owned F32; Gemma norms as 1 + w.
std::vector<std::byte> f32_vector(std::span<const std::byte> data, ElementType type, bool add_one) {
  const std::size_t n = data.size() / static_cast<std::size_t>(safetensors::element_bytes(type));
  std::vector<std::byte> out(n * sizeof(float));
  for (std::size_t i = 0; i < n; ++i) {
    float v = 0.0f;
    if (type == ElementType::kF32) {
      std::memcpy(&v, data.data() + i * 4, 4);
    } else {
      std::uint16_t h = 0;
      std::memcpy(&h, data.data() + i * 2, 2);
      v = type == ElementType::kF16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
    }
    if (add_one) v += 1.0f;
    std::memcpy(out.data() + i * sizeof(float), &v, sizeof(float));
  }
  return out;
}

}  // namespace

bool is_hf_model_directory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec);
}

HfModel open_hf_model(const std::string& directory) {
  const std::string config_path = (fs::path(directory) / "config.json").string();
  HfModel model{parse_hf_config(read_text(config_path), config_path), TensorCatalog(directory), {}};
  const bool gemma = model.config.spec.architecture == "gemma3";
  auto ckpt = std::make_shared<const safetensors::Checkpoint>(safetensors::Checkpoint::open(directory));

  const bool quantized = model.config.quantization.has_value();
  const std::string probe = quantized ? "layers.0.input_layernorm.weight" : "embed_tokens.weight";
  for (const std::string_view prefix : kHfTextPrefixes) {
    if (ckpt->find(std::string(prefix) + probe)) {
      model.prefix = std::string(prefix);
      break;
    }
  }
  if (model.prefix.empty()) raise(ErrorCode::kInvalidModel, "{}: missing tensor 'model.{}'", directory, probe);
  if (quantized) refuse_quantized(model, *ckpt, directory);

  for (const safetensors::File& file : ckpt->files()) {
    for (const safetensors::TensorInfo& t : file.tensors()) {
      const auto gguf_name = gguf_name_for_hf(t.name, gemma);
      if (!gguf_name) continue;  // not part of the text model (vision tower, rotary buffers)
      if (!t.name.starts_with(model.prefix) && *gguf_name != "output.weight") continue;
      const auto type = weight_type(t.type);
      if (!type) {
        raise(ErrorCode::kUnsupported, "{}: tensor '{}' is {}; unquantized checkpoints must be F32, F16 or BF16",
              file.path(), t.name, safetensors::name(t.type));
      }
      if (t.shape.empty() || t.shape.size() > 2)
        raise(ErrorCode::kInvalidModel, "{}: tensor '{}' must have 1 or 2 dimensions", file.path(), t.name);
      CatalogTensor c{*gguf_name, t.name, *type, {t.shape.rbegin(), t.shape.rend()}, t.bytes, file.tensor_data(t)};
      const bool norm = gguf_name->ends_with("norm.weight");
      if (t.shape.size() == 1 && (*type != DType::kF32 || (gemma && norm))) {
        c.type = DType::kF32;
        c.bytes = static_cast<std::uint64_t>(t.shape[0]) * sizeof(float);
        model.tensors.add_owned(std::move(c), f32_vector(file.tensor_data(t), t.type, gemma && norm));
      } else {
        model.tensors.add(std::move(c));
      }
    }
  }
  model.tensors.set_source_namer(
      [gemma, prefix = model.prefix](const std::string& name) { return hf_name_for_gguf(name, gemma, prefix); });
  model.tensors.keep_alive(std::move(ckpt));
  return model;
}

}  // namespace sitsrt
