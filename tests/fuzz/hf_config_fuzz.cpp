// libFuzzer target: config.json -> ModelSpec. Any input is either accepted, giving a spec whose
// invariants the graph builders rely on, or refused with sitsrt::Error; never a crash, hang,
// other exception or out-of-range value.
#include "model/hf_config.hpp"

#include <sitsrt/error.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const sitsrt::HfConfig config = sitsrt::parse_hf_config(text, "fuzz/config.json");
    const sitsrt::ModelSpec& s = config.spec;
    if (s.n_embd < 1 || s.n_layer < 1 || s.n_head < 1 || s.n_head_kv < 1 || s.n_ff < 1 || s.n_vocab < 1)
      __builtin_trap();
    if (s.n_head % s.n_head_kv != 0 || s.head_dim < 2 || s.rope_dims != s.head_dim) __builtin_trap();
    if (!(s.rms_eps > 0.0f && s.rms_eps < 1.0f) || !(s.rope_freq_base > 1.0f) || !(s.attn_scale > 0.0f))
      __builtin_trap();
    if (s.windowed_layers.size() != static_cast<std::size_t>(s.n_layer)) __builtin_trap();
    if (s.rope_scaling.type != sitsrt::RopeScalingType::kNone && !(s.rope_scaling.factor > 0.0f)) __builtin_trap();
  } catch (const sitsrt::Error&) {
  }
  return 0;
}
