// Shadow evaluation: the same model re-scores the tokens with (near) zero divergence, another
// model diverges, trips the rule and opens the main engine's breaker; reports reach the log.
#include "audit/verify.hpp"
#include "support/audit_logs.hpp"

#include <sitsrt/error.hpp>
#include <sitsrt/shadow.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <mutex>

using namespace sitsrt;

namespace {

EngineOptions options_for(const std::string& path) {
  EngineOptions o;
  o.model_path = path;
  o.threads = 1;
  o.cpu_isa = test::kFloatPrefillIsa;  // the "same model" case expects float-rounding agreement
  return o;
}

}  // namespace

TEST_CASE("shadow evaluation reports per-token divergence and can open the breaker", "[audit][shadow]") {
  const std::string main_model = test::random_model(test::tiny_options(DType::kF32), "shadow-main");
  auto other_options = test::tiny_options(DType::kF32);
  other_options.seed = 3;
  const std::string other_model = test::random_model(other_options, "shadow-other");
  const bool same = GENERATE(true, false);
  const Engine main(options_for(main_model));
  auto shadow = std::make_shared<const Engine>(options_for(same ? main_model : other_model));

  JsonlAuditLogOptions log;
  log.path = test::fresh_log_path("shadow");
  log.durability = Durability::kNever;
  auto jsonl = make_jsonl_audit_sink(log);
  std::mutex mutex;
  std::vector<ShadowDivergence> reports;
  ShadowEvalOptions so;
  so.shadow = shadow;
  so.max_mean_topk_kl = 0.01f;
  so.guarded = &main;
  so.report_to = {jsonl};
  so.on_divergence = [&](const ShadowDivergence& d) {
    std::lock_guard lock(mutex);
    reports.push_back(d);
  };
  auto sink = make_shadow_eval_sink(so);

  GenerationConfig c;
  c.max_new_tokens = 10;
  c.temperature = 0.0f;
  c.stop_at_end_of_sequence = false;
  c.audit.level = TraceLevel::kTopK;
  c.audit.sinks = {jsonl, sink};
  const GenerationResult r = main.generate("shadow me", c);
  sink->flush();
  REQUIRE(reports.size() == 1);
  const ShadowDivergence& d = reports[0];
  CHECK(d.request_id == r.request_id);
  CHECK(d.logprob_diff.size() == r.tokens.size());
  CHECK(d.topk_kl.size() == r.tokens.size());
  if (same) {
    // Prefill over all positions vs step-by-step decode: equal up to float rounding.
    CHECK(d.max_abs_logprob_diff < 1e-3f);
    CHECK(d.mean_topk_kl < 1e-5f);
    CHECK_FALSE(d.tripped);
    CHECK_FALSE(main.circuit_breaker_open());
  } else {
    CHECK(d.mean_topk_kl > 0.01f);
    CHECK(d.tripped);
    CHECK(main.circuit_breaker_open());
    CHECK_THROWS_AS(main.generate("again", c), Error);
  }
  jsonl->flush();
  const auto lines = test::split_lines(test::read_file(log.path));
  const auto shadow_records = std::count_if(lines.begin(), lines.end(), [](const std::string& l) {
    return nlohmann::json::parse(l)["type"] == "shadow";
  });
  CHECK(shadow_records == 1);
  CHECK(audit::verify_log({log.path}, "").clean());
}

TEST_CASE("shadow evaluation samples a fraction of requests", "[audit][shadow]") {
  const std::string model = test::random_model(test::tiny_options(DType::kF32), "shadow-main");
  const Engine main(options_for(model));
  ShadowEvalOptions so;
  so.shadow = std::make_shared<const Engine>(options_for(model));
  int evaluated = 0;
  so.on_divergence = [&](const ShadowDivergence&) { ++evaluated; };  // one worker thread
  so.fraction = 0.0;
  auto none = make_shadow_eval_sink(so);
  GenerationConfig c;
  c.max_new_tokens = 2;
  c.audit.sinks = {none};
  for (int i = 0; i < 3; ++i) (void)main.generate("x", c);
  none->flush();
  CHECK(evaluated == 0);
  so.fraction = 1.0;
  auto all = make_shadow_eval_sink(so);
  c.audit.sinks = {all};
  for (int i = 0; i < 3; ++i) (void)main.generate("x", c);
  all->flush();
  CHECK(evaluated == 3);
  so.fraction = 1.5;
  CHECK_THROWS_AS(make_shadow_eval_sink(so), Error);
}
