#include "model/hf_model.hpp"

#include "core/check.hpp"
#include "core/file_io.hpp"
#include "core/half.hpp"
#include "core/thread_pool.hpp"
#include "formats/safetensors.hpp"
#include "model/hf_names.hpp"
#include "model/hf_quant.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>

namespace sitsrt {
namespace {

namespace fs = std::filesystem;
using safetensors::ElementType;

constexpr std::uintmax_t kMaxConfigBytes = 16u << 20;

std::string read_text(const std::string& path) {
  return read_regular_file(path, kMaxConfigBytes, "config.json", ErrorCode::kInvalidModel);
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

hf::RawTensor raw(const safetensors::Checkpoint& ckpt, const std::string& name, bool optional = false) {
  const auto entry = ckpt.find(name);
  if (!entry) {
    if (optional) return {};
    raise(ErrorCode::kInvalidModel, "missing tensor '{}' of the quantized checkpoint", name);
  }
  return {entry->info->name, entry->info->type, entry->info->shape, ckpt.data(*entry)};
}

// One quantized linear layer in the internal weight format that holds its stored values
// exactly (AWQ / GPTQ -> INT4 g128, FP8 -> FP8 E4M3; no float round trip), as a catalog tensor
// under the unquantized weight's GGUF name (its bytes in `bytes`, for add_owned).
struct QuantizedLinear {
  CatalogTensor tensor;
  std::vector<std::byte> bytes;
};

QuantizedLinear quantized_linear(const HfQuantization& q, const safetensors::Checkpoint& ckpt, const std::string& base,
                                 const std::string& gguf_name) {
  const bool fp8 = q.method == "fp8";
  const std::string packed = base + (fp8 ? "weight" : "qweight");
  QuantizedLinear out{{gguf_name, packed, fp8 ? DType::kFP8_E4M3 : DType::kQ4_G128, {}, 0, {}}, {}};
  if (fp8) {
    const auto w = hf::read_fp8(
        raw(ckpt, packed), raw(ckpt, base + (q.fp8_block.empty() ? "weight_scale" : "weight_scale_inv")), q.fp8_block);
    out.tensor.dims = {w.cols, w.rows};
    out.bytes = hf::pack_fp8_e4m3(w, packed);
  } else {
    const auto w =
        q.method == "awq"
            ? hf::unpack_awq(raw(ckpt, packed), raw(ckpt, base + "qzeros"), raw(ckpt, base + "scales"), q.group_size)
            : hf::unpack_gptq(raw(ckpt, packed), raw(ckpt, base + "qzeros"), raw(ckpt, base + "scales"),
                              raw(ckpt, base + "g_idx", !q.desc_act), q.group_size, q.gptq_format == "gptq");
    out.tensor.dims = {w.cols, w.rows};
    out.bytes = hf::pack_q4_g128(w, packed);
  }
  out.tensor.bytes = out.bytes.size();
  return out;
}

// Adds every quantized linear layer of the blocks to the catalog, unpacked and repacked in
// parallel (a 7B checkpoint holds ~6.5e9 levels); a layer stored unquantized (a float `weight`,
// e.g. in modules_to_not_convert) is left to the general loop. Errors are reported for the
// first failing layer in model order, whichever thread met it.
void add_quantized_linears(HfModel& model, const safetensors::Checkpoint& ckpt, const std::string& dir) {
  const HfQuantization& q = *model.config.quantization;
  const bool gemma = model.config.spec.architecture == "gemma3";
  std::vector<std::string> bases;
  for (std::int64_t l = 0; l < model.config.spec.n_layer; ++l) {
    for (const std::string_view linear : kLinearLayers) {
      std::string base = fmt::format("{}layers.{}.{}.", model.prefix, l, linear);
      const auto plain = ckpt.find(base + "weight");
      const bool quantized = q.method == "fp8" ? !plain || plain->info->type == ElementType::kF8_E4M3
                                               : !plain || ckpt.find(base + "qweight").has_value();
      if (quantized) bases.push_back(std::move(base));
    }
  }
  if (bases.empty()) return;
  std::vector<QuantizedLinear> done(bases.size());
  std::vector<std::exception_ptr> errors(bases.size());
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  ThreadPool pool(static_cast<int>(std::min<std::size_t>(bases.size(), ThreadPool::hardware_threads())));
  pool.run([&](int, int) {
    // Layers are claimed in order and no new one after a failure: every layer before the failing
    // one has been claimed and finishes, so the first error in model order is always found.
    for (std::size_t i = next++; i < bases.size() && !failed; i = next++) {
      try {
        done[i] = quantized_linear(q, ckpt, bases[i], *gguf_name_for_hf(bases[i] + "weight", gemma));
      } catch (...) {
        errors[i] = std::current_exception();
        failed = true;
      }
    }
  });
  for (std::size_t i = 0; i < bases.size(); ++i) {
    if (errors[i]) {
      try {
        std::rethrow_exception(errors[i]);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kInvalidModel && e.code() != ErrorCode::kUnsupported) throw;
        raise(e.code(), "{}: {} ({} checkpoint)", dir, e.what(), q.method);
      }
    }
    model.tensors.add_owned(std::move(done[i].tensor), std::move(done[i].bytes));
  }
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
  HfModel model{parse_hf_config(read_text(config_path), config_path), TensorCatalog(directory), {}, {}};
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
  if (quantized) add_quantized_linears(model, *ckpt, directory);

  for (const safetensors::File& file : ckpt->files()) {
    for (const safetensors::TensorInfo& t : file.tensors()) {
      const auto gguf_name = gguf_name_for_hf(t.name, gemma);
      if (!gguf_name) continue;  // not part of the text model (vision tower, rotary buffers)
      if (!t.name.starts_with(model.prefix) && *gguf_name != "output.weight") continue;
      if (model.tensors.find(*gguf_name) != nullptr) continue;  // a quantized linear, added above
      const auto type = weight_type(t.type);
      if (!type) {
        raise(ErrorCode::kUnsupported, "{}: tensor '{}' is {}; unquantized checkpoints must be F32, F16 or BF16",
              file.path(), t.name, safetensors::name(t.type));
      }
      if (t.shape.empty() || t.shape.size() > 2)
        raise(ErrorCode::kInvalidModel, "{}: tensor '{}' must have 1 or 2 dimensions", file.path(), t.name);
      CatalogTensor c{*gguf_name, t.name, *type, {t.shape.rbegin(), t.shape.rend()}, t.bytes, file.tensor_data(t), file.mapped()};
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
  for (const safetensors::File& file : ckpt->files()) {
    if (file.mapping() != nullptr) model.weight_files.push_back({file.path(), file.mapping()->identity()});
  }
  model.tensors.keep_alive(std::move(ckpt));
  return model;
}

}  // namespace sitsrt
