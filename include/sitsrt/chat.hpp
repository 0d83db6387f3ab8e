// Chat templates: turn a conversation into the prompt text a model was trained on, by running
// the model's Jinja chat template (GGUF tokenizer.chat_template, or chat_template in a Hugging
// Face tokenizer_config.json) the way Hugging Face transformers' apply_chat_template does.
//
// The interpreter implements the Jinja2 subset chat templates use (docs/chat-templates.md lists
// it); a template using anything else is rejected when it is loaded, never rendered wrongly.
#pragma once

#include <sitsrt/export.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace sitsrt {

// One OpenAI-style message.
struct ChatMessage {
  std::string role;     // "system", "user", "assistant", "tool", ...
  std::string content;  // UTF-8 text
  // Any other fields as the text of a JSON object (tool_calls, tool_call_id, name,
  // reasoning_content, ...); "" for none. It may not repeat "role", nor "content" unless
  // `content` is empty: non-text content (an OpenAI list of parts) is given that way.
  std::string extra_json;
};

struct ChatTemplateOptions {
  // Ends the rendering with the header of an assistant turn (transformers'
  // add_generation_prompt). The sitsrt CLI defaults to false, as transformers does.
  bool add_generation_prompt = true;
  // An OpenAI-style tools array (JSON text); "": the template's `tools` is None, as
  // transformers passes it when no tools are given.
  std::string tools_json;
  // More template variables as a JSON object, e.g. {"enable_thinking": false}. It may not set
  // messages, tools, documents or add_generation_prompt.
  std::string extra_context_json;
  // The clock of strftime_now() as Unix seconds, formatted in UTC; unset: the system clock in
  // local time (what transformers' datetime.now() gives).
  std::optional<std::int64_t> now_unix_seconds;
  // Bounds on what a (possibly hostile) template may do; exceeding one is an Error.
  std::size_t max_output_bytes = std::size_t{64} << 20;
  std::int64_t max_loop_iterations = 10'000'000;
  int max_call_depth = 64;  // nested macro calls and recursive loops
};

// A parsed chat template. Immutable after construction: copies share the parsed form and
// every member may be called from several threads at once.
class SITSRT_API ChatTemplate {
 public:
  // Parses `source`. `origin` (a file name, or "MODEL: tokenizer.chat_template") names the
  // template in error messages. bos_token and eos_token become the template variables of the
  // same names; "" leaves the variable undefined (as transformers does for a tokenizer
  // without that token). Throws Error kInvalidArgument for a syntax error and kUnsupported for
  // a construct this implementation does not support, naming origin:line:column.
  ChatTemplate(std::string_view source, std::string origin, std::string bos_token = {}, std::string eos_token = {});
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&);
  ChatTemplate& operator=(const ChatTemplate&);
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Renders `messages`. Throws Error kInvalidArgument for invalid input (naming the message
  // index and field), for every error the template raises in Python's jinja2 (including
  // raise_exception(), whose message the Error carries) and for an exceeded limit;
  // kUnsupported where jinja2 would do something this implementation does not reproduce.
  // Errors raised by the template name origin:line:column.
  [[nodiscard]] std::string render(std::span<const ChatMessage> messages, const ChatTemplateOptions& options = {}) const;
  // Renders an OpenAI message list given as JSON text (an array of objects with a string
  // "role"; "content" a string, null or a list of parts). Its errors name the bad index/field.
  [[nodiscard]] std::string render_json(std::string_view messages_json, const ChatTemplateOptions& options = {}) const;

  [[nodiscard]] const std::string& source() const noexcept;
  [[nodiscard]] const std::string& origin() const noexcept;
  [[nodiscard]] const std::string& bos_token() const noexcept;
  [[nodiscard]] const std::string& eos_token() const noexcept;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// The chat template a model carries — GGUF tokenizer.chat_template, or chat_template in a
// Hugging Face directory's tokenizer_config.json — with the texts of its BOS and EOS tokens.
// Throws Error kUnsupported naming the file when the model has no chat template, and the
// tokenizer's errors for an unreadable model.
SITSRT_API ChatTemplate load_chat_template(const std::string& model_path);

}  // namespace sitsrt
