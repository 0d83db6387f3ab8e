#include "model/random_model.hpp"

#include "core/check.hpp"
#include "core/quant_blocks.hpp"
#include "core/thread_pool.hpp"
#include "formats/gguf_writer.hpp"
#include "model/weight_conversion.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <fmt/format.h>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace sitsrt {
namespace {

std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::uint64_t hash_name(std::string_view s) noexcept {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

// SentencePiece-style vocabulary whose every piece is printable ASCII, so any token decodes.
struct GeneratedVocab {
  std::vector<gguf::Value> tokens, scores, types;
};

GeneratedVocab make_vocab(std::int64_t size) {
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
  std::vector<std::int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    pieces.push_back(fmt::format("<0x{:02X}>", b));
    types.push_back(6);
  }
  const std::string space = "\xE2\x96\x81";  // U+2581, SentencePiece's space
  std::unordered_set<std::string> seen(pieces.begin(), pieces.end());
  const auto add = [&](std::string piece) {
    if (static_cast<std::int64_t>(pieces.size()) >= size || !seen.insert(piece).second) return;
    pieces.push_back(std::move(piece));
    types.push_back(1);
  };
  add(space);
  for (char c = 33; c < 127; ++c) add(std::string(1, c));
  const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
  for (char c : letters) add(space + c);
  // Then ever longer letter strings, with and without a leading space.
  std::vector<std::string> frontier(letters.size());
  for (std::size_t i = 0; i < letters.size(); ++i) frontier[i] = std::string(1, letters[i]);
  while (static_cast<std::int64_t>(pieces.size()) < size) {
    std::vector<std::string> next;
    for (const auto& stem : frontier) {
      for (char c : letters) {
        next.push_back(stem + c);
        add(stem + c);
        add(space + stem + c);
        if (static_cast<std::int64_t>(pieces.size()) >= size) break;
      }
      if (static_cast<std::int64_t>(pieces.size()) >= size) break;
    }
    frontier = std::move(next);
  }
  GeneratedVocab v;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    v.tokens.push_back(gguf::Value::string(pieces[i]));
    // Longer pieces score higher so merges build whole words first.
    v.scores.push_back(gguf::Value::f32(types[i] == 1 ? static_cast<float>(pieces[i].size()) - 0.001f * static_cast<float>(i) : 0.0f));
    v.types.push_back(gguf::Value::i32(types[i]));
  }
  return v;
}

bool is_one_of(std::string_view value, std::initializer_list<std::string_view> names) {
  for (auto n : names) {
    if (value == n) return true;
  }
  return false;
}

void validate(const RandomModelOptions& o) {
  const auto need = [](bool ok, std::string_view field, std::int64_t value) {
    if (!ok) raise(ErrorCode::kInvalidArgument, "make-model: {} = {} is out of range", field, value);
  };
  if (!is_one_of(o.architecture, {"llama", "mistral", "qwen2", "qwen3", "gemma3"})) {
    raise(ErrorCode::kInvalidArgument, "make-model: architecture '{}' is not one of {}", o.architecture,
          kRandomModelArchitectures);
  }
  if (!is_one_of(o.rope_scaling, {"none", "linear", "yarn", "llama3"})) {
    raise(ErrorCode::kInvalidArgument, "make-model: rope scaling '{}' is not one of none, linear, yarn, llama3",
          o.rope_scaling);
  }
  need(o.dim >= 2 && o.dim <= 65536, "dim", o.dim);
  need(o.layers >= 1 && o.layers <= 1024, "layers", o.layers);
  need(o.heads >= 1 && (o.head_dim > 0 || o.dim % o.heads == 0), "heads (must divide dim)", o.heads);
  need(o.kv_heads >= 1 && o.heads % o.kv_heads == 0, "kv-heads (must divide heads)", o.kv_heads);
  const std::int64_t head_dim = o.head_dim > 0 ? o.head_dim : o.dim / o.heads;
  need(head_dim % 2 == 0 && head_dim <= 1024, "head dim (must be even, <= 1024)", head_dim);
  need(o.ffn >= 1 && o.ffn <= 1 << 20, "ffn", o.ffn);
  need(o.vocab >= 259 && o.vocab <= 1 << 21, "vocab (>= 259)", o.vocab);
  need(o.context >= 8 && o.context <= 1 << 24, "context", o.context);
  need(o.sliding_window >= 0, "sliding window", o.sliding_window);
  if (!(o.rope_scaling_factor >= 1.0f) || !(o.final_logit_softcap >= 0.0f)) {
    raise(ErrorCode::kInvalidArgument, "make-model: rope scaling factor must be >= 1 and the soft-cap >= 0");
  }
}

// llama3 frequency scaling as per-pair divisors (what llama.cpp's converter stores in
// rope_freqs.weight): keep short wavelengths, divide long ones by factor, blend in between.
std::vector<float> llama3_rope_factors(std::int64_t rot_dims, double base, double factor, double original_context) {
  constexpr double kLowFreqFactor = 1.0, kHighFreqFactor = 4.0;
  std::vector<float> f(static_cast<std::size_t>(rot_dims / 2));
  for (std::size_t j = 0; j < f.size(); ++j) {
    const double wavelength = 2.0 * 3.14159265358979323846 / std::pow(base, -2.0 * static_cast<double>(j) / static_cast<double>(rot_dims));
    if (wavelength < original_context / kHighFreqFactor) {
      f[j] = 1.0f;
    } else if (wavelength > original_context / kLowFreqFactor) {
      f[j] = static_cast<float>(factor);
    } else {
      const double smooth = (original_context / wavelength - kLowFreqFactor) / (kHighFreqFactor - kLowFreqFactor);
      f[j] = static_cast<float>(1.0 / ((1.0 - smooth) / factor + smooth));
    }
  }
  return f;
}

}  // namespace

bool k_mix_uses_more_bits(std::int64_t layer, std::int64_t layers) noexcept {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

bool set_weight_type(RandomModelOptions& o, std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "q4_k_m" || lower == "q5_k_m") {
    o.type = lower == "q4_k_m" ? DType::kQ4_K : DType::kQ5_K;
    o.sensitive_type = DType::kQ6_K;
    o.fp8_scaling = Fp8Scaling::kSearchedBlock;
    return true;
  }
  if (lower == "fp8-channel" || lower == "fp8-block") {
    o.type = DType::kFP8_E4M3;
    o.sensitive_type.reset();
    o.fp8_scaling = lower == "fp8-channel" ? Fp8Scaling::kPerChannel : Fp8Scaling::kBlock128;
    return true;
  }
  std::optional<DType> type = dtype_from_name(name);
  if (!type) type = weight_format_alias(lower);  // the --weights spellings: fp8, q4g128, q8, q4
  if (!type) return false;
  o.type = *type;
  o.sensitive_type.reset();
  o.fp8_scaling = Fp8Scaling::kSearchedBlock;
  return true;
}

std::string weight_type_name(const RandomModelOptions& o) {
  if (o.type == DType::kFP8_E4M3 && o.fp8_scaling == Fp8Scaling::kPerChannel) {
    return fmt::format("{} per channel", name(o.type));
  }
  if (o.type == DType::kFP8_E4M3 && o.fp8_scaling == Fp8Scaling::kBlock128) {
    return fmt::format("{} per 128x128 block", name(o.type));
  }
  if (!o.sensitive_type) return std::string(name(o.type));
  return fmt::format("{}_m", name(o.type));
}

RandomModelOptions benchmark_model_options(DType type) {
  RandomModelOptions o;
  o.dim = 1024;
  o.layers = 24;
  o.heads = 16;
  o.kv_heads = 8;
  o.ffn = 2816;
  o.vocab = 32000;
  o.context = 4096;
  o.type = type;
  o.name = "sitsrt-bench-0.35b";
  return o;
}

std::int64_t random_model_parameters(const RandomModelOptions& o) noexcept {
  const std::int64_t head_dim = o.head_dim > 0 ? o.head_dim : o.dim / o.heads;
  const std::int64_t q_width = o.heads * head_dim, kv_width = o.kv_heads * head_dim;
  std::int64_t per_layer = 2 * o.dim + 2 * o.dim * q_width + 2 * o.dim * kv_width + 3 * o.dim * o.ffn;
  if (o.architecture == "qwen2") per_layer += q_width + 2 * kv_width;
  if (o.architecture == "qwen3" || o.architecture == "gemma3") per_layer += 2 * head_dim;
  if (o.architecture == "gemma3") per_layer += 2 * o.dim;
  return o.vocab * o.dim * (o.tied_embeddings ? 1 : 2) + o.layers * per_layer + o.dim;
}

void write_random_model(const RandomModelOptions& o, const std::string& path,
                        const std::function<void(std::size_t, std::size_t)>& progress,
                        const OutputFileOptions& output) {
  validate(o);
  const bool explicit_head_dim = o.head_dim > 0;
  const std::int64_t head_dim = explicit_head_dim ? o.head_dim : o.dim / o.heads;
  const std::int64_t q_width = o.heads * head_dim;
  const std::int64_t kv_width = o.kv_heads * head_dim;
  const bool mistral = o.architecture == "mistral", gemma3 = o.architecture == "gemma3";
  const bool qwen2 = o.architecture == "qwen2", qk_norm = o.architecture == "qwen3" || gemma3;
  const std::string arch = mistral ? "llama" : o.architecture;
  const auto key = [&](std::string_view k) { return fmt::format("{}.{}", arch, k); };
  const auto u32 = [](std::int64_t v) { return gguf::Value::u32(static_cast<std::uint32_t>(v)); };
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::string(arch));
  w.set("general.name", gguf::Value::string(o.name));
  w.set("general.description", gguf::Value::string(
      fmt::format("random weights (seed {}) written by sitsrt make-model --arch {}; not a trained model", o.seed,
                  o.architecture)));
  w.set(key("context_length"), u32(o.context));
  w.set(key("embedding_length"), u32(o.dim));
  w.set(key("block_count"), u32(o.layers));
  w.set(key("feed_forward_length"), u32(o.ffn));
  w.set(key("attention.head_count"), u32(o.heads));
  w.set(key("attention.head_count_kv"), u32(o.kv_heads));
  if (explicit_head_dim || qk_norm) {
    w.set(key("attention.key_length"), u32(head_dim));
    w.set(key("attention.value_length"), u32(head_dim));
  }
  w.set(key("rope.dimension_count"), u32(head_dim));
  w.set(key("rope.freq_base"), gguf::Value::f32(o.rope_freq_base));
  w.set(key("attention.layer_norm_rms_epsilon"), gguf::Value::f32(gemma3 || qwen2 ? 1e-6f : 1e-5f));
  if (mistral || gemma3) {
    w.set(key("attention.sliding_window"), u32(o.sliding_window > 0 ? o.sliding_window : (mistral ? 4096 : 512)));
  }
  const std::int64_t original_context =
      o.rope_original_context > 0 ? o.rope_original_context
                                  : std::max<std::int64_t>(1, static_cast<std::int64_t>(static_cast<float>(o.context) / o.rope_scaling_factor));
  if (o.rope_scaling == "linear" || o.rope_scaling == "yarn") {
    w.set(key("rope.scaling.type"), gguf::Value::string(o.rope_scaling));
    w.set(key("rope.scaling.factor"), gguf::Value::f32(o.rope_scaling_factor));
    if (o.rope_scaling == "yarn") w.set(key("rope.scaling.original_context_length"), u32(original_context));
  }
  if (o.final_logit_softcap > 0.0f) w.set(key("final_logit_softcapping"), gguf::Value::f32(o.final_logit_softcap));
  GeneratedVocab vocab = make_vocab(o.vocab);
  w.set("tokenizer.ggml.model", gguf::Value::string("llama"));
  w.set("tokenizer.ggml.tokens", gguf::Value::array(gguf::ValueType::kString, std::move(vocab.tokens)));
  w.set("tokenizer.ggml.scores", gguf::Value::array(gguf::ValueType::kF32, std::move(vocab.scores)));
  w.set("tokenizer.ggml.token_type", gguf::Value::array(gguf::ValueType::kI32, std::move(vocab.types)));
  w.set("tokenizer.ggml.unknown_token_id", gguf::Value::u32(0));
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(1));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(2));
  w.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(true));

  auto pool = std::make_shared<ThreadPool>(o.threads);
  const std::uint64_t seed = o.seed;
  // A 2-D tensor [cols, rows] with uniform values of std ~ 1/sqrt(cols) (unit-variance outputs),
  // generated row by row from a per-row seed so the bytes do not depend on the thread count.
  const auto matrix = [&](const std::string& name, std::int64_t cols, std::int64_t rows, float scale,
                          bool sensitive = false) {
    const DType wanted = sensitive && o.sensitive_type ? *o.sensitive_type : o.type;
    const DType type = fits_blocks(wanted, cols) ? wanted : DType::kF16;
    const std::size_t row_size = row_bytes(type, cols);
    const Fp8Scaling fp8_scaling = type == DType::kFP8_E4M3 ? o.fp8_scaling : Fp8Scaling::kSearchedBlock;
    w.add_tensor(name, {cols, rows}, type, [=](std::span<std::byte> out) {
      const std::uint64_t base = mix(seed ^ hash_name(name));
      // Rows in bands of 128 for 128 x 128 blocks (each row's values depend on its index only).
      const std::int64_t band = fp8_scaling == Fp8Scaling::kBlock128 ? 128 : 1;
      pool->run([&](int t, int n) {
        std::vector<float> values(static_cast<std::size_t>(cols * band));
        const Range range = split_range((rows + band - 1) / band, t, n);
        for (std::int64_t b = range.begin; b < range.end; ++b) {
          const std::int64_t first = b * band, count = std::min(band, rows - first);
          for (std::int64_t i = 0; i < count; ++i) {
            std::uint64_t state = mix(base + static_cast<std::uint64_t>(first + i));
            for (std::int64_t c = 0; c < cols; ++c) {
              state = mix(state);
              values[static_cast<std::size_t>(i * cols + c)] =
                  scale * (static_cast<float>(state >> 40) * (2.0f / 16777216.0f) - 1.0f);
            }
          }
          quantize_rows(type, fp8_scaling, values.data(), out.data() + static_cast<std::size_t>(first) * row_size,
                        count, cols);
        }
      });
    });
  };
  // A vector of n values, uniform in center +- spread (norm weights around 1, biases around 0).
  const auto vector = [&](const std::string& name, std::int64_t n, float center, float spread) {
    w.add_tensor(name, {n}, DType::kF32, [=](std::span<std::byte> out) {
      std::uint64_t state = mix(seed ^ hash_name(name));
      auto* f = reinterpret_cast<float*>(out.data());
      for (std::int64_t i = 0; i < n; ++i) {
        state = mix(state);
        f[i] = center + spread * (static_cast<float>(state >> 40) * (2.0f / 16777216.0f) - 1.0f);
      }
    });
  };
  const auto norm = [&](const std::string& name) { vector(name, o.dim, 1.0f, 0.1f); };
  const float sqrt3 = std::sqrt(3.0f);  // uniform(-a, a) has std a / sqrt(3)
  const auto inv_sqrt = [&](std::int64_t n) { return sqrt3 / std::sqrt(static_cast<float>(n)); };
  const float residual_depth = std::sqrt(2.0f * static_cast<float>(o.layers));
  matrix("token_embd.weight", o.dim, o.vocab, sqrt3);
  if (o.rope_scaling == "llama3") {
    const std::vector<float> factors =
        llama3_rope_factors(head_dim, o.rope_freq_base, o.rope_scaling_factor, static_cast<double>(original_context));
    w.add_tensor("rope_freqs.weight", {head_dim / 2}, DType::kF32, [factors](std::span<std::byte> out) {
      std::memcpy(out.data(), factors.data(), factors.size() * sizeof(float));
    });
  }
  for (std::int64_t l = 0; l < o.layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    norm(p + "attn_norm.weight");
    matrix(p + "attn_q.weight", o.dim, q_width, inv_sqrt(o.dim));
    matrix(p + "attn_k.weight", o.dim, kv_width, inv_sqrt(o.dim));
    const bool more_bits = k_mix_uses_more_bits(l, o.layers);  // *_K_M: attn_v and ffn_down get sensitive_type
    matrix(p + "attn_v.weight", o.dim, kv_width, inv_sqrt(o.dim), more_bits);
    if (qwen2) {
      vector(p + "attn_q.bias", q_width, 0.0f, 0.5f);
      vector(p + "attn_k.bias", kv_width, 0.0f, 0.5f);
      vector(p + "attn_v.bias", kv_width, 0.0f, 0.5f);
    }
    if (qk_norm) {
      vector(p + "attn_q_norm.weight", head_dim, 1.0f, 0.1f);
      vector(p + "attn_k_norm.weight", head_dim, 1.0f, 0.1f);
    }
    matrix(p + "attn_output.weight", q_width, o.dim, inv_sqrt(q_width) / residual_depth);
    if (gemma3) norm(p + "post_attention_norm.weight");
    norm(p + "ffn_norm.weight");
    matrix(p + "ffn_gate.weight", o.dim, o.ffn, inv_sqrt(o.dim));
    matrix(p + "ffn_up.weight", o.dim, o.ffn, inv_sqrt(o.dim));
    matrix(p + "ffn_down.weight", o.ffn, o.dim, inv_sqrt(o.ffn) / residual_depth, more_bits);
    if (gemma3) norm(p + "post_ffw_norm.weight");
  }
  norm("output_norm.weight");
  if (!o.tied_embeddings) matrix("output.weight", o.dim, o.vocab, 2.0f * inv_sqrt(o.dim), true);
  w.write(path, progress, output);
}

}  // namespace sitsrt
