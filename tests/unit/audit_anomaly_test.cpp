// Anomaly rules fire when and only when their condition holds; the actions stop a request or
// open the engine-wide circuit breaker.
#include "audit/anomaly.hpp"
#include "support/model_files.hpp"

#include <sitsrt/engine.hpp>
#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <mutex>

using namespace sitsrt;

namespace {

TokenEvent token(std::int64_t index, std::int32_t id, float logprob, float entropy, std::string text = "x") {
  TokenEvent e;
  e.index = index;
  e.token_id = id;
  e.logprob = logprob;
  e.entropy = entropy;
  e.text = std::move(text);
  return e;
}

AnomalyRule rule(AnomalyRule::Kind kind, const std::string& name) {
  AnomalyRule r;
  r.kind = kind;
  r.name = name;
  return r;
}

// Indices of the tokens at which the single rule tripped.
std::vector<std::int64_t> trips(const AnomalyRule& r, const std::vector<TokenEvent>& events) {
  audit::AnomalyMonitor monitor({r}, "req");
  std::vector<std::int64_t> at;
  std::vector<AnomalyEvent> out;
  for (const auto& e : events) {
    out.clear();
    monitor.observe(e, out);
    for (const auto& a : out) {
      CHECK(a.rule == r.name);
      CHECK(a.request_id == "req");
      at.push_back(a.token_index);
    }
  }
  return at;
}

struct RecordingSink : AuditSink {
  void on_request_begin(const RequestRecord& r) override {
    std::lock_guard lock(mutex);
    log.push_back("begin " + r.request_id);
  }
  void on_token(const std::string&, const TokenEvent& e) override {
    std::lock_guard lock(mutex);
    log.push_back("token " + std::to_string(e.index));
  }
  void on_anomaly(const AnomalyEvent& a) override {
    std::lock_guard lock(mutex);
    log.push_back("anomaly " + a.rule + " " + std::to_string(a.token_index));
  }
  void on_request_end(const RequestSummary& s) override {
    std::lock_guard lock(mutex);
    log.push_back("end " + s.finish_reason);
  }
  std::mutex mutex;
  std::vector<std::string> log;
};

}  // namespace

TEST_CASE("entropy rule: above x for n consecutive steps", "[audit][anomaly]") {
  auto r = rule(AnomalyRule::Kind::kEntropyAbove, "uncertain");
  r.threshold = 2.0f;
  r.consecutive = 3;
  std::vector<TokenEvent> ev;
  const float entropies[] = {3, 3, 1, 3, 3, 3, 3, 3, 3, 2.0f, 3};
  for (int i = 0; i < 11; ++i) ev.push_back(token(i, 5, -1, entropies[i]));
  // steps 3,4,5 -> trip at 5; counting restarts: 6,7,8 -> trip at 8; 9 is not above (equal)
  CHECK(trips(r, ev) == std::vector<std::int64_t>{5, 8});
  r.consecutive = 1;
  CHECK(trips(r, ev) == std::vector<std::int64_t>{0, 1, 3, 4, 5, 6, 7, 8, 10});
}

TEST_CASE("logprob rule: strictly below y", "[audit][anomaly]") {
  auto r = rule(AnomalyRule::Kind::kLogprobBelow, "unlikely");
  r.threshold = -5.0f;
  const std::vector<TokenEvent> ev = {token(0, 1, -4.9f, 0), token(1, 1, -5.0f, 0), token(2, 1, -5.01f, 0),
                                      token(3, 1, -30.0f, 0), token(4, 1, 0.0f, 0)};
  CHECK(trips(r, ev) == std::vector<std::int64_t>{2, 3});
}

TEST_CASE("banned token id", "[audit][anomaly]") {
  auto r = rule(AnomalyRule::Kind::kBannedToken, "banned-id");
  r.token_id = 7;
  const std::vector<TokenEvent> ev = {token(0, 6, 0, 0), token(1, 7, 0, 0), token(2, 8, 0, 0), token(3, 7, 0, 0)};
  CHECK(trips(r, ev) == std::vector<std::int64_t>{1, 3});
}

TEST_CASE("banned string, also when split across tokens, reported once per occurrence", "[audit][anomaly]") {
  auto r = rule(AnomalyRule::Kind::kBannedString, "banned-text");
  r.text = "secret";
  const std::vector<TokenEvent> ev = {token(0, 1, 0, 0, "the se"), token(1, 1, 0, 0, "cr"), token(2, 1, 0, 0, "et is"),
                                      token(3, 1, 0, 0, " out"), token(4, 1, 0, 0, "secretsecret"),
                                      token(5, 1, 0, 0, "secre"), token(6, 1, 0, 0, "")};
  CHECK(trips(r, ev) == std::vector<std::int64_t>{2, 4});
}

TEST_CASE("rules with fields that do not fit their kind are refused", "[audit][anomaly]") {
  auto r = rule(AnomalyRule::Kind::kBannedString, "empty");
  CHECK_THROWS_AS(audit::validate_rule(r), Error);
  r = rule(AnomalyRule::Kind::kEntropyAbove, "zero");
  r.consecutive = 0;
  CHECK_THROWS_AS(audit::validate_rule(r), Error);
  r = rule(AnomalyRule::Kind::kBannedToken, "negative");
  CHECK_THROWS_AS(audit::validate_rule(r), Error);
}

TEST_CASE("engine: actions continue, stop the request, or open the breaker until reset", "[audit][anomaly]") {
  EngineOptions o;
  o.model_path = test::random_model(test::tiny_options(DType::kQ8_0), "anomaly");
  o.threads = 2;
  auto sink = std::make_shared<RecordingSink>();
  o.audit_sinks.push_back(sink);
  std::vector<AnomalyEvent> seen;
  o.on_anomaly = [&](const AnomalyEvent& a) { seen.push_back(a); };
  const Engine engine(o);
  GenerationConfig c;
  c.max_new_tokens = 8;
  c.temperature = 0.0f;
  c.stop_at_end_of_sequence = false;
  const GenerationResult plain = engine.generate("hello", c);
  REQUIRE(plain.tokens.size() == 8);

  // A token id the greedy run produces at step 2.
  auto banned = rule(AnomalyRule::Kind::kBannedToken, "banned");
  banned.token_id = plain.tokens[2];
  const auto first = static_cast<std::int64_t>(
      std::find(plain.tokens.begin(), plain.tokens.end(), banned.token_id) - plain.tokens.begin());

  SECTION("continue: the request runs to its end; the host and the sinks hear of it") {
    c.audit.rules = {banned};
    const auto r = engine.generate("hello", c);
    CHECK(r.tokens == plain.tokens);
    CHECK(r.finish_reason == FinishReason::kLength);
    REQUIRE_FALSE(seen.empty());
    CHECK(seen.front().token_index == first);
    CHECK(std::count(sink->log.begin(), sink->log.end(), "anomaly banned " + std::to_string(first)) == 1);
    CHECK_FALSE(engine.circuit_breaker_open());
  }
  SECTION("stop the request") {
    banned.action = AnomalyAction::kStopRequest;
    c.audit.rules = {banned};
    const auto r = engine.generate("hello", c);
    CHECK(r.finish_reason == FinishReason::kCircuitBreaker);
    CHECK(static_cast<std::int64_t>(r.tokens.size()) == first + 1);
    CHECK(sink->log.back() == "end circuit_breaker");
    CHECK_FALSE(engine.circuit_breaker_open());
    CHECK(engine.generate("hello", c).finish_reason == FinishReason::kCircuitBreaker);
  }
  SECTION("open the breaker: new requests are rejected until reset") {
    banned.action = AnomalyAction::kOpenBreaker;
    c.audit.rules = {banned};
    CHECK(engine.generate("hello", c).finish_reason == FinishReason::kCircuitBreaker);
    CHECK(engine.circuit_breaker_open());
    GenerationConfig other;
    other.max_new_tokens = 2;
    try {
      (void)engine.generate("hello", other);
      FAIL("a request ran while the breaker was open");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kRejected);
    }
    engine.reset_circuit_breaker();
    CHECK(engine.generate("hello", other).tokens.size() == 2);
  }
  SECTION("a rule that never matches changes nothing") {
    auto never = rule(AnomalyRule::Kind::kLogprobBelow, "never");
    never.threshold = -1e30f;
    never.action = AnomalyAction::kOpenBreaker;
    c.audit.rules = {never};
    CHECK(engine.generate("hello", c).tokens == plain.tokens);
    CHECK(seen.empty());
    CHECK_FALSE(engine.circuit_breaker_open());
  }
}
