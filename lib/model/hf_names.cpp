#include "model/hf_names.hpp"

#include <array>
#include <charconv>

namespace sitsrt {
namespace {

struct NamePair {
  std::string_view gguf;  // after "blk.N."
  std::string_view hf;    // after "layers.N."
};

constexpr std::array<NamePair, 13> kCommon = {{
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
}};
constexpr std::array<NamePair, 1> kLlamaNorms = {{{"ffn_norm.weight", "post_attention_layernorm.weight"}}};
constexpr std::array<NamePair, 3> kGemmaNorms = {{
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
}};

template <typename F>
std::string_view lookup(std::string_view key, bool gemma, F pick_from, F pick_to) {
  for (const NamePair& p : kCommon)
    if (pick_from(p) == key) return pick_to(p);
  if (gemma) {
    for (const NamePair& p : kGemmaNorms)
      if (pick_from(p) == key) return pick_to(p);
  } else {
    for (const NamePair& p : kLlamaNorms)
      if (pick_from(p) == key) return pick_to(p);
  }
  return {};
}

std::string_view gguf_of(const NamePair& p) {
  return p.gguf;
}
std::string_view hf_of(const NamePair& p) {
  return p.hf;
}

// "N.<rest>" -> (N, rest); nullopt unless N is a plain decimal number.
std::optional<std::pair<std::string_view, std::string_view>> split_layer(std::string_view s) {
  const std::size_t dot = s.find('.');
  if (dot == 0 || dot == std::string_view::npos) return std::nullopt;
  unsigned layer = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + dot, layer);
  if (ec != std::errc() || ptr != s.data() + dot || (dot > 1 && s[0] == '0')) return std::nullopt;
  return std::pair{s.substr(0, dot), s.substr(dot + 1)};
}

}  // namespace

std::optional<std::string> gguf_name_for_hf(std::string_view hf_name, bool gemma) {
  if (hf_name == "lm_head.weight" || hf_name == "language_model.lm_head.weight") return "output.weight";
  for (const std::string_view prefix : kHfTextPrefixes) {
    if (!hf_name.starts_with(prefix)) continue;
    const std::string_view rest = hf_name.substr(prefix.size());
    if (rest == "embed_tokens.weight") return "token_embd.weight";
    if (rest == "norm.weight") return "output_norm.weight";
    if (!rest.starts_with("layers.")) return std::nullopt;
    const auto parts = split_layer(rest.substr(7));
    if (!parts) return std::nullopt;
    const std::string_view g = lookup(parts->second, gemma, hf_of, gguf_of);
    if (g.empty()) return std::nullopt;
    return "blk." + std::string(parts->first) + "." + std::string(g);
  }
  return std::nullopt;
}

std::string hf_name_for_gguf(std::string_view gguf_name, bool gemma, std::string_view prefix) {
  if (gguf_name == "output.weight")
    return prefix == "language_model.model." ? "language_model.lm_head.weight" : "lm_head.weight";
  if (gguf_name == "token_embd.weight") return std::string(prefix) + "embed_tokens.weight";
  if (gguf_name == "output_norm.weight") return std::string(prefix) + "norm.weight";
  if (!gguf_name.starts_with("blk.")) return {};
  const auto parts = split_layer(gguf_name.substr(4));
  if (!parts) return {};
  const std::string_view h = lookup(parts->second, gemma, gguf_of, hf_of);
  if (h.empty()) return {};
  return std::string(prefix) + "layers." + std::string(parts->first) + "." + std::string(h);
}

}  // namespace sitsrt
