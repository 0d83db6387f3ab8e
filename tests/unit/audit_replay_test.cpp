// Audited generation end to end in the library: records per trace level, the request record's
// identity fields, and replay of a deterministic run (bit-exact, independent of thread count).
#include "audit/hash.hpp"
#include "audit/verify.hpp"
#include "support/audit_logs.hpp"

#include <sitsrt/audit_log.hpp>
#include <sitsrt/engine.hpp>
#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>

using namespace sitsrt;
using nlohmann::json;

namespace {

std::string tiny_model() { return test::random_model(test::tiny_options(DType::kQ8_0), "replay"); }

std::vector<json> records_of(const std::string& path, const std::string& type) {
  std::vector<json> out;
  for (const auto& line : test::split_lines(test::read_file(path))) {
    json j = json::parse(line);
    if (j["type"] == type) out.push_back(std::move(j));
  }
  return out;
}

// The model and weight settings a run loads with (the defaults: the tiny Q8_0 model, as stored,
// resident).
struct WeightSetup {
  std::string model = tiny_model();
  std::string weights = "as-stored";
  bool mmap = false;
  KvCacheType kv = KvCacheType::kF16;
  std::int64_t kv_recent_window = 32;
};

// Runs one audited request at `level` with a fresh log and returns the log path.
std::string audited_run(TraceLevel level, int threads, bool deterministic, float temperature,
                        std::vector<std::int64_t> full_steps = {}, const WeightSetup& setup = {}) {
  JsonlAuditLogOptions log;
  log.path = test::fresh_log_path("replay");
  log.durability = Durability::kNever;
  EngineOptions o;
  o.model_path = setup.model;
  o.weights = setup.weights;
  o.mmap_weights = setup.mmap;
  o.kv_cache_type = setup.kv;
  o.kv_recent_window = setup.kv_recent_window;
  o.threads = threads;
  o.deterministic = deterministic;
  o.max_batch_tokens = 3;  // prompts are split into several prefill steps
  o.audit_sinks.push_back(make_jsonl_audit_sink(log));
  const Engine engine(o);
  GenerationConfig c;
  c.max_new_tokens = 12;
  c.temperature = temperature;
  c.seed = 1234;
  c.stop_at_end_of_sequence = false;
  c.audit.level = level;
  c.audit.full_distribution_steps = std::move(full_steps);
  c.audit.metadata = {"tenant-a", "user-b", {"x", "y"}};
  (void)engine.generate("hello there, audit", c);
  c.seed = 99;
  (void)engine.generate("a second prompt", c);
  return log.path;
}

// Replays `log` (two deterministic requests of 12 tokens, as audited_run writes) on `model` with
// `threads` threads and checks both bit-exact.
void check_bit_exact_replay(const std::string& log, const std::string& model, int threads) {
  ReplayOptions o;
  o.model_path = model;
  o.threads = threads;
  const auto outcomes = replay_log({log}, o);
  REQUIRE(outcomes.size() == 2);
  for (const auto& out : outcomes) {
    INFO(out.message);
    CHECK(out.match);
    CHECK(out.deterministic);
    CHECK(out.tokens == 12);
  }
}

}  // namespace

TEST_CASE("request records carry identity, settings, input hashes and metadata", "[audit]") {
  const std::string path = audited_run(TraceLevel::kTokens, 2, true, 0.8f);
  CHECK(audit::verify_log({path}, "").clean());
  const auto requests = records_of(path, "request");
  REQUIRE(requests.size() == 2);
  const json& r = requests[0];
  CHECK(r["model"]["sha256"] == audit::sha256_file_hex(tiny_model()));
  CHECK(r["engine"]["deterministic"] == true);
  CHECK(r["engine"]["max_batch_tokens"] == 3);
  CHECK(r["engine"]["weights"] == "q8_0");
  CHECK(r["engine"]["conversion"] == "as-stored");
  CHECK(r["engine"]["placement"] == "resident");
  CHECK(r["sampling"]["seed"] == 1234);
  CHECK(r["input_sha256"] == audit::sha256_hex("hello there, audit"));
  CHECK(r["input_tokens_sha256"] == audit::sha256_hex(r["input_tokens"].get<std::vector<std::int32_t>>()));
  CHECK(r["meta"]["tenant"] == "tenant-a");
  CHECK(r["meta"]["tags"] == json::array({"x", "y"}));
  CHECK(r["req"] != requests[1]["req"]);
  const auto ends = records_of(path, "end");
  REQUIRE(ends.size() == 2);
  CHECK(ends[0]["finish"] == "length");
  CHECK(ends[0]["generated_tokens"] == 12);
}

TEST_CASE("trace levels: each records its fields and no more", "[audit]") {
  SECTION("off: begin and end records only") {
    const std::string path = audited_run(TraceLevel::kOff, 2, false, 0.0f);
    CHECK(records_of(path, "token").empty());
    CHECK(records_of(path, "end").size() == 2);
  }
  SECTION("tokens: id, text, logprob, time") {
    const auto tokens = records_of(audited_run(TraceLevel::kTokens, 2, false, 0.0f), "token");
    REQUIRE(tokens.size() == 24);
    for (const auto& t : tokens) {
      CHECK(t.contains("lp"));
      CHECK(t.contains("text"));
      CHECK_FALSE(t.contains("top"));
      CHECK_FALSE(t.contains("entropy"));
    }
  }
  SECTION("topk: + alternatives and entropy") {
    const auto tokens = records_of(audited_run(TraceLevel::kTopK, 2, false, 0.0f), "token");
    REQUIRE(tokens.size() == 24);
    for (const auto& t : tokens) {
      REQUIRE(t["top"].size() == 5);
      CHECK(t["top"][0][0] == t["id"]);  // greedy: the chosen token is the most likely
      CHECK(t["entropy"].get<double>() >= 0.0);
      CHECK_FALSE(t.contains("full"));
    }
  }
  SECTION("full: the whole distribution at the named steps only") {
    const auto tokens = records_of(audited_run(TraceLevel::kFull, 2, false, 0.0f, {0, 5}), "token");
    REQUIRE(tokens.size() == 24);
    for (const auto& t : tokens) {
      const auto i = t["i"].get<int>();
      CHECK(t.contains("full") == (i == 0 || i == 5));
      if (!t.contains("full")) continue;
      REQUIRE(t["full"].size() == 300);
      double total = 0.0;
      for (const auto& lp : t["full"]) total += std::exp(lp.get<double>());
      CHECK(total == Approx(1.0).epsilon(1e-4));
      CHECK(t["full"][t["id"].get<int>()].get<float>() == t["lp"].get<float>());
    }
  }
}

TEST_CASE("replay of a deterministic run is bit-exact with another thread count", "[audit]") {
  for (const float temperature : {0.0f, 0.9f}) {
    check_bit_exact_replay(audited_run(TraceLevel::kTokens, 2, true, temperature), tiny_model(), 1);
  }
}

TEST_CASE("replay loads the weights as the run did: conversion and placement", "[audit]") {
  // FP8 rows of whole 64-blocks: stored FP8 decodes with another kernel than resident FP8R
  // (float vs fp16 sums), and an F32 model converted to FP8 is not the F32 model, so a replay
  // that loaded either differently would not be bit-exact.
  auto options = test::tiny_options(DType::kF32);
  options.dim = 128;
  options.ffn = 256;
  const std::string f32_model = test::random_model(options, "replay-f32");
  options.type = DType::kFP8_E4M3;
  const std::string fp8_model = test::random_model(options, "replay-fp8");
  for (const WeightSetup& setup : {WeightSetup{f32_model, "fp8", false}, WeightSetup{fp8_model, "as-stored", true}}) {
    CAPTURE(setup.model, setup.weights, setup.mmap);
    const std::string path = audited_run(TraceLevel::kTokens, 2, true, 0.9f, {}, setup);
    const auto requests = records_of(path, "request");
    REQUIRE(requests.size() == 2);
    CHECK(requests[0]["engine"]["conversion"] == setup.weights);
    CHECK(requests[0]["engine"]["placement"] == (setup.mmap ? "mmap" : "resident"));
    check_bit_exact_replay(path, setup.model, 1);
  }
}

TEST_CASE("replay loads the KV cache as the run did: int4 with and without an exact recent window", "[audit]") {
  // The window changes which positions attention reads quantized: a replay without it (or with
  // another length) would not be bit-exact.
  for (const std::int64_t window : {std::int64_t{0}, std::int64_t{5}}) {
    CAPTURE(window);
    WeightSetup setup;
    setup.kv = KvCacheType::kInt4;
    setup.kv_recent_window = window;
    const std::string path = audited_run(TraceLevel::kTokens, 2, true, 0.9f, {}, setup);
    const auto requests = records_of(path, "request");
    REQUIRE(requests.size() == 2);
    const std::string label = requests[0]["engine"]["kv"];
    CHECK(label.ends_with(window > 0 ? ",recent=5" : "v=int4+hadamard"));
    check_bit_exact_replay(path, setup.model, 1);
  }
}

TEST_CASE("replay reads logs written before the conversion and placement fields", "[audit]") {
  const std::string path = audited_run(TraceLevel::kTokens, 2, true, 0.9f);
  auto lines = test::split_lines(test::read_file(path));
  int stripped = 0;
  for (auto& line : lines) {
    json j = json::parse(line);
    if (j["type"] != "request") continue;
    stripped += static_cast<int>(j["engine"].erase("conversion") + j["engine"].erase("placement"));
    line = j.dump();
  }
  CHECK(stripped == 4);
  const std::string old_log = path + ".old";
  test::write_file(old_log, test::join_lines(lines));
  check_bit_exact_replay(old_log, tiny_model(), 2);
}

TEST_CASE("replay notices a changed record and refuses another model", "[audit]") {
  const std::string path = audited_run(TraceLevel::kTokens, 2, true, 0.0f);
  SECTION("another model file") {
    auto other = test::tiny_options(DType::kQ8_0);
    other.seed = 7;
    ReplayOptions o;
    o.model_path = test::random_model(other, "replay-other");
    try {
      (void)replay_log({path}, o);
      FAIL("replay ran on a different model");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kRejected);
    }
  }
  SECTION("a recorded logprob that differs in its last bit") {
    auto lines = test::split_lines(test::read_file(path));
    for (auto& line : lines) {
      json j = json::parse(line);
      if (j["type"] != "token" || j["i"] != 3) continue;
      float lp = j["lp"].get<float>();
      lp = std::nextafter(lp, 0.0f);
      j["lp"] = lp;
      line = j.dump();
      break;
    }
    const std::string edited = path + ".edited";
    test::write_file(edited, test::join_lines(lines));
    ReplayOptions o;
    o.model_path = tiny_model();
    const auto outcomes = replay_log({edited}, o);
    REQUIRE(outcomes.size() == 2);
    CHECK_FALSE(outcomes[0].match);
    CHECK(outcomes[0].message.find("token 3") != std::string::npos);
    CHECK(outcomes[1].match);
  }
}
