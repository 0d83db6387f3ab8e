// Decode fusions: which graph nodes fuse, the fused products against the unfused ops (bit for
// bit) and against a double-precision reference, and whole-model decode with and without them.
#include "backend/decode_fusion.hpp"
#include "core/quant_blocks.hpp"
#include "cpu/cpu_context.hpp"
#include "cpu/elementwise/elementwise.hpp"
#include "cpu/matmul/decode_kernel.hpp"
#include "cpu/matmul/matmul.hpp"
#include "cpu/matmul/matvec_group.hpp"
#include "model/model_graph.hpp"
#include "model/model_loader.hpp"
#include "support/model_files.hpp"
#include "support/random.hpp"
#include "support/sanitizer.hpp"

#include <sitsrt/engine.hpp>
#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

using namespace sitsrt;
using Catch::Matchers::Contains;

namespace {

struct Weights {
  DType type;
  std::int64_t rows, cols;
  std::vector<std::byte> bytes;
  std::vector<float> values;  // dequantized
  [[nodiscard]] cpu::WeightMatrix view() const {
    return {cpu::stored_layout(type), bytes.data(), rows, cols, row_bytes(type, cols)};
  }
};

Weights random_weights(DType type, std::int64_t rows, std::int64_t cols, test::Rng& rng) {
  Weights w{type, rows, cols, std::vector<std::byte>(row_bytes(type, cols) * static_cast<std::size_t>(rows)),
            std::vector<float>(static_cast<std::size_t>(rows * cols))};
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::vector<float> src = rng.normals(static_cast<std::size_t>(cols), std::exp2(rng.uniform(-3.0f, 2.0f)));
    std::byte* row = w.bytes.data() + static_cast<std::size_t>(r) * row_bytes(type, cols);
    quantize_row(type, src.data(), row, cols);
    dequantize_row(type, row, w.values.data() + r * cols, cols);
  }
  return w;
}

// sum_c W[r, c] x[c] in double.
std::vector<double> reference(const Weights& w, const std::vector<float>& x) {
  std::vector<double> y(static_cast<std::size_t>(w.rows));
  for (std::int64_t r = 0; r < w.rows; ++r) {
    double s = 0;
    for (std::int64_t c = 0; c < w.cols; ++c) s += double(w.values[static_cast<std::size_t>(r * w.cols + c)]) * x[c];
    y[static_cast<std::size_t>(r)] = s;
  }
  return y;
}

std::vector<float> unfused(cpu::CpuContext& ctx, const Weights& w, const std::vector<float>& x) {
  std::vector<float> y(static_cast<std::size_t>(w.rows));
  cpu::matmul(ctx, w.view(), x.data(), w.cols, 1, y.data(), w.rows);
  return y;
}

void reserve(cpu::CpuContext& ctx, std::initializer_list<const Weights*> ws) {
  std::size_t bytes = 0;
  for (const Weights* w : ws) bytes = std::max(bytes, cpu::matmul_shared_bytes(ctx, w->view(), 1));
  ctx.reserve_shared_bytes(bytes);
}

}  // namespace

TEST_CASE("fused decode products equal the unfused ops bit for bit and the double reference", "[fusion]") {
  const bool int8 = GENERATE(false, true);
  const int threads = GENERATE(1, 2, 3);
  if (test::kSanitized && threads == 2) return;  // support/sanitizer.hpp: 1 (inline) and 3 (split)
  // Mixed formats in one group, as a Q4_K_M file mixes Q4_K and Q6_K.
  const DType qk = GENERATE(DType::kQ8_0, DType::kQ4_K, DType::kF16);
  const DType v_type = qk == DType::kQ4_K ? DType::kQ6_K : qk;
  CAPTURE(int8, threads, name(qk));
  // gate/up rows not a multiple of 32 (the row grain is 16); down's columns whole Q6_K blocks.
  const std::int64_t dim = 512, kv = 256, ffn = 1408 - 16 * 3, down_cols = 1536;
  // Made once per format: Catch2 runs this setup again for every section and generated value, and
  // drawing the 2.7M weights each time was ~90% of the file's run time (more under ASan).
  struct Inputs {
    Weights q, k, v, gate, up, down;
    std::vector<float> x, h, residual;
  };
  static std::map<DType, Inputs> made;
  if (!made.contains(qk)) {
    test::Rng rng(static_cast<std::uint64_t>(31 + static_cast<int>(qk) * 7));
    Weights q = random_weights(qk, dim, dim, rng), k = random_weights(qk, kv, dim, rng),
            v = random_weights(v_type, kv, dim, rng), gate = random_weights(qk, ffn, dim, rng),
            up = random_weights(qk, ffn, dim, rng), down = random_weights(v_type, dim, down_cols, rng);
    std::vector<float> x = rng.normals(dim), h = rng.normals(static_cast<std::size_t>(down_cols)),
                       residual = rng.normals(dim);
    made.emplace(qk, Inputs{std::move(q), std::move(k), std::move(v), std::move(gate), std::move(up), std::move(down),
                            std::move(x), std::move(h), std::move(residual)});
  }
  const Inputs& in = made.at(qk);
  const Weights &q = in.q, &k = in.k, &v = in.v, &gate = in.gate, &up = in.up, &down = in.down;
  const std::vector<float>&x = in.x, &h = in.h, &residual = in.residual;
  cpu::CpuContext ctx(threads, cpu::detect_isa(), int8);
  reserve(ctx, {&q, &k, &v, &gate, &up, &down});

  SECTION("q, k, v in one region") {
    std::vector<float> yq(dim, -1.0f), yk(kv, -1.0f), yv(kv, -1.0f);
    const cpu::WeightMatrix wq = q.view(), wk = k.view(), wv = v.view();
    const cpu::MatvecTarget live[] = {{&wq, yq.data()}, {&wk, yk.data()}, {&wv, yv.data()}};
    cpu::matvec_group(ctx, live, x.data());
    CHECK(yq == unfused(ctx, q, x));
    CHECK(yk == unfused(ctx, k, x));
    CHECK(yv == unfused(ctx, v, x));
    // Against double: the int8 path rounds x to 8 bits per block (relative ~1/254 of the block max).
    const std::vector<double> ref = reference(v, x);
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, std::abs(ref[i] - yv[i]));
      scale = std::max(scale, std::abs(ref[i]));
    }
    CHECK(worst <= (int8 ? 2e-2 : 1e-4) * scale);
  }
  SECTION("gate, up and SwiGLU in one region") {
    std::vector<float> g(static_cast<std::size_t>(ffn)), u(static_cast<std::size_t>(ffn)),
        out(static_cast<std::size_t>(ffn));
    cpu::matvec_swiglu(ctx, gate.view(), up.view(), x.data(), g.data(), u.data(), out.data());
    const std::vector<float> g0 = unfused(ctx, gate, x), u0 = unfused(ctx, up, x);
    CHECK(g == g0);
    CHECK(u == u0);
    std::vector<float> act(static_cast<std::size_t>(ffn));
    cpu::swiglu(ctx, g0.data(), ffn, u0.data(), ffn, 1, ffn, act.data(), ffn);
    CHECK(out == act);
    for (std::size_t i = 0; i < act.size(); ++i) {  // silu(g) u in double, few-ulp exp
      const double gd = g0[i], want = gd / (1.0 + std::exp(-gd)) * u0[i];
      REQUIRE(std::abs(out[i] - want) <= 1e-5 * std::abs(want) + 1e-30);
    }
    // In place (out aliases the gate output), as the graph plans it.
    std::vector<float> g2(static_cast<std::size_t>(ffn)), u2(static_cast<std::size_t>(ffn));
    cpu::matvec_swiglu(ctx, gate.view(), up.view(), x.data(), g2.data(), u2.data(), g2.data());
    CHECK(g2 == act);
  }
  SECTION("gate, up and GeGLU in one region (Gemma)") {
    std::vector<float> g(static_cast<std::size_t>(ffn)), u(static_cast<std::size_t>(ffn));
    const std::vector<float> g0 = unfused(ctx, gate, x), u0 = unfused(ctx, up, x);
    std::vector<float> act(static_cast<std::size_t>(ffn));
    cpu::geglu_tanh(ctx, g0.data(), ffn, u0.data(), ffn, 1, ffn, act.data(), ffn);
    // In place (out aliases the gate output), as the graph plans it.
    cpu::matvec_geglu(ctx, gate.view(), up.view(), x.data(), g.data(), u.data(), g.data());
    CHECK(u == u0);
    CHECK(g == act);
    for (std::size_t i = 0; i < act.size(); ++i) {  // gelu_tanh(g) u in double
      const double gd = g0[i], inner = -1.5957691216057308 * (gd + 0.044715 * gd * gd * gd);
      const double want = gd * u0[i] / (1.0 + std::exp(inner));
      REQUIRE(std::abs(g[i] - want) <= 1e-5 * std::abs(want) + 1e-6 * std::abs(u0[i]) + 1e-30);
    }
  }
  SECTION("down projection and residual add in one region") {
    std::vector<float> y(dim), out = residual;
    cpu::matvec_add(ctx, down.view(), h.data(), y.data(), out.data(), out.data());  // in place
    const std::vector<float> y0 = unfused(ctx, down, h);
    CHECK(y == y0);
    for (std::size_t i = 0; i < y0.size(); ++i) REQUIRE(out[i] == residual[i] + y0[i]);
  }
}

TEST_CASE("decode rows are claimed in chunks, so a stalled thread holds up only its own chunk", "[fusion]") {
  cpu::CpuContext ctx(2, cpu::detect_isa(), true);
  const std::int64_t rows = 2816;  // the 0.35B model's ffn rows: 176 grain units
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(rows));
  std::atomic<int> bad_ranges{0}, chunks_total{0}, chunks_by_staller{0};
  std::atomic<std::thread::id> staller{};
  cpu::detail::for_each_decode_row_chunk(ctx.pool(), rows, [&](std::int64_t begin, std::int64_t end) {
    if (begin % cpu::detail::kMatvecGrain != 0 || end <= begin || end > rows) bad_ranges.fetch_add(1);
    for (std::int64_t i = begin; i < end; ++i) hits[static_cast<std::size_t>(i)].fetch_add(1);
    chunks_total.fetch_add(1);
    if (begin == 0) {  // the first chunk's thread stalls, as a descheduled thread would
      staller.store(std::this_thread::get_id());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (staller.load() == std::this_thread::get_id()) chunks_by_staller.fetch_add(1);
  });
  REQUIRE(bad_ranges.load() == 0);
  for (const auto& h : hits) REQUIRE(h.load() == 1);
  CHECK(chunks_total.load() >= 8);
  // With one fixed part per thread the staller would compute half of the rows; here the other
  // thread claims every chunk left while it sleeps.
  CHECK(chunks_by_staller.load() < chunks_total.load() / 2);
}

TEST_CASE("decode products do not depend on the thread count or on which thread runs a chunk", "[fusion]") {
  const bool int8 = GENERATE(false, true);
  CAPTURE(int8);
  test::Rng rng(int8 ? 91 : 92);
  const std::int64_t dim = 512, kv = 256 - 16, ffn = 1408 - 16 * 3, down_cols = 1536;
  const Weights q = random_weights(DType::kQ8_0, dim, dim, rng), k = random_weights(DType::kQ4_0, kv, dim, rng),
                gate = random_weights(DType::kQ4_K, ffn, dim, rng), up = random_weights(DType::kQ4_K, ffn, dim, rng),
                down = random_weights(DType::kQ8_0, dim, down_cols, rng);
  const std::vector<float> x = rng.normals(dim), h = rng.normals(static_cast<std::size_t>(down_cols)),
                           residual = rng.normals(dim);
  struct Outputs {
    std::vector<float> yq, yk, g, u, act, y, out;
    bool operator==(const Outputs&) const = default;
  };
  const auto run = [&](cpu::CpuContext& ctx) {
    Outputs o{std::vector<float>(dim), std::vector<float>(kv), std::vector<float>(ffn), std::vector<float>(ffn),
              std::vector<float>(ffn), std::vector<float>(dim), std::vector<float>(dim)};
    const cpu::WeightMatrix wq = q.view(), wk = k.view();
    const cpu::MatvecTarget targets[] = {{&wq, o.yq.data()}, {&wk, o.yk.data()}};
    cpu::matvec_group(ctx, targets, x.data());
    cpu::matvec_swiglu(ctx, gate.view(), up.view(), x.data(), o.g.data(), o.u.data(), o.act.data());
    cpu::matvec_add(ctx, down.view(), h.data(), o.y.data(), residual.data(), o.out.data());
    return o;
  };
  cpu::CpuContext one(1, cpu::detect_isa(), int8);
  reserve(one, {&q, &k, &gate, &up, &down});
  const Outputs want = run(one);
  // More threads than this machine's cores: the chunks go to whichever thread the OS runs.
  for (const int threads : {2, 3, 7}) {
    CAPTURE(threads);
    cpu::CpuContext ctx(threads, cpu::detect_isa(), int8);
    reserve(ctx, {&q, &k, &gate, &up, &down});
    for (int round = 0; round < 10; ++round) REQUIRE(run(ctx) == want);
  }
}

TEST_CASE("fused decode products reject mismatched weights", "[fusion]") {
  test::Rng rng(5);
  const Weights a = random_weights(DType::kQ8_0, 32, 64, rng), b = random_weights(DType::kQ8_0, 32, 96, rng),
                c = random_weights(DType::kQ8_0, 48, 64, rng);
  cpu::CpuContext ctx(2, cpu::detect_isa(), true);
  reserve(ctx, {&a, &b, &c});
  const std::vector<float> x = rng.normals(96);
  std::vector<float> y1(64), y2(64), y3(64);
  const cpu::WeightMatrix wa = a.view(), wb = b.view();
  const cpu::MatvecTarget mixed[] = {{&wa, y1.data()}, {&wb, y2.data()}};
  CHECK_THROWS_WITH(cpu::matvec_group(ctx, mixed, x.data()), Contains("96 columns"));
  CHECK_THROWS_WITH(cpu::matvec_group(ctx, {}, x.data()), Contains("0 weights"));
  CHECK_THROWS_WITH(cpu::matvec_swiglu(ctx, a.view(), c.view(), x.data(), y1.data(), y2.data(), y3.data()),
                    Contains("gate has 32 rows, up has 48"));
}

TEST_CASE("the decoder graph fuses q/k/v, gate/up/SwiGLU, both residual adds and the q/k ropes per layer", "[fusion]") {
  const std::string path = test::random_model(test::tiny_options(DType::kQ8_0), "fusion-graph");
  const LoadedModel model = load_model(path);
  const graph::Graph graph = build_model_graph(model.spec, model.tensors, {});
  const DecodeFusions f = find_decode_fusions(graph);
  int qkv = 0, swiglu = 0, add = 0, rope = 0;
  for (const Fusion& fusion : f.fusions) {
    const auto& lead = graph.nodes()[fusion.nodes[0]];
    switch (fusion.kind) {
      case FusionKind::kMatvecs:
        ++qkv;
        CHECK(fusion.nodes.size() == 3);
        CHECK(lead.name.ends_with(".q"));
        break;
      case FusionKind::kSwiGlu:
        ++swiglu;
        CHECK(lead.name.ends_with("ffn_gate"));
        break;
      case FusionKind::kGeGlu:
        FAIL("a Llama graph has no GeGLU");
        break;
      case FusionKind::kAddInto:
        ++add;
        CHECK(graph.nodes()[fusion.nodes[1]].op == graph::OpKind::kAdd);
        break;
      case FusionKind::kRopePair:  // a launch saving for GPUs (the CPU backend runs them apart)
        ++rope;
        CHECK(lead.op == graph::OpKind::kRope);
        CHECK(graph.nodes()[fusion.nodes[1]].op == graph::OpKind::kRope);
        break;
    }
    for (const std::size_t n : fusion.nodes) CHECK(f.fusion_of[n] >= 0);
  }
  CHECK(qkv == model.spec.n_layer);
  CHECK(swiglu == model.spec.n_layer);
  CHECK(add == 2 * model.spec.n_layer);
  CHECK(rope == model.spec.n_layer);
}

TEST_CASE("a Gemma graph fuses gate, up and GeGLU per layer", "[fusion]") {
  RandomModelOptions mo = test::tiny_options(DType::kQ8_0);
  mo.architecture = "gemma3";
  const std::string path = test::random_model(mo, "fusion-graph-gemma");
  const LoadedModel model = load_model(path);
  const graph::Graph graph = build_model_graph(model.spec, model.tensors, {});
  const DecodeFusions f = find_decode_fusions(graph);
  const auto geglu = std::ranges::count_if(f.fusions, [&](const Fusion& fusion) {
    if (fusion.kind != FusionKind::kGeGlu) return false;
    CHECK(fusion.nodes.size() == 3);
    CHECK(graph.nodes()[fusion.nodes[0]].name.ends_with("ffn_gate"));
    CHECK(graph.nodes()[fusion.nodes[2]].op == graph::OpKind::kGeGlu);
    return true;
  });
  CHECK(geglu == model.spec.n_layer);
}

TEST_CASE("decode with fusions gives the same tokens and log-probs as without", "[fusion][engine]") {
  const std::string arch = GENERATE(as<std::string>{}, "llama", "qwen2", "qwen3", "gemma3");
  const DType type = GENERATE(DType::kQ8_0, DType::kQ4_K, DType::kF16);
  CAPTURE(arch, name(type));
  RandomModelOptions mo = test::tiny_options(type);
  mo.architecture = arch;
  mo.dim = 128;
  mo.ffn = 256;
  EngineOptions o;
  o.model_path = test::random_model(mo, "fusion-" + arch);
  o.threads = 3;
  GenerationConfig g;
  g.max_new_tokens = 20;
  g.temperature = 1.0f;
  g.seed = 42;
  g.top_logprobs = 8;
  const auto run = [&](bool fuse) {
    o.decode_fusion = fuse;
    const Engine engine(o);
    REQUIRE(engine.model_info().decode_fusion == fuse);
    std::vector<float> logprobs;
    const GenerationResult r = engine.generate_from_tokens(std::vector<std::int32_t>{1, 40, 41, 42}, g,
                                                           [&](const TokenEvent& e) {
                                                             logprobs.push_back(e.logprob);
                                                             for (const auto& alt : e.top) logprobs.push_back(alt.logprob);
                                                             return true;
                                                           });
    return std::make_pair(r.tokens, logprobs);
  };
  const auto fused = run(true);
  const auto plain = run(false);
  CHECK(fused.first == plain.first);
  CHECK(fused.second == plain.second);  // bit for bit
}
