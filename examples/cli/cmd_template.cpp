// sitsrt template: render a chat template over a conversation, byte for byte as transformers'
// apply_chat_template would (tests/reference/test_chat_templates.py compares the two). Uses
// only the public API.
#include "commands.hpp"

#include <sitsrt/chat.hpp>
#include <sitsrt/error.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

namespace sitsrt::cli {
namespace {

std::string read_text(const std::string& path, std::string_view what) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::kIo, fmt::format("cannot read the {} file '{}'", what, path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Errors go on one line: a template's raise_exception() message may span several.
std::string one_line(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c != '\r') {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

int template_command(int argc, char** argv) {
  Args args("sitsrt template",
            "Render a chat template over a conversation, as Hugging Face transformers' apply_chat_template\n"
            "does, and print the text exactly (no newline is added). The template comes from a model (GGUF\n"
            "tokenizer.chat_template, or chat_template in a Hugging Face directory's tokenizer_config.json,\n"
            "with the model's BOS/EOS texts) or from a file.",
            {{"model", 'm', "PATH", "take the template and BOS/EOS tokens from this GGUF file or HF directory", ""},
             {"template", 0, "FILE", "take the template from this file (Jinja text)", ""},
             {"messages", 0, "FILE", "the conversation: a JSON array of OpenAI-style messages; - reads standard input", ""},
             {"add-generation-prompt", 0, "", "end with the header of an assistant turn", ""},
             {"bos-token", 0, "TEXT", "the bos_token variable (overrides the model's)", ""},
             {"eos-token", 0, "TEXT", "the eos_token variable (overrides the model's)", ""},
             {"tools", 0, "FILE", "a JSON array of tool definitions, the template's `tools`", "None"},
             {"context", 0, "JSON", "more template variables as a JSON object, e.g. '{\"enable_thinking\": false}'", ""},
             {"now", 0, "UNIX_SECONDS", "the clock of strftime_now(), in UTC", "the system clock, local time"},
             {"json", 0, "", "print {\"text\": RENDERING, \"origin\": TEMPLATE} as one JSON line instead", ""}});
  args.parse(argc, argv, 2);
  if (args.has("help")) {
    fmt::print("{}", args.help());
    return 0;
  }
  if (!args.positional().empty()) throw UsageError(fmt::format("unexpected argument '{}'", args.positional().front()));
  if (args.has("model") == args.has("template")) throw UsageError("pass exactly one of -m MODEL and --template FILE");
  const std::optional<std::string> messages_path = args.get("messages");
  if (!messages_path) throw UsageError("no conversation given: pass --messages FILE (or - for standard input)");
  ChatTemplateOptions options;
  options.add_generation_prompt = args.has("add-generation-prompt");
  if (const auto now = args.get("now")) {
    std::int64_t seconds = 0;
    const auto result = std::from_chars(now->data(), now->data() + now->size(), seconds);
    if (result.ec != std::errc() || result.ptr != now->data() + now->size()) {
      throw UsageError(fmt::format("--now must be an integer number of seconds, got '{}'", *now));
    }
    options.now_unix_seconds = seconds;
  }
  options.extra_context_json = args.get_or("context", "");
  try {
    if (const auto tools = args.get("tools")) options.tools_json = read_text(*tools, "tools");
    ChatTemplate chat_template = [&] {
      if (const auto model = args.get("model")) {
        ChatTemplate loaded = load_chat_template(*model);
        if (!args.has("bos-token") && !args.has("eos-token")) return loaded;
        return ChatTemplate(loaded.source(), loaded.origin(), args.get_or("bos-token", loaded.bos_token()),
                            args.get_or("eos-token", loaded.eos_token()));
      }
      const std::string path = *args.get("template");
      return ChatTemplate(read_text(path, "template"), path, args.get_or("bos-token", ""), args.get_or("eos-token", ""));
    }();
    const std::string messages = read_text(*messages_path, "messages");
    const std::string text = chat_template.render_json(messages, options);
    if (args.has("json")) {
      const nlohmann::json out = {{"text", text}, {"origin", chat_template.origin()}};
      fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
  } catch (const Error& e) {
    throw Error(e.code(), one_line(e.what()));
  }
  return 0;
}

}  // namespace sitsrt::cli
