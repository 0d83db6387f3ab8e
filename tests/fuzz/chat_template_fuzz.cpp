// libFuzzer target: the chat-template lexer, parser and interpreter on arbitrary text. Property:
// loading and rendering (over a small tool-calling conversation, under tight limits) either
// succeeds or throws sitsrt::Error; nothing crashes, hangs or throws anything else.
#include "chat/template.hpp"
#include "chat/unicode.hpp"

#include <sitsrt/error.hpp>

#include <cstdint>
#include <string_view>

namespace {

const sitsrt::chat::Value& context() {
  static const sitsrt::chat::Value value = sitsrt::chat::value_from_json(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris? ☀️"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21}"}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"
  })", "fuzz context");
  return value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  sitsrt::chat::RenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_loop_iterations = 20000;
  limits.max_call_depth = 16;
  limits.max_string_work_bytes = 1 << 22;
  limits.max_objects = 20000;
  try {
    const sitsrt::chat::Template parsed(source, "fuzz.jinja");
    (void)parsed.render(context().dict(), limits, 1721995200);
  } catch (const sitsrt::Error&) {
    // a clean refusal
  }
  return 0;
}
