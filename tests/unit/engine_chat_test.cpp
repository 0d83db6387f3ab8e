// Engine::chat, apply_chat_template and chat_tokens on a small random model with a ChatML
// template given through EngineOptions::chat_template: the rendering, its token ids (special
// tokens as single ids), generation from exactly those ids, the end-of-turn stop, the audit
// record's chat fields, and the errors.
#include "support/model_files.hpp"

#include <sitsrt/engine.hpp>
#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

using namespace sitsrt;
using Catch::Matchers::Contains;

namespace {

// SmolLM2's template shape: ChatML with a default system message.
constexpr const char* kChatMl =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are helpful.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

struct Recorder : AuditSink {
  std::vector<RequestRecord> requests;
  void on_request_begin(const RequestRecord& record) override { requests.push_back(record); }
  void on_token(const std::string&, const TokenEvent&) override {}
  void on_request_end(const RequestSummary&) override {}
};

EngineOptions chat_engine(std::shared_ptr<Recorder> recorder = nullptr) {
  EngineOptions o;
  o.model_path = test::random_model(test::tiny_options(DType::kQ8_0), "chat");
  o.threads = 2;
  o.chat_template = kChatMl;
  if (recorder) o.audit_sinks = {recorder};
  return o;
}

}  // namespace

TEST_CASE("chat renders the template, feeds its ids and records the conversation", "[engine][chat]") {
  auto recorder = std::make_shared<Recorder>();
  const Engine engine(chat_engine(recorder));
  REQUIRE(engine.chat_template() != nullptr);
  const std::vector<ChatMessage> messages = {{"user", "hello there", {}}};
  const std::string rendered = engine.apply_chat_template(messages, true);
  CHECK(rendered ==
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhello there<|im_end|>\n"
        "<|im_start|>assistant\n");
  CHECK(engine.apply_chat_template(messages, false).find("assistant") == std::string::npos);
  const std::vector<std::int32_t> ids = engine.chat_tokens(messages);
  // The random model's vocabulary has no <|im_start|> token, so it is text here: the ids are
  // the plain encoding of the rendering (BOS per the model's metadata).
  CHECK(ids == engine.tokenize(rendered, true));

  GenerationConfig config;
  config.temperature = 0.0f;
  config.max_new_tokens = 6;
  const GenerationResult chat = engine.chat(messages, config);
  const GenerationResult plain = engine.generate_from_tokens(ids, config);
  CHECK(chat.prompt_tokens == ids);
  CHECK(chat.tokens == plain.tokens);

  REQUIRE(recorder->requests.size() == 2);
  const RequestRecord& record = recorder->requests[0];
  CHECK(record.input_tokens == ids);
  CHECK(record.chat_add_generation_prompt);
  CHECK(record.chat_template_sha256.size() == 64);
  const auto logged = nlohmann::json::parse(record.chat_messages_json);
  CHECK(logged == nlohmann::json::parse(R"([{"role": "user", "content": "hello there"}])"));
  CHECK(record.input_sha256 != recorder->requests[1].input_sha256);  // the rendering's hash, not the empty text's
  CHECK(recorder->requests[1].chat_messages_json.empty());
}

TEST_CASE("submit_chat queues chat()'s tokens and records the same chat fields", "[engine][chat]") {
  auto recorder = std::make_shared<Recorder>();
  const Engine engine(chat_engine(recorder));
  const std::vector<ChatMessage> messages = {{"system", "Be brief.", {}}, {"user", "hello there", {}}};
  GenerationConfig config;
  config.temperature = 0.0f;
  config.max_new_tokens = 6;
  const GenerationResult chat = engine.chat(messages, config);
  RequestHandle handle = engine.submit_chat(messages, config);
  const GenerationResult queued = handle.wait();
  CHECK(queued.prompt_tokens == engine.chat_tokens(messages));
  CHECK(queued.tokens == chat.tokens);
  CHECK(queued.text == chat.text);
  REQUIRE(recorder->requests.size() == 2);
  CHECK(recorder->requests[1].chat_messages_json == recorder->requests[0].chat_messages_json);
  CHECK(recorder->requests[1].chat_template_sha256 == recorder->requests[0].chat_template_sha256);
  CHECK(recorder->requests[1].input_sha256 == recorder->requests[0].input_sha256);
  CHECK(recorder->requests[1].chat_add_generation_prompt);
}

TEST_CASE("chat passes extra fields and non-text content through to the template", "[engine][chat]") {
  EngineOptions o = chat_engine();
  o.chat_template =
      "{% for m in messages %}{{ m.role }}:{% if m.content is string %}{{ m.content }}"
      "{% else %}{% for part in m.content %}[{{ part.text }}]{% endfor %}{% endif %}"
      "{% if m.name is defined %}({{ m.name }}){% endif %};{% endfor %}";
  const Engine engine(o);
  const std::vector<ChatMessage> messages = {
      {"user", "", R"({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})"},
      {"tool", "42", R"({"name": "calc"})"},
  };
  CHECK(engine.apply_chat_template(messages, false) == "user:[a][b];tool:42(calc);");
  const std::vector<ChatMessage> repeated = {{"user", "text", R"({"content": "again"})"}};
  CHECK_THROWS_WITH(engine.apply_chat_template(repeated, false), Contains("content"));
  const std::vector<ChatMessage> not_object = {{"user", "x", "[1, 2]"}};
  CHECK_THROWS_WITH(engine.apply_chat_template(not_object, false), Contains("messages[0].extra_json"));
}

TEST_CASE("chat errors: no template, an unsupported override, a template that raises", "[engine][chat]") {
  EngineOptions plain = chat_engine();
  plain.chat_template.clear();
  const Engine engine(plain);  // a model without a chat template still loads and generates
  CHECK(engine.chat_template() == nullptr);
  const std::vector<ChatMessage> messages = {{"user", "hi", {}}};
  try {
    (void)engine.chat(messages);
    FAIL("chat without a template must fail");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kUnsupported);
    CHECK_THAT(e.what(), Contains("no chat template"));
  }
  EngineOptions bad = chat_engine();
  bad.chat_template = "{% for m in messages %}{{ m | frobnicate }}{% endfor %}";
  try {
    const Engine refused(bad);
    FAIL("an unsupported filter in EngineOptions::chat_template must fail the load");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kUnsupported);
    CHECK_THAT(e.what(), Contains("frobnicate") && Contains("EngineOptions::chat_template"));
  }
  EngineOptions raising = chat_engine();
  raising.chat_template = "{{ raise_exception('System role not supported') }}";
  const Engine raiser(raising);
  CHECK_THROWS_WITH(raiser.chat(messages), Contains("System role not supported"));
}
