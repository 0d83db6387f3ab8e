#include "model/random_model.hpp"

#include "core/check.hpp"
#include "core/quant_blocks.hpp"
#include "core/thread_pool.hpp"
#include "formats/gguf_writer.hpp"

#include <cctype>
#include <cmath>
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

void validate(const RandomModelOptions& o) {
  const auto need = [](bool ok, std::string_view field, std::int64_t value) {
    if (!ok) raise(ErrorCode::kInvalidArgument, "make-model: {} = {} is out of range", field, value);
  };
  need(o.dim >= 2 && o.dim <= 65536, "dim", o.dim);
  need(o.layers >= 1 && o.layers <= 1024, "layers", o.layers);
  need(o.heads >= 1 && o.dim % o.heads == 0, "heads (must divide dim)", o.heads);
  need(o.kv_heads >= 1 && o.heads % o.kv_heads == 0, "kv-heads (must divide heads)", o.kv_heads);
  need((o.dim / o.heads) % 2 == 0, "head dim (dim/heads, must be even)", o.dim / o.heads);
  need(o.ffn >= 1 && o.ffn <= 1 << 20, "ffn", o.ffn);
  need(o.vocab >= 259 && o.vocab <= 1 << 21, "vocab (>= 259)", o.vocab);
  need(o.context >= 8 && o.context <= 1 << 24, "context", o.context);
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
    return true;
  }
  const auto type = dtype_from_name(name);
  if (!type) return false;
  o.type = *type;
  o.sensitive_type.reset();
  return true;
}

std::string weight_type_name(const RandomModelOptions& o) {
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

std::int64_t random_llama_parameters(const RandomModelOptions& o) noexcept {
  const std::int64_t head_dim = o.dim / o.heads;
  const std::int64_t per_layer = 2 * o.dim + o.dim * o.dim * 2 + 2 * o.dim * o.kv_heads * head_dim + 3 * o.dim * o.ffn;
  return o.vocab * o.dim * (o.tied_embeddings ? 1 : 2) + o.layers * per_layer + o.dim;
}

void write_random_llama(const RandomModelOptions& o, const std::string& path,
                        const std::function<void(std::size_t, std::size_t)>& progress) {
  validate(o);
  const std::int64_t head_dim = o.dim / o.heads;
  const std::int64_t kv_width = o.kv_heads * head_dim;
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::string("llama"));
  w.set("general.name", gguf::Value::string(o.name));
  w.set("general.description", gguf::Value::string(
      fmt::format("random weights (seed {}) written by sitsrt make-model; not a trained model", o.seed)));
  w.set("llama.context_length", gguf::Value::u32(static_cast<std::uint32_t>(o.context)));
  w.set("llama.embedding_length", gguf::Value::u32(static_cast<std::uint32_t>(o.dim)));
  w.set("llama.block_count", gguf::Value::u32(static_cast<std::uint32_t>(o.layers)));
  w.set("llama.feed_forward_length", gguf::Value::u32(static_cast<std::uint32_t>(o.ffn)));
  w.set("llama.attention.head_count", gguf::Value::u32(static_cast<std::uint32_t>(o.heads)));
  w.set("llama.attention.head_count_kv", gguf::Value::u32(static_cast<std::uint32_t>(o.kv_heads)));
  w.set("llama.rope.dimension_count", gguf::Value::u32(static_cast<std::uint32_t>(head_dim)));
  w.set("llama.rope.freq_base", gguf::Value::f32(o.rope_freq_base));
  w.set("llama.attention.layer_norm_rms_epsilon", gguf::Value::f32(1e-5f));
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
    w.add_tensor(name, {cols, rows}, type, [=](std::span<std::byte> out) {
      const std::uint64_t base = mix(seed ^ hash_name(name));
      pool->run([&](int t, int n) {
        std::vector<float> row(static_cast<std::size_t>(cols));
        const Range range = split_range(rows, t, n);
        for (std::int64_t r = range.begin; r < range.end; ++r) {
          std::uint64_t state = mix(base + static_cast<std::uint64_t>(r));
          for (auto& v : row) {
            state = mix(state);
            v = scale * (static_cast<float>(state >> 40) * (2.0f / 16777216.0f) - 1.0f);
          }
          quantize_row(type, row.data(), out.data() + static_cast<std::size_t>(r) * row_size, cols);
        }
      });
    });
  };
  const auto norm = [&](const std::string& name) {
    const std::int64_t n = o.dim;
    w.add_tensor(name, {n}, DType::kF32, [=](std::span<std::byte> out) {
      std::uint64_t state = mix(seed ^ hash_name(name));
      auto* f = reinterpret_cast<float*>(out.data());
      for (std::int64_t i = 0; i < n; ++i) {
        state = mix(state);
        f[i] = 1.0f + 0.1f * (static_cast<float>(state >> 40) * (2.0f / 16777216.0f) - 1.0f);
      }
    });
  };
  const float sqrt3 = std::sqrt(3.0f);  // uniform(-a, a) has std a / sqrt(3)
  const auto inv_sqrt = [&](std::int64_t n) { return sqrt3 / std::sqrt(static_cast<float>(n)); };
  matrix("token_embd.weight", o.dim, o.vocab, sqrt3);
  for (std::int64_t l = 0; l < o.layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    norm(p + "attn_norm.weight");
    matrix(p + "attn_q.weight", o.dim, o.dim, inv_sqrt(o.dim));
    matrix(p + "attn_k.weight", o.dim, kv_width, inv_sqrt(o.dim));
    const bool more_bits = k_mix_uses_more_bits(l, o.layers);
    matrix(p + "attn_v.weight", o.dim, kv_width, inv_sqrt(o.dim), more_bits);
    matrix(p + "attn_output.weight", o.dim, o.dim, inv_sqrt(o.dim) / std::sqrt(2.0f * static_cast<float>(o.layers)));
    norm(p + "ffn_norm.weight");
    matrix(p + "ffn_gate.weight", o.dim, o.ffn, inv_sqrt(o.dim));
    matrix(p + "ffn_up.weight", o.dim, o.ffn, inv_sqrt(o.dim));
    matrix(p + "ffn_down.weight", o.ffn, o.dim, inv_sqrt(o.ffn) / std::sqrt(2.0f * static_cast<float>(o.layers)),
           more_bits);
  }
  norm("output_norm.weight");
  if (!o.tied_embeddings) matrix("output.weight", o.dim, o.vocab, 2.0f * inv_sqrt(o.dim), true);
  w.write(path, progress);
}

}  // namespace sitsrt
