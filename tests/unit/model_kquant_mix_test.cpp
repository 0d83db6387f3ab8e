// The *_K_M weight mixes of the random-model writer (make-model --type q4_k_m): llama.cpp's
// layer rule, the tensor types actually written, and the f16 fallback for rows that are not
// whole 256-element super-blocks.
#include "formats/gguf.hpp"
#include "model/random_model.hpp"
#include "support/model_files.hpp"

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <set>
#include <string>

using namespace sitsrt;

namespace {

std::set<std::int64_t> more_bits_layers(std::int64_t layers) {
  std::set<std::int64_t> picked;
  for (std::int64_t i = 0; i < layers; ++i) {
    if (k_mix_uses_more_bits(i, layers)) picked.insert(i);
  }
  return picked;
}

}  // namespace

TEST_CASE("k-mix layer rule matches llama.cpp's use_more_bits", "[model][kquant]") {
  // Worked by hand from i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2.
  CHECK(more_bits_layers(2) == std::set<std::int64_t>{1});
  CHECK(more_bits_layers(8) == std::set<std::int64_t>{0, 3, 6, 7});
  CHECK(more_bits_layers(24) == std::set<std::int64_t>{0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23});
  CHECK(more_bits_layers(32) ==
        std::set<std::int64_t>{0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31});
}

TEST_CASE("weight type names: DType names and the q4_k_m / q5_k_m mixes", "[model][kquant]") {
  RandomModelOptions o;
  REQUIRE(set_weight_type(o, "Q4_K_M"));
  CHECK(o.type == DType::kQ4_K);
  CHECK(o.sensitive_type == DType::kQ6_K);
  CHECK(weight_type_name(o) == "q4_k_m");
  REQUIRE(set_weight_type(o, "q5_k_m"));
  CHECK(o.type == DType::kQ5_K);
  CHECK(weight_type_name(o) == "q5_k_m");
  REQUIRE(set_weight_type(o, "q6_k"));
  CHECK(o.type == DType::kQ6_K);
  CHECK_FALSE(o.sensitive_type.has_value());
  CHECK(weight_type_name(o) == "q6_k");
  CHECK_FALSE(set_weight_type(o, "q4_k_s"));
}

TEST_CASE("a q4_k_m model has Q6_K exactly where the rule says and f16 where rows do not fit", "[model][kquant]") {
  RandomModelOptions o = test::tiny_options(DType::kQ8_0);
  o.dim = 256;
  o.ffn = 704;  // ffn_down rows (704 wide) are not whole super-blocks: f16
  o.layers = 8;
  REQUIRE(set_weight_type(o, "q4_k_m"));
  const std::string path = test::random_model(o, "mix-q4_k_m-8");
  const gguf::File file = gguf::File::open(path);
  const auto type_of = [&](const std::string& name) {
    const gguf::TensorInfo* t = file.find_tensor(name);
    REQUIRE(t != nullptr);
    return t->type;
  };
  CHECK(type_of("token_embd.weight") == DType::kQ4_K);
  CHECK(type_of("output.weight") == DType::kQ6_K);
  for (std::int64_t l = 0; l < o.layers; ++l) {
    CAPTURE(l);
    const std::string p = fmt::format("blk.{}.", l);
    const DType v = l == 0 || l == 3 || l == 6 || l == 7 ? DType::kQ6_K : DType::kQ4_K;
    CHECK(type_of(p + "attn_v.weight") == v);
    CHECK(type_of(p + "attn_q.weight") == DType::kQ4_K);
    CHECK(type_of(p + "attn_k.weight") == DType::kQ4_K);
    CHECK(type_of(p + "attn_output.weight") == DType::kQ4_K);
    CHECK(type_of(p + "ffn_gate.weight") == DType::kQ4_K);
    CHECK(type_of(p + "ffn_up.weight") == DType::kQ4_K);
    CHECK(type_of(p + "ffn_down.weight") == DType::kF16);
    CHECK(type_of(p + "attn_norm.weight") == DType::kF32);
  }
}
