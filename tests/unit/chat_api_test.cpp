// sitsrt::ChatTemplate (include/sitsrt/chat.hpp): transformers' template variables, message
// validation, options, loading a template from a model, and concurrent rendering. Expected texts
// are what jinja2 prints for the same template and variables.
#include <sitsrt/chat.hpp>
#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

namespace {

using Catch::Matchers::Contains;
using sitsrt::ChatMessage;
using sitsrt::ChatTemplate;
using sitsrt::ChatTemplateOptions;
using sitsrt::Error;
using sitsrt::ErrorCode;

// ChatML as SmolLM2 and Qwen write it.
constexpr const char* kChatMl =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

}  // namespace

TEST_CASE("ChatTemplate renders messages with transformers' variables", "[chat]") {
  const ChatTemplate chat(kChatMl, "chatml.jinja");
  const std::vector<ChatMessage> messages = {{"system", "Be brief.", ""}, {"user", "Hi 👋", ""}};
  CHECK(chat.render(messages) == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi 👋<|im_end|>\n<|im_start|>assistant\n");
  ChatTemplateOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  CHECK(chat.render(messages, no_prompt) == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi 👋<|im_end|>\n");

  // tools is None unless given, documents is None, special tokens only when known.
  const ChatTemplate probe("{{ tools }}|{{ documents }}|{{ bos_token is defined }}|{{ eos_token }}|{{ enable_thinking }}", "probe.jinja",
                           "", "</s>");
  ChatTemplateOptions options;
  options.extra_context_json = R"({"enable_thinking": false})";
  CHECK(probe.render({}, options) == "None|None|False|</s>|False");
  options.tools_json = R"([{"type": "function", "function": {"name": "f"}}])";
  CHECK(probe.render({}, options) == "[{'type': 'function', 'function': {'name': 'f'}}]|None|False|</s>|False");
}

TEST_CASE("ChatTemplate passes extra message fields and JSON messages through", "[chat]") {
  const ChatTemplate chat("{% for m in messages %}{{ m.role }}:{{ m.content }}:{{ m.tool_calls[0].function.name if m.tool_calls }};{% endfor %}",
                          "calls.jinja");
  const std::vector<ChatMessage> messages = {
      {"assistant", "", R"({"tool_calls": [{"type": "function", "function": {"name": "get", "arguments": {}}}]})"}};
  CHECK(chat.render(messages) == "assistant::get;");
  CHECK(chat.render_json(R"([{"role": "user", "content": null}, {"role": "user", "content": [{"type": "text", "text": "x"}]}])") ==
        "user:None:;user:[{'type': 'text', 'text': 'x'}]:;");
}

TEST_CASE("ChatTemplate rejects malformed input naming the index and field", "[chat]") {
  const ChatTemplate chat(kChatMl, "chatml.jinja");
  const auto message_of = [&](std::string_view json) {
    try {
      (void)chat.render_json(json);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(message_of(R"({"role": "user"})"), Contains("expected a JSON array"));
  CHECK_THAT(message_of(R"([{"role": "user", "content": "a"}, 3])"), Contains("messages[1]"));
  CHECK_THAT(message_of(R"([{"content": "a"}])"), Contains("messages[0]: no \"role\""));
  CHECK_THAT(message_of(R"([{"role": 7}])"), Contains("messages[0].role"));
  CHECK_THAT(message_of(R"([{"role": "user", "content": 5}])"), Contains("messages[0].content"));
  CHECK_THAT(message_of(R"([{"role": "user", "content": "a")"), Contains("malformed JSON"));
  const std::vector<ChatMessage> bad_utf8 = {{"user", "\xC3", ""}};
  CHECK_THROWS_AS(chat.render(bad_utf8), Error);
  const std::vector<ChatMessage> repeated = {{"user", "a", R"({"role": "x"})"}};
  CHECK_THROWS_AS(chat.render(repeated), Error);
  ChatTemplateOptions options;
  options.extra_context_json = R"({"messages": []})";
  CHECK_THROWS_AS(chat.render({}, options), Error);
}

TEST_CASE("ChatTemplate: strftime_now follows the given clock in UTC", "[chat]") {
  const ChatTemplate chat("{{ strftime_now('%d %b %Y %H:%M') }}", "date.jinja");
  ChatTemplateOptions options;
  options.now_unix_seconds = 1721995200;
  CHECK(chat.render({}, options) == "26 Jul 2024 12:00");
}

TEST_CASE("ChatTemplate renders concurrently from one instance", "[chat]") {
  const ChatTemplate chat(kChatMl, "chatml.jinja");
  std::vector<std::string> results(8);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] {
      const std::vector<ChatMessage> messages = {{"user", std::to_string(i), ""}};
      for (int k = 0; k < 200; ++k) results[i] = chat.render(messages);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (std::size_t i = 0; i < results.size(); ++i) {
    CHECK(results[i] == "<|im_start|>user\n" + std::to_string(i) + "<|im_end|>\n<|im_start|>assistant\n");
  }
}

TEST_CASE("load_chat_template reads a Hugging Face folder and reports a model without a template", "[chat]") {
  const std::filesystem::path folder = std::filesystem::temp_directory_path() / "sitsrt_chat_api_test";
  std::filesystem::create_directories(folder);
  {
    std::ofstream config(folder / "tokenizer_config.json");
    config << R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
                 "chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"}]})";
  }
  const ChatTemplate chat = sitsrt::load_chat_template(folder.string());
  CHECK(chat.bos_token() == "<s>");
  CHECK(chat.eos_token() == "</s>");
  CHECK(chat.render_json(R"([{"role": "user", "content": "hi"}])") == "<s>hi</s>");
  {
    std::ofstream config(folder / "tokenizer_config.json");
    config << R"({"eos_token": "</s>"})";
  }
  try {
    (void)sitsrt::load_chat_template(folder.string());
    FAIL("loaded");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kUnsupported);
    CHECK_THAT(e.what(), Contains("no chat template"));
  }
  std::filesystem::remove_all(folder);
}
