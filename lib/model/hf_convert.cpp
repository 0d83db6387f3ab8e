#include "model/hf_convert.hpp"

#include "core/check.hpp"
#include "core/quant_blocks.hpp"
#include "core/thread_pool.hpp"
#include "formats/gguf_writer.hpp"
#include "model/hf_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numbers>

namespace sitsrt {
namespace {

// llama.cpp's converter stores Llama/Mistral q and k with each head's rows reordered from
// HF's rotate-half layout (first half, second half) to adjacent pairs: GGUF row h*hd + 2i + j
// is HF row h*hd + j*hd/2 + i.
std::int64_t hf_row_for_gguf_row(std::int64_t row, std::int64_t head_dim) {
  const std::int64_t head = row / head_dim, within = row % head_dim;
  return head * head_dim + (within % 2) * (head_dim / 2) + within / 2;
}

// Llama 3 rope scaling as the per-pair divisors llama.cpp writes to rope_freqs.weight.
std::vector<float> llama3_rope_factors(const ModelSpec& spec) {
  const RopeScalingSpec& s = spec.rope_scaling;
  const double old_context = static_cast<double>(s.original_context);
  const double low_wavelength = old_context / s.low_freq_factor, high_wavelength = old_context / s.high_freq_factor;
  std::vector<float> factors;
  for (std::int64_t i = 0; i < spec.rope_dims; i += 2) {
    const double freq = 1.0 / std::pow(static_cast<double>(spec.rope_freq_base),
                                       static_cast<double>(i) / static_cast<double>(spec.rope_dims));
    const double wavelength = 2.0 * std::numbers::pi / freq;
    double f = 1.0;
    if (wavelength > low_wavelength) {
      f = s.factor;
    } else if (wavelength >= high_wavelength) {
      const double smooth = (old_context / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = 1.0 / ((1.0 - smooth) / s.factor + smooth);
    }
    factors.push_back(static_cast<float>(f));
  }
  return factors;
}

void write_metadata(gguf::Writer& w, const ModelSpec& spec) {
  const std::string& arch = spec.architecture;
  const auto key = [&](const char* k) { return arch + "." + k; };
  const auto u32 = [](std::int64_t v) { return gguf::Value::u32(static_cast<std::uint32_t>(v)); };
  w.set("general.architecture", gguf::Value::string(arch));
  if (!spec.name.empty()) w.set("general.name", gguf::Value::string(spec.name));
  w.set(key("vocab_size"), u32(spec.n_vocab));
  w.set(key("context_length"), u32(spec.n_ctx_train));
  w.set(key("embedding_length"), u32(spec.n_embd));
  w.set(key("block_count"), u32(spec.n_layer));
  w.set(key("feed_forward_length"), u32(spec.n_ff));
  w.set(key("attention.head_count"), u32(spec.n_head));
  w.set(key("attention.head_count_kv"), u32(spec.n_head_kv));
  w.set(key("attention.key_length"), u32(spec.head_dim));
  w.set(key("attention.value_length"), u32(spec.head_dim));
  w.set(key("rope.dimension_count"), u32(spec.rope_dims));
  w.set(key("rope.freq_base"), gguf::Value::f32(spec.rope_freq_base));
  w.set(key("attention.layer_norm_rms_epsilon"), gguf::Value::f32(spec.rms_eps));
  const RopeScalingSpec& s = spec.rope_scaling;
  if (s.type == RopeScalingType::kLinear || s.type == RopeScalingType::kYarn) {
    w.set(key("rope.scaling.type"), gguf::Value::string(std::string(name(s.type))));
    w.set(key("rope.scaling.factor"), gguf::Value::f32(s.factor));
  }
  if (s.type == RopeScalingType::kYarn) {
    w.set(key("rope.scaling.original_context_length"), u32(s.original_context));
    w.set(key("rope.scaling.yarn_beta_fast"), gguf::Value::f32(s.yarn_beta_fast));
    w.set(key("rope.scaling.yarn_beta_slow"), gguf::Value::f32(s.yarn_beta_slow));
    if (s.yarn_attn_factor != 1.0f) w.set(key("rope.scaling.attn_factor"), gguf::Value::f32(s.yarn_attn_factor));
  }
  if (spec.sliding_window > 0) {
    w.set(key("attention.sliding_window"), u32(spec.sliding_window));
    std::vector<gguf::Value> flags;
    for (const bool windowed : spec.windowed_layers) flags.push_back(gguf::Value::boolean(windowed));
    w.set(key("attention.sliding_window_pattern"), gguf::Value::array(gguf::ValueType::kBool, std::move(flags)));
  }
  if (spec.rope_local_freq_base > 0.0f) w.set(key("rope.freq_base_swa"), gguf::Value::f32(spec.rope_local_freq_base));
  if (spec.final_logit_softcap > 0.0f)
    w.set(key("final_logit_softcapping"), gguf::Value::f32(spec.final_logit_softcap));
  // GGUF has no key for Gemma's query_pre_attn_scalar; an explicit scale keeps a model whose
  // scalar is not head_dim exact (readers without the key assume 1/sqrt(head_dim)).
  const float default_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(spec.head_dim)));
  if (spec.attn_scale != default_scale) w.set(key("attention.scale"), gguf::Value::f32(spec.attn_scale));
}

}  // namespace

HfConvertSummary convert_hf_to_gguf(const std::string& directory, const std::string& output, std::optional<DType> type,
                                    int threads, const std::function<void(std::size_t, std::size_t)>& progress,
                                    OutputFileOptions output_options, Fp8Scaling fp8_scaling) {
  // Every file of the directory the model is read from (a superset of what open_hf_model reads).
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(directory, ec)) {
    const auto ext = entry.path().extension();
    if (ext == ".json" || ext == ".safetensors") output_options.protected_inputs.push_back(entry.path().string());
  }
  AtomicOutputFile file(output, output_options);  // refuses a bad target before any work
  auto model = std::make_shared<HfModel>(open_hf_model(directory));
  const ModelSpec& spec = model->config.spec;
  HfConvertSummary summary;
  summary.architecture = spec.architecture;
  gguf::Writer w;
  write_metadata(w, spec);
  auto pool = std::make_shared<ThreadPool>(threads);
  const bool permute_qk = spec.architecture == "llama";  // GGUF llama rotates adjacent pairs
  for (const CatalogTensor& t : model->tensors.tensors()) {
    if (t.name == "output.weight" && spec.tied_output) continue;
    const bool matrix = t.dims.size() == 2;
    DType out_type = DType::kF32;
    if (matrix) {
      out_type = !type ? t.type : fits_blocks(*type, t.dims[0]) ? *type : DType::kF16;
      if (out_type != type.value_or(t.type)) ++summary.fallback_f16;
    }
    const bool permute = permute_qk && (t.name.ends_with(".attn_q.weight") || t.name.ends_with(".attn_k.weight"));
    const std::int64_t cols = t.dims[0], rows = matrix ? t.dims[1] : 1;
    const std::size_t in_row = row_bytes(t.type, cols), out_row = row_bytes(out_type, cols);
    const std::int64_t head_dim = spec.head_dim;
    w.add_tensor(
        t.name, t.dims, out_type,
        [model, pool, &t, in_row, out_row, cols, rows, permute, head_dim, in_type = t.type, out_type,
         scaling = out_type == DType::kFP8_E4M3 ? fp8_scaling : Fp8Scaling::kSearchedBlock](std::span<std::byte> out) {
          // Output rows in bands of 128 for 128 x 128 blocks, one at a time otherwise.
          const std::int64_t band = scaling == Fp8Scaling::kBlock128 && in_type != out_type ? 128 : 1;
          pool->run([&](int thread, int n) {
            std::vector<float> values(static_cast<std::size_t>(cols * band));
            const Range range = split_range((rows + band - 1) / band, thread, n);
            for (std::int64_t b = range.begin; b < range.end; ++b) {
              const std::int64_t first = b * band, count = std::min(band, rows - first);
              std::byte* to = out.data() + static_cast<std::size_t>(first) * out_row;
              for (std::int64_t i = 0; i < count; ++i) {
                const std::int64_t r = first + i, src = permute ? hf_row_for_gguf_row(r, head_dim) : r;
                const std::byte* from = t.data.data() + static_cast<std::size_t>(src) * in_row;
                if (in_type == out_type) {
                  std::memcpy(to + static_cast<std::size_t>(i) * out_row, from, in_row);  // the bytes as stored
                } else {
                  dequantize_row(in_type, from, values.data() + i * cols, cols);
                }
              }
              if (in_type != out_type) quantize_rows(out_type, scaling, values.data(), to, count, cols);
            }
          });
        });
    summary.tensors += 1;
    summary.parameters += t.elements();
    summary.bytes += static_cast<std::uint64_t>(rows) * out_row;
  }
  if (spec.rope_scaling.type == RopeScalingType::kLlama3) {
    const std::vector<float> factors = llama3_rope_factors(spec);
    w.add_tensor("rope_freqs.weight", {static_cast<std::int64_t>(factors.size())}, DType::kF32,
                 [factors](std::span<std::byte> out) { std::memcpy(out.data(), factors.data(), out.size()); });
    summary.tensors += 1;
    summary.bytes += factors.size() * sizeof(float);
  }
  w.write(file, progress);
  return summary;
}

}  // namespace sitsrt
