// The OTLP/JSON trace sink: one span per request with the GenAI attributes, valid ids and
// timestamps, and token events only at levels that record tokens.
#include "support/audit_logs.hpp"
#include "support/skip.hpp"

#include <sitsrt/engine.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <map>
#include <set>

using namespace sitsrt;
using nlohmann::json;

namespace {

bool is_hex(const std::string& s, std::size_t n) {
  return s.size() == n && s.find_first_not_of("0123456789abcdef") == std::string::npos &&
         s.find_first_not_of('0') != std::string::npos;
}

std::map<std::string, json> attributes(const json& list) {
  std::map<std::string, json> out;
  for (const auto& a : list) out[a["key"].get<std::string>()] = a["value"];
  return out;
}

}  // namespace

TEST_CASE("OTLP/JSON trace file: spans, ids, timestamps, GenAI attributes, token events", "[audit][otlp]") {
  const std::string path = test::fresh_log_path("otlp");
  EngineOptions o;
  o.model_path = test::random_model(test::tiny_options(DType::kQ8_0), "otlp");
  o.threads = 2;
  o.audit_sinks.push_back(make_otlp_trace_sink({path, "test-service"}));
  {
    const Engine engine(o);
    GenerationConfig c;
    c.max_new_tokens = 6;
    c.seed = 5;
    c.stop_at_end_of_sequence = false;
    c.audit.level = TraceLevel::kTopK;
    (void)engine.generate("first", c);
    c.audit.level = TraceLevel::kOff;
    (void)engine.generate("second", c);
  }
  const auto lines = test::split_lines(test::read_file(path));
  REQUIRE(lines.size() == 2);
  std::set<std::string> trace_ids;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const json doc = json::parse(lines[i]);
    REQUIRE(doc["resourceSpans"].size() == 1);
    const json& rs = doc["resourceSpans"][0];
    CHECK(attributes(rs["resource"]["attributes"])["service.name"]["stringValue"] == "test-service");
    REQUIRE(rs["scopeSpans"].size() == 1);
    CHECK(rs["scopeSpans"][0]["scope"]["name"] == "sitsrt");
    const json& span = rs["scopeSpans"][0]["spans"][0];
    CHECK(is_hex(span["traceId"], 32));
    CHECK(is_hex(span["spanId"], 16));
    trace_ids.insert(span["traceId"].get<std::string>());
    const auto start = std::stoll(span["startTimeUnixNano"].get<std::string>());
    const auto end = std::stoll(span["endTimeUnixNano"].get<std::string>());
    CHECK(start > 1600000000LL * 1000000000LL);
    CHECK(end >= start);
    CHECK(span["kind"] == 1);
    CHECK(span["status"]["code"] == 1);
    auto attrs = attributes(span["attributes"]);
    CHECK(attrs["gen_ai.operation.name"]["stringValue"] == "text_completion");
    CHECK(attrs["gen_ai.request.model"]["stringValue"] == o.model_path);
    CHECK(attrs["gen_ai.request.seed"]["intValue"] == "5");
    CHECK(attrs["gen_ai.usage.output_tokens"]["intValue"] == "6");
    CHECK(attrs["gen_ai.response.finish_reasons"]["arrayValue"]["values"][0]["stringValue"] == "length");
    CHECK(span["name"] == "text_completion " + o.model_path);
    const json& events = span["events"];
    if (i == 0) {
      REQUIRE(events.size() == 6);
      for (const auto& e : events) {
        CHECK(e["name"] == "sitsrt.token");
        const auto t = std::stoll(e["timeUnixNano"].get<std::string>());
        CHECK((t >= start && t <= end));
        CHECK(attributes(e["attributes"]).count("sitsrt.token.entropy") == 1);
      }
    } else {
      CHECK(events.empty());
    }
  }
  CHECK(trace_ids.size() == 2);
}

TEST_CASE("OTLP trace write failures fail the request and every later one, naming the reason", "[audit][otlp][gated]") {
  if (!std::filesystem::exists("/dev/full")) SITSRT_SKIP("no /dev/full");
  EngineOptions o;
  o.model_path = test::random_model(test::tiny_options(DType::kQ8_0), "otlp");
  o.threads = 1;
  const auto sink = make_otlp_trace_sink({"/dev/full"});  // every write: ENOSPC
  o.audit_sinks.push_back(sink);
  const Engine engine(o);
  GenerationConfig c;
  c.max_new_tokens = 3;
  for (int attempt = 0; attempt < 2; ++attempt) {  // before: both succeeded, the span lost
    try {
      (void)engine.generate("Once", c);
      FAIL("expected the request to fail");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kIo);
      CHECK_THAT(e.what(), Catch::Contains("/dev/full: writing the trace failed (No space left on device)"));
    }
  }
  CHECK_THROWS_WITH(sink->flush(), Catch::Contains("No space left on device"));
}
