// Hugging Face checkpoints: config.json -> ModelSpec (every family, and strict errors naming
// config.json and the key), HF <-> GGUF tensor names, and the exact unpacking of FP8, AWQ and
// GPTQ weights against hand-computed words and an independent packer written from the
// AutoAWQ / AutoGPTQ packing loops.
#include "core/half.hpp"
#include "core/quant_blocks.hpp"
#include "model/hf_config.hpp"
#include "model/hf_names.hpp"
#include "model/hf_quant.hpp"
#include "model/tensor_catalog.hpp"
#include "support/random.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <functional>

namespace {

using nlohmann::json;
using sitsrt::ErrorCode;
using sitsrt::HfConfig;
using sitsrt::parse_hf_config;

json llama_config() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"hidden_size", 64},
          {"intermediate_size", 96},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"vocab_size", 300},
          {"rms_norm_eps", 1e-5},
          {"max_position_embeddings", 256},
          {"torch_dtype", "bfloat16"}};
}

HfConfig parse(const json& config) {
  return parse_hf_config(config.dump(), "dir/config.json");
}

void require_error(const json& config, ErrorCode code, const std::string& substring) {
  try {
    (void)parse(config);
    FAIL("parsed without an error");
  } catch (const sitsrt::Error& e) {
    INFO(e.what());
    CHECK(e.code() == code);
    CHECK(std::string(e.what()).find("dir/config.json") == 0);
    CHECK(std::string(e.what()).find(substring) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("config.json of each family fills the spec", "[model][hf]") {
  SECTION("llama with llama3 rope scaling") {
    json c = llama_config();
    c["rope_theta"] = 500000.0;
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
    const HfConfig h = parse(c);
    CHECK(h.spec.architecture == "llama");
    CHECK(h.spec.n_embd == 64);
    CHECK(h.spec.head_dim == 16);
    CHECK(h.spec.n_head_kv == 2);
    CHECK(h.spec.rope_neox);  // HF q/k rotate halves: no permutation, neox rope
    CHECK(h.spec.rope_scaling.type == sitsrt::RopeScalingType::kLlama3);
    CHECK(h.spec.rope_scaling.original_context == 8192);
    CHECK(h.spec.rope_freq_base == 500000.0f);
    CHECK_FALSE(h.spec.tied_output);
    CHECK(h.torch_dtype == "bfloat16");
  }
  SECTION("mistral: sliding window on every layer, null turns it off, absent is the 4096 default") {
    json c = llama_config();
    c["architectures"] = {"MistralForCausalLM"};
    c["sliding_window"] = 8;
    HfConfig h = parse(c);
    CHECK(h.spec.sliding_window == 8);
    CHECK(h.spec.layer_is_windowed(0));
    CHECK(h.spec.layer_is_windowed(1));
    c["sliding_window"] = nullptr;
    CHECK(parse(c).spec.sliding_window == 0);
    c.erase("sliding_window");
    CHECK(parse(c).spec.sliding_window == 4096);
  }
  SECTION("qwen2 with yarn and an explicit attention factor") {
    json c = llama_config();
    c["architectures"] = {"Qwen2ForCausalLM"};
    c["rope_scaling"] = {
        {"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}, {"attention_factor", 1.5}};
    c["tie_word_embeddings"] = true;
    const HfConfig h = parse(c);
    CHECK(h.spec.qkv_bias);
    CHECK(h.spec.tied_output);
    CHECK(h.spec.rope_scaling.type == sitsrt::RopeScalingType::kYarn);
    CHECK(h.spec.rope_freq_scale == Approx(0.25f));
    CHECK(h.spec.rope_scaling.yarn_attn_factor * (0.1 * std::log(4.0) + 1.0) == Approx(1.5));
  }
  SECTION("qwen3 head_dim") {
    json c = llama_config();
    c["architectures"] = {"Qwen3ForCausalLM"};
    c["head_dim"] = 32;
    const HfConfig h = parse(c);
    CHECK(h.spec.head_dim == 32);
    CHECK(h.spec.qk_norm);
    CHECK(h.spec.attn_scale == Approx(1.0 / std::sqrt(32.0)));
  }
  SECTION("gemma3 multimodal: text_config, layer_types, query_pre_attn_scalar, soft-cap, local base") {
    json text = llama_config();
    text.erase("architectures");
    text.erase("vocab_size");
    text["num_hidden_layers"] = 7;
    text["query_pre_attn_scalar"] = 144;
    text["final_logit_softcapping"] = 30.0;
    text["rope_local_base_freq"] = 10000.0;
    text["sliding_window"] = 512;
    text["layer_types"] = json::array();
    for (int l = 0; l < 7; ++l) text["layer_types"].push_back(l == 3 ? "full_attention" : "sliding_attention");
    const json c = {{"architectures", {"Gemma3ForConditionalGeneration"}}, {"text_config", text}};
    const HfConfig h = parse(c);
    CHECK(h.spec.architecture == "gemma3");
    CHECK(h.spec.n_vocab == 262208);  // Gemma3TextConfig's default
    CHECK(h.spec.head_dim == 256);    // its default head_dim
    CHECK(h.spec.attn_scale == Approx(1.0 / 12.0));
    CHECK(h.spec.final_logit_softcap == 30.0f);
    CHECK(h.spec.tied_output);
    CHECK(h.spec.post_norms);
    CHECK(h.spec.embedding_scale == Approx(8.0f));
    CHECK(h.spec.ffn_activation == sitsrt::FfnActivation::kGeluTanh);
    CHECK_FALSE(h.spec.layer_is_windowed(3));
    CHECK(h.spec.layer_is_windowed(5));
    CHECK(h.spec.layer_is_windowed(6));
  }
  SECTION("gemma3 text model: sliding_window_pattern period") {
    json c = llama_config();
    c["architectures"] = {"Gemma3ForCausalLM"};
    c["num_hidden_layers"] = 12;
    c["sliding_window_pattern"] = 6;
    const HfConfig h = parse(c);
    for (int l = 0; l < 12; ++l) CHECK(h.spec.layer_is_windowed(l) == ((l + 1) % 6 != 0));
    CHECK(h.spec.rope_local_freq_base == 10000.0f);
    CHECK(h.spec.rope_freq_base == 1000000.0f);
  }
  SECTION("quantization_config") {
    json c = llama_config();
    c["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}, {"desc_act", true}};
    const HfConfig h = parse(c);
    REQUIRE(h.quantization);
    CHECK(h.quantization->method == "gptq");
    CHECK(h.quantization->desc_act);
    CHECK(h.quantization->gptq_format == "gptq");
    c["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
    CHECK(parse(c).quantization->fp8_block == std::vector<std::int64_t>{128, 128});
  }
}

TEST_CASE("config.json errors name the file and the key", "[model][hf][malformed]") {
  json c = llama_config();
  c.erase("hidden_size");
  require_error(c, ErrorCode::kInvalidModel, "'hidden_size' is missing");
  c = llama_config();
  c["num_hidden_layers"] = "2";
  require_error(c, ErrorCode::kInvalidModel, "'num_hidden_layers' must be an integer");
  c = llama_config();
  c["vocab_size"] = -3;
  require_error(c, ErrorCode::kInvalidModel, "'vocab_size' = -3 is out of range");
  c = llama_config();
  c["rms_norm_eps"] = "tiny";
  require_error(c, ErrorCode::kInvalidModel, "'rms_norm_eps' must be a number");
  c = llama_config();
  c["rms_norm_eps"] = 1e-85;  // found by the fuzzer: positive as a double, 0 as the spec's float
  require_error(c, ErrorCode::kInvalidModel, "within float32 range");
  c = llama_config();
  c["rope_theta"] = 1e300;
  require_error(c, ErrorCode::kInvalidModel, "'rope_theta' = 1e+300 must be a finite number > 0 within float32");
  c = llama_config();
  c["hidden_size"] = 4;  // found by the fuzzer: 4 / 4 heads = a head of 1, which rope cannot pair
  require_error(c, ErrorCode::kInvalidModel, "'hidden_size' gives a head width of 1");
  c = llama_config();
  c["head_dim"] = 33;
  require_error(c, ErrorCode::kInvalidModel, "'head_dim' gives a head width of 33");
  c = llama_config();
  c["architectures"] = {"GPT2LMHeadModel"};
  require_error(c, ErrorCode::kUnsupported, "'GPT2LMHeadModel' is not supported");
  c = llama_config();
  c["architectures"] = "LlamaForCausalLM";
  require_error(c, ErrorCode::kInvalidModel, "'architectures' must be an array");
  c = llama_config();
  c["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 2.0}};
  require_error(c, ErrorCode::kUnsupported, "'rope_scaling.rope_type' = 'longrope'");
  c = llama_config();
  c["rope_scaling"] = {{"rope_type", "linear"}};
  require_error(c, ErrorCode::kInvalidModel, "'rope_scaling.factor' is missing");
  c = llama_config();
  c["tie_word_embeddings"] = 1;
  require_error(c, ErrorCode::kInvalidModel, "'tie_word_embeddings' must be true or false");
  c = llama_config();
  c["attention_bias"] = true;
  require_error(c, ErrorCode::kUnsupported, "'attention_bias'");
  c = llama_config();
  c["quantization_config"] = {{"quant_method", "awq"}, {"bits", 3}, {"group_size", 128}};
  require_error(c, ErrorCode::kUnsupported, "'quantization_config.bits' = 3");
  c = llama_config();
  c["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
  require_error(c, ErrorCode::kInvalidModel, "'quantization_config.group_size' is missing");
  c = {{"architectures", {"Gemma3ForConditionalGeneration"}}, {"text_config", 5}};
  require_error(c, ErrorCode::kInvalidModel, "'text_config' must be an object");
  json text = llama_config();
  text["hidden_activation"] = "relu";
  c = {{"architectures", {"Gemma3ForConditionalGeneration"}}, {"text_config", text}};
  require_error(c, ErrorCode::kUnsupported, "'text_config.hidden_activation' = 'relu'");
  try {
    (void)parse_hf_config("{\"architectures\": [", "dir/config.json");
    FAIL("parsed");
  } catch (const sitsrt::Error& e) {
    CHECK(std::string(e.what()).find("dir/config.json: not valid JSON") == 0);
  }
}

TEST_CASE("config.json: a repeated key is refused naming its path; the same key in two objects is not",
          "[model][hf]") {
  const std::string base = llama_config().dump();
  const auto with = [&](const std::string& extra) { return base.substr(0, base.size() - 1) + "," + extra + "}"; };
  const auto message = [](const std::string& text) {
    try {
      (void)parse_hf_config(text, "dir/config.json");
    } catch (const sitsrt::Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidModel);
      return std::string(e.what());
    }
    return std::string("(parsed)");
  };
  // Before: the last value silently won (a 128-wide model read from a file that also says 64).
  CHECK(message(with("\"hidden_size\": 128")) ==
        "dir/config.json: key 'hidden_size' appears twice (which value would apply is ambiguous)");
  CHECK_THAT(message(with("\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2, \"factor\": 4}")),
             Catch::Contains("key 'rope_scaling.factor' appears twice"));
  CHECK_THAT(message(with("\"extra\": [{\"a\": 1}, {\"b\": {\"c\": 1, \"c\": 2}}]")),
             Catch::Contains("key 'extra.[].b.c' appears twice"));
  // The same key in sibling objects, in arrays, and after a nested object is fine.
  CHECK(message(with("\"extra\": [{\"a\": 1}, {\"a\": 2}], \"more\": {\"a\": {\"a\": 1}}, \"a\": 3"))
            .find("appears twice") == std::string::npos);
}

TEST_CASE("HF and GGUF tensor names map both ways", "[model][hf]") {
  using sitsrt::gguf_name_for_hf;
  using sitsrt::hf_name_for_gguf;
  CHECK(gguf_name_for_hf("model.embed_tokens.weight", false) == "token_embd.weight");
  CHECK(gguf_name_for_hf("model.norm.weight", false) == "output_norm.weight");
  CHECK(gguf_name_for_hf("lm_head.weight", false) == "output.weight");
  CHECK(gguf_name_for_hf("model.layers.11.self_attn.q_proj.weight", false) == "blk.11.attn_q.weight");
  CHECK(gguf_name_for_hf("model.layers.0.self_attn.k_proj.bias", false) == "blk.0.attn_k.bias");
  CHECK(gguf_name_for_hf("model.layers.3.self_attn.o_proj.weight", false) == "blk.3.attn_output.weight");
  CHECK(gguf_name_for_hf("model.layers.3.mlp.down_proj.weight", false) == "blk.3.ffn_down.weight");
  CHECK(gguf_name_for_hf("model.layers.3.post_attention_layernorm.weight", false) == "blk.3.ffn_norm.weight");
  // Gemma 3: post_attention_layernorm is a post-norm; the FFN pre-norm is pre_feedforward_layernorm.
  CHECK(gguf_name_for_hf("model.layers.3.post_attention_layernorm.weight", true) == "blk.3.post_attention_norm.weight");
  CHECK(gguf_name_for_hf("model.layers.3.pre_feedforward_layernorm.weight", true) == "blk.3.ffn_norm.weight");
  CHECK(gguf_name_for_hf("model.layers.3.post_feedforward_layernorm.weight", true) == "blk.3.post_ffw_norm.weight");
  CHECK_FALSE(gguf_name_for_hf("model.layers.3.pre_feedforward_layernorm.weight", false));
  CHECK(gguf_name_for_hf("model.language_model.layers.2.self_attn.q_norm.weight", true) == "blk.2.attn_q_norm.weight");
  CHECK(gguf_name_for_hf("language_model.model.embed_tokens.weight", true) == "token_embd.weight");
  CHECK(gguf_name_for_hf("language_model.lm_head.weight", true) == "output.weight");
  // Not part of the text model, or not a plain layer number.
  CHECK_FALSE(gguf_name_for_hf("model.vision_tower.encoder.layers.0.mlp.fc1.weight", true));
  CHECK_FALSE(gguf_name_for_hf("model.layers.0.self_attn.rotary_emb.inv_freq", false));
  CHECK_FALSE(gguf_name_for_hf("model.layers.0.self_attn.q_proj.qweight", false));
  CHECK_FALSE(gguf_name_for_hf("model.layers.01.mlp.up_proj.weight", false));
  CHECK_FALSE(gguf_name_for_hf("model.layers.x.mlp.up_proj.weight", false));
  // Round trip of every block tensor name, for both families and every prefix.
  for (const bool gemma : {false, true}) {
    for (const std::string_view prefix : sitsrt::kHfTextPrefixes) {
      for (const char* g : {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "attn_q.bias",
                            "attn_q_norm.weight", "attn_k_norm.weight", "attn_norm.weight", "ffn_norm.weight",
                            "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}) {
        const std::string name = std::string("blk.7.") + g;
        const std::string hf = hf_name_for_gguf(name, gemma, prefix);
        INFO(name << " -> " << hf);
        CHECK(hf.starts_with(prefix));
        CHECK(gguf_name_for_hf(hf, gemma) == name);
      }
      for (const char* g : {"token_embd.weight", "output_norm.weight", "output.weight"})
        CHECK(gguf_name_for_hf(hf_name_for_gguf(g, gemma, prefix), gemma) == g);
    }
  }
}

namespace {

using sitsrt::hf::RawTensor;
using sitsrt::safetensors::ElementType;

template <typename T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

// Random 4-bit weights [rows][cols] with per-group zeros and fp16 scales, for packing.
struct Int4Reference {
  std::int64_t rows, cols, group;
  std::vector<std::uint8_t> levels, zeros;  // rows x cols, rows x groups
  std::vector<std::uint16_t> scales;        // groups x rows (the checkpoint's layout)
  Int4Reference(std::int64_t r, std::int64_t c, std::int64_t g, std::uint64_t seed) : rows(r), cols(c), group(g) {
    sitsrt::test::Rng rng(seed);
    const std::int64_t groups = c / g;
    for (std::int64_t i = 0; i < r * c; ++i) levels.push_back(static_cast<std::uint8_t>(rng.next() & 15));
    for (std::int64_t i = 0; i < r * groups; ++i) zeros.push_back(static_cast<std::uint8_t>(1 + (rng.next() % 15)));
    for (std::int64_t i = 0; i < r * groups; ++i) scales.push_back(sitsrt::fp32_to_fp16(rng.uniform(0.001f, 0.1f)));
  }
  float scale(std::int64_t row, std::int64_t g) const {
    return sitsrt::fp16_to_fp32(scales[static_cast<std::size_t>(g * rows + row)]);
  }
};

}  // namespace

TEST_CASE("AWQ GEMM unpacking: hand-computed word and random round trip", "[model][hf][quant]") {
  SECTION("one word 0x76543210: nibble k holds output feature kAwqOrder[k]") {
    const std::vector<std::uint32_t> qweight(8, 0x76543210u);  // [8 inputs, 1 word]
    const std::vector<std::uint32_t> qzeros = {0x88888888u};
    const std::vector<std::uint16_t> scales(8, sitsrt::fp32_to_fp16(0.5f));
    const auto w = sitsrt::hf::unpack_awq({"q", ElementType::kI32, {8, 1}, bytes_of(qweight)},
                                          {"z", ElementType::kI32, {1, 1}, bytes_of(qzeros)},
                                          {"s", ElementType::kF16, {1, 8}, bytes_of(scales)}, 8);
    // Features 0, 2, 4, 6, 1, 3, 5, 7 hold levels 0..7, so feature f has level:
    const int expected[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    for (int f = 0; f < 8; ++f) {
      for (int c = 0; c < 8; ++c) CHECK(w.levels[static_cast<std::size_t>(f * 8 + c)] == expected[f]);
      CHECK(w.zeros[static_cast<std::size_t>(f)] == 8);
      CHECK(w.value(f, 3) == 0.5f * static_cast<float>(expected[f] - 8));
    }
  }
  SECTION("random weights packed as AutoAWQ packs them unpack exactly") {
    const Int4Reference ref(16, 256, 128, 11);
    const std::int64_t groups = 2;
    // AutoAWQ: qweight[:, col] |= intweight[:, col * 8 + order_map[i]] << (i * 4).
    std::vector<std::uint32_t> qweight(static_cast<std::size_t>(ref.cols * ref.rows / 8));
    for (std::int64_t c = 0; c < ref.cols; ++c)
      for (std::int64_t j = 0; j < ref.rows / 8; ++j)
        for (int i = 0; i < 8; ++i)
          qweight[static_cast<std::size_t>(c * ref.rows / 8 + j)] |=
              std::uint32_t{ref.levels[static_cast<std::size_t>((j * 8 + sitsrt::hf::kAwqOrder[i]) * ref.cols + c)]}
              << (4 * i);
    std::vector<std::uint32_t> qzeros(static_cast<std::size_t>(groups * ref.rows / 8));
    for (std::int64_t g = 0; g < groups; ++g)
      for (std::int64_t j = 0; j < ref.rows / 8; ++j)
        for (int i = 0; i < 8; ++i)
          qzeros[static_cast<std::size_t>(g * ref.rows / 8 + j)] |=
              std::uint32_t{ref.zeros[static_cast<std::size_t>((j * 8 + sitsrt::hf::kAwqOrder[i]) * groups + g)]}
              << (4 * i);
    const auto w = sitsrt::hf::unpack_awq({"q", ElementType::kI32, {ref.cols, ref.rows / 8}, bytes_of(qweight)},
                                          {"z", ElementType::kI32, {groups, ref.rows / 8}, bytes_of(qzeros)},
                                          {"s", ElementType::kF16, {groups, ref.rows}, bytes_of(ref.scales)}, 128);
    CHECK(w.levels == ref.levels);
    CHECK(w.zeros == ref.zeros);
    for (std::int64_t r = 0; r < ref.rows; ++r)
      for (std::int64_t c = 0; c < ref.cols; c += 17)
        CHECK(w.value(r, c) ==
              ref.scale(r, c / 128) * static_cast<float>(ref.levels[static_cast<std::size_t>(r * ref.cols + c)] -
                                                         ref.zeros[static_cast<std::size_t>(r * groups + c / 128)]));
  }
  SECTION("mis-shaped companions are named") {
    const std::vector<std::uint32_t> qweight(8, 0u), qzeros(2, 0u);
    const std::vector<std::uint16_t> scales(8, 0);
    CHECK_THROWS_WITH(sitsrt::hf::unpack_awq({"layer.qweight", ElementType::kI32, {8, 1}, bytes_of(qweight)},
                                             {"layer.qzeros", ElementType::kI32, {2, 1}, bytes_of(qzeros)},
                                             {"layer.scales", ElementType::kF16, {1, 8}, bytes_of(scales)}, 8),
                      Catch::Contains("layer.qzeros") && Catch::Contains("expected I32 [1, 1]"));
  }
}

TEST_CASE("GPTQ unpacking: hand-computed word, zero offset, act-order g_idx", "[model][hf][quant]") {
  SECTION("one word per output: nibble k holds input k; v1 zeros are stored minus one") {
    const std::vector<std::uint32_t> qweight(8, 0x76543210u);  // [1 word of 8 inputs, 8 outputs]
    const std::vector<std::uint32_t> qzeros = {0x77777777u};   // sym: stored 7 = zero 8
    const std::vector<std::uint16_t> scales(8, sitsrt::fp32_to_fp16(0.25f));
    const RawTensor none{};
    const auto w = sitsrt::hf::unpack_gptq({"q", ElementType::kI32, {1, 8}, bytes_of(qweight)},
                                           {"z", ElementType::kI32, {1, 1}, bytes_of(qzeros)},
                                           {"s", ElementType::kF16, {1, 8}, bytes_of(scales)}, none, 8, true);
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c) {
        CHECK(w.levels[static_cast<std::size_t>(r * 8 + c)] == c);
        CHECK(w.value(r, c) == 0.25f * static_cast<float>(c - 8));
      }
    const auto v2 = sitsrt::hf::unpack_gptq({"q", ElementType::kI32, {1, 8}, bytes_of(qweight)},
                                            {"z", ElementType::kI32, {1, 1}, bytes_of(qzeros)},
                                            {"s", ElementType::kF16, {1, 8}, bytes_of(scales)}, none, 8, false);
    CHECK(v2.zeros[0] == 7);
  }
  SECTION("random act-order weights packed as AutoGPTQ packs them unpack exactly") {
    const Int4Reference ref(16, 256, 128, 12);
    const std::int64_t groups = 2;
    // AutoGPTQ: qweight[row, :] |= intweight[row * 8 + j, :] << (4 * j) over input rows.
    std::vector<std::uint32_t> qweight(static_cast<std::size_t>(ref.cols / 8 * ref.rows));
    for (std::int64_t i = 0; i < ref.cols / 8; ++i)
      for (std::int64_t r = 0; r < ref.rows; ++r)
        for (int j = 0; j < 8; ++j)
          qweight[static_cast<std::size_t>(i * ref.rows + r)] |=
              std::uint32_t{ref.levels[static_cast<std::size_t>(r * ref.cols + i * 8 + j)]} << (4 * j);
    std::vector<std::uint32_t> qzeros(static_cast<std::size_t>(groups * ref.rows / 8));
    for (std::int64_t g = 0; g < groups; ++g)
      for (std::int64_t j = 0; j < ref.rows / 8; ++j)
        for (int k = 0; k < 8; ++k)
          qzeros[static_cast<std::size_t>(g * ref.rows / 8 + j)] |=
              std::uint32_t(ref.zeros[static_cast<std::size_t>((j * 8 + k) * groups + g)] - 1u) << (4 * k);
    std::vector<std::int32_t> g_idx(static_cast<std::size_t>(ref.cols));
    sitsrt::test::Rng rng(5);
    for (auto& g : g_idx) g = static_cast<std::int32_t>(rng.next() % 2);  // act-order: groups interleave
    const auto w = sitsrt::hf::unpack_gptq({"q", ElementType::kI32, {ref.cols / 8, ref.rows}, bytes_of(qweight)},
                                           {"z", ElementType::kI32, {groups, ref.rows / 8}, bytes_of(qzeros)},
                                           {"s", ElementType::kF16, {groups, ref.rows}, bytes_of(ref.scales)},
                                           {"g_idx", ElementType::kI32, {ref.cols}, bytes_of(g_idx)}, 128, true);
    CHECK(w.levels == ref.levels);
    CHECK(w.zeros == ref.zeros);
    REQUIRE(w.group_of_column.size() == static_cast<std::size_t>(ref.cols));
    for (std::int64_t r = 0; r < ref.rows; r += 3)
      for (std::int64_t c = 0; c < ref.cols; ++c) {
        const std::int32_t g = g_idx[static_cast<std::size_t>(c)];
        CHECK(w.value(r, c) ==
              ref.scale(r, g) * static_cast<float>(ref.levels[static_cast<std::size_t>(r * ref.cols + c)] -
                                                   ref.zeros[static_cast<std::size_t>(r * groups + g)]));
      }
    g_idx[9] = 2;
    CHECK_THROWS_WITH(sitsrt::hf::unpack_gptq({"q", ElementType::kI32, {ref.cols / 8, ref.rows}, bytes_of(qweight)},
                                              {"z", ElementType::kI32, {groups, ref.rows / 8}, bytes_of(qzeros)},
                                              {"s", ElementType::kF16, {groups, ref.rows}, bytes_of(ref.scales)},
                                              {"g_idx", ElementType::kI32, {ref.cols}, bytes_of(g_idx)}, 128, true),
                      Catch::Contains("g_idx[9] = 2"));
  }
}

TEST_CASE("FP8 E4M3 decoding and scale layouts", "[model][hf][quant]") {
  using sitsrt::hf::e4m3_to_float;
  CHECK(e4m3_to_float(0x00) == 0.0f);
  CHECK(e4m3_to_float(0x38) == 1.0f);  // exponent 7 = 2^0
  CHECK(e4m3_to_float(0xb8) == -1.0f);
  CHECK(e4m3_to_float(0x3c) == 1.5f);                  // mantissa 4/8
  CHECK(e4m3_to_float(0x7e) == 448.0f);                // largest finite
  CHECK(e4m3_to_float(0x08) == std::ldexp(1.0f, -6));  // smallest normal
  CHECK(e4m3_to_float(0x01) == std::ldexp(1.0f, -9));  // smallest subnormal
  CHECK(e4m3_to_float(0x07) == std::ldexp(7.0f, -9));
  CHECK(std::isnan(e4m3_to_float(0x7f)));
  CHECK(std::isnan(e4m3_to_float(0xff)));
  CHECK(e4m3_to_float(0x78) == 256.0f);  // exponent 15 is finite in e4m3fn

  std::vector<std::uint8_t> codes(4 * 6);
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>(0x30 + i);
  const RawTensor weight{"w", ElementType::kF8_E4M3, {4, 6}, bytes_of(codes)};
  const std::vector<float> per_tensor = {0.5f};
  auto w = sitsrt::hf::read_fp8(weight, {"s", ElementType::kF32, {}, bytes_of(per_tensor)}, {});
  CHECK(w.value(2, 3) == e4m3_to_float(0x30 + 15) * 0.5f);
  const std::vector<std::uint16_t> per_row = {sitsrt::fp32_to_bf16(1.0f), sitsrt::fp32_to_bf16(2.0f),
                                              sitsrt::fp32_to_bf16(4.0f), sitsrt::fp32_to_bf16(8.0f)};
  w = sitsrt::hf::read_fp8(weight, {"s", ElementType::kBF16, {4, 1}, bytes_of(per_row)}, {});
  CHECK(w.value(3, 1) == e4m3_to_float(0x30 + 19) * 8.0f);
  const std::vector<float> blocks = {1.0f, 2.0f, 3.0f, 4.0f};  // 2x2 blocks over [4, 6] with 2x4 block size
  const std::int64_t block[2] = {2, 4};
  w = sitsrt::hf::read_fp8(weight, {"s_inv", ElementType::kF32, {2, 2}, bytes_of(blocks)}, block);
  CHECK(w.value(0, 0) == e4m3_to_float(0x30) * 1.0f);
  CHECK(w.value(1, 5) == e4m3_to_float(0x30 + 11) * 2.0f);
  CHECK(w.value(3, 2) == e4m3_to_float(0x30 + 20) * 3.0f);
  CHECK(w.value(2, 4) == e4m3_to_float(0x30 + 16) * 4.0f);
  CHECK_THROWS_WITH(sitsrt::hf::read_fp8(weight, {"s_inv", ElementType::kF32, {2, 1}, bytes_of(per_row)}, block),
                    Catch::Contains("s_inv") && Catch::Contains("expected F32 [2, 2]"));
  CHECK_THROWS_WITH(sitsrt::hf::read_fp8(weight, {"s", ElementType::kF32, {3}, bytes_of(blocks)}, {}),
                    Catch::Contains("per-row [4]"));
}

namespace {

// Random unpacked INT4 weights [rows][cols] with per-group zeros (0..15) and fp16 scales.
sitsrt::hf::Int4GroupWeights random_int4(std::int64_t rows, std::int64_t cols, std::int64_t group, std::uint64_t seed) {
  sitsrt::test::Rng rng(seed);
  sitsrt::hf::Int4GroupWeights w;
  w.rows = rows;
  w.cols = cols;
  w.group_size = group;
  w.groups = (cols + group - 1) / group;
  for (std::int64_t i = 0; i < rows * cols; ++i) w.levels.push_back(static_cast<std::uint8_t>(rng.next() & 15));
  for (std::int64_t i = 0; i < rows * w.groups; ++i) {
    w.zeros.push_back(static_cast<std::uint8_t>(rng.next() % 16));
    w.scales.push_back(sitsrt::fp16_to_fp32(sitsrt::fp32_to_fp16(rng.uniform(-0.1f, 0.1f))));
  }
  return w;
}

// Decodes every row of `packed` (rows of `type` blocks) and requires value(r, c) bit for bit.
template <typename Weights>
void require_decodes_to(const std::vector<std::byte>& packed, sitsrt::DType type, const Weights& w) {
  const std::size_t row_bytes = sitsrt::row_bytes(type, w.cols);
  REQUIRE(packed.size() == row_bytes * static_cast<std::size_t>(w.rows));
  std::vector<float> row(static_cast<std::size_t>(w.cols));
  std::int64_t mismatches = 0;
  for (std::int64_t r = 0; r < w.rows; ++r) {
    sitsrt::dequantize_row(type, packed.data() + static_cast<std::size_t>(r) * row_bytes, row.data(), w.cols);
    for (std::int64_t c = 0; c < w.cols; ++c) mismatches += row[static_cast<std::size_t>(c)] != w.value(r, c);
  }
  CHECK(mismatches == 0);
}

void require_unsupported(const std::function<void()>& f, const std::string& substring) {
  try {
    f();
    FAIL("no error");
  } catch (const sitsrt::Error& e) {
    INFO(e.what());
    CHECK(e.code() == ErrorCode::kUnsupported);
    CHECK(std::string(e.what()).find(substring) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("INT4 groups repack into INT4 g128 blocks that decode exactly", "[model][hf][quant]") {
  using sitsrt::DType;
  using sitsrt::hf::pack_q4_g128;
  SECTION("contiguous groups: hand-checked first block, every element exact") {
    const auto w = random_int4(6, 384, 128, 21);
    const auto packed = pack_q4_g128(w, "t");
    sitsrt::BlockQ4_G128 first{};
    std::memcpy(&first, packed.data(), sizeof first);
    CHECK(sitsrt::fp16_to_fp32(first.d) == w.scales[0]);
    CHECK(first.zero == w.zeros[0]);
    CHECK(first.reserved == 0);
    CHECK(first.qs[0] == (w.levels[0] | (w.levels[16] << 4)));
    CHECK(first.qs[17] == (w.levels[33] | (w.levels[49] << 4)));  // sub-block 1, j = 1
    require_decodes_to(packed, DType::kQ4_G128, w);
  }
  SECTION("act-order whose g_idx gives each 128-column block one group is served exactly") {
    auto w = random_int4(5, 384, 128, 22);
    const std::int32_t order[3] = {2, 0, 1};
    for (std::int64_t c = 0; c < w.cols; ++c) w.group_of_column.push_back(order[c / 128]);
    require_decodes_to(pack_q4_g128(w, "t"), DType::kQ4_G128, w);
    w.group_of_column[200] = 2;  // column-level act-order: block 1 mixes groups 0 and 2
    require_unsupported([&] { (void)pack_q4_g128(w, "layer.qweight"); },
                        "'layer.qweight': act-order g_idx puts input features 128 and 200");
  }
  SECTION("GPTQ v1 zero point 16: exact as zero 15 with levels - 1, refused when a level is 0") {
    auto w = random_int4(4, 256, 128, 23);
    for (auto& l : w.levels) l = static_cast<std::uint8_t>(1 + l % 15);
    w.zeros[1 * w.groups + 1] = 16;  // row 1, group 1
    require_decodes_to(pack_q4_g128(w, "t"), DType::kQ4_G128, w);
    w.levels[1 * 256 + 130] = 0;
    require_unsupported([&] { (void)pack_q4_g128(w, "t"); }, "output 1 group 1 has zero point 16 and level 0");
  }
  SECTION("group sizes other than 128 and partial groups are refused, naming the tensor") {
    require_unsupported([&] { (void)pack_q4_g128(random_int4(8, 256, 64, 24), "a.qweight"); },
                        "'a.qweight': group_size 64 is not supported");
    require_unsupported([&] { (void)pack_q4_g128(random_int4(8, 200, 128, 25), "a.qweight"); },
                        "200 input features are not whole groups of 128");
  }
}

TEST_CASE("FP8 weights repack into FP8 E4M3 blocks of 64 that decode exactly", "[model][hf][quant]") {
  using sitsrt::hf::Fp8Weights;
  sitsrt::test::Rng rng(31);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(5 * 256));
  for (auto& c : codes) {
    c = static_cast<std::uint8_t>(rng.next() & 0xff);
    if ((c & 0x7f) == 0x7f) c = 0x3c;  // no NaN codes
  }
  Fp8Weights w;
  w.rows = 5;
  w.cols = 256;
  w.codes = codes;
  SECTION("per tensor") {
    w.scales = {rng.uniform(0.001f, 0.01f)};
    require_decodes_to(sitsrt::hf::pack_fp8_e4m3(w, "t"), sitsrt::DType::kFP8_E4M3, w);
  }
  SECTION("per row") {
    w.layout = Fp8Weights::Scales::kPerRow;
    for (int r = 0; r < 5; ++r) w.scales.push_back(rng.uniform(0.001f, 0.01f));
    require_decodes_to(sitsrt::hf::pack_fp8_e4m3(w, "t"), sitsrt::DType::kFP8_E4M3, w);
  }
  SECTION("128x128 blocks (partial last block row), and block columns that are not whole 64s") {
    w.layout = Fp8Weights::Scales::kBlock;
    w.block_rows = 128;
    w.block_cols = 128;
    w.scales = {rng.uniform(0.001f, 0.01f), rng.uniform(0.001f, 0.01f)};
    require_decodes_to(sitsrt::hf::pack_fp8_e4m3(w, "t"), sitsrt::DType::kFP8_E4M3, w);
    w.block_rows = 2;
    w.scales.clear();
    for (int i = 0; i < 3 * 2; ++i) w.scales.push_back(rng.uniform(0.001f, 0.01f));
    require_decodes_to(sitsrt::hf::pack_fp8_e4m3(w, "t"), sitsrt::DType::kFP8_E4M3, w);
    w.block_cols = 96;
    require_unsupported([&] { (void)sitsrt::hf::pack_fp8_e4m3(w, "t"); }, "columns 96 are not a multiple of 64");
  }
  SECTION("widths that are not whole blocks are refused; NaN codes are invalid") {
    w.scales = {1.0f};
    w.cols = 128;
    w.rows = 10;  // the same codes viewed as [10, 128]
    codes[3 * 128 + 7] = 0xff;
    try {
      (void)sitsrt::hf::pack_fp8_e4m3(w, "f.weight");
      FAIL("no error");
    } catch (const sitsrt::Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidModel);
      CHECK_THAT(e.what(), Catch::Contains("'f.weight': element [3, 7] is NaN"));
    }
    w.cols = 160;
    w.rows = 8;
    require_unsupported([&] { (void)sitsrt::hf::pack_fp8_e4m3(w, "f.weight"); },
                        "160 input features are not whole FP8 E4M3 blocks of 64");
  }
}

TEST_CASE("TensorCatalog checks sizes and duplicates and names the checkpoint's tensor", "[model][hf]") {
  sitsrt::TensorCatalog catalog("dir");
  const std::vector<float> values = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  const auto bytes = std::as_bytes(std::span<const float>(values));
  catalog.add(
      {"blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", sitsrt::DType::kF32, {3, 2}, 24, bytes});
  const sitsrt::CatalogTensor* t = catalog.find("blk.0.attn_q.weight");
  REQUIRE(t != nullptr);
  CHECK(t->data.data() == bytes.data());  // a view, not a copy
  CHECK(t->elements() == 6);
  CHECK(catalog.describe("blk.0.attn_q.weight") == "'model.layers.0.self_attn.q_proj.weight' ('blk.0.attn_q.weight')");
  CHECK(catalog.describe("blk.0.attn_k.weight") == "'blk.0.attn_k.weight'");
  catalog.set_source_namer([](const std::string& name) { return "hf." + name; });
  CHECK(catalog.describe("blk.0.attn_k.weight") == "'hf.blk.0.attn_k.weight' ('blk.0.attn_k.weight')");
  CHECK_THROWS_WITH(catalog.add({"blk.0.attn_q.weight", "x", sitsrt::DType::kF32, {6}, 24, bytes}),
                    Catch::Contains("appears twice"));
  CHECK_THROWS_WITH(catalog.add({"blk.0.attn_v.weight", "model.v", sitsrt::DType::kF32, {4, 2}, 32, bytes}),
                    Catch::Contains("'model.v' has 24 bytes"));
  std::vector<std::byte> owned(8, std::byte{1});
  const std::byte* where = owned.data();
  catalog.add_owned({"n.weight", "n", sitsrt::DType::kF32, {2}, 8, {}}, std::move(owned));
  const sitsrt::TensorCatalog moved = std::move(catalog);  // owned bytes stay where the view points
  CHECK(moved.find("n.weight")->data.data() == where);
  CHECK(moved.tensors().size() == 2);
}
