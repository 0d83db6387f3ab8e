// sitsrt run: stream a generation as text, or as one JSON object per token (--json).
#include "commands.hpp"

#include <sitsrt/engine.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>

namespace sitsrt::cli {

int run_command(int argc, char** argv) {
  std::vector<OptionSpec> specs = engine_option_specs();
  const std::vector<OptionSpec> prompt_specs = {
      {"prompt", 'p', "TEXT", "prompt text", "\"\""},
      {"file", 'f', "FILE", "read the prompt from a file (- for standard input)", ""},
      {"chat", 0, "", "treat the prompt as one user turn: render it with the model's chat template (with the "
                      "generation prompt), generate the answer, stop at the end-of-turn token", ""},
  };
  specs.insert(specs.end(), prompt_specs.begin(), prompt_specs.end());
  for (auto* group : {&chat_option_specs, &sampling_option_specs}) {
    const std::vector<OptionSpec> more = (*group)();
    specs.insert(specs.end(), more.begin(), more.end());
  }
  const std::vector<OptionSpec> output_specs = {
      {"no-bos", 0, "", "do not prepend the BOS token", ""},
      {"echo", 0, "", "print the prompt (with --chat: the rendered prompt) before the generated text", ""},
      {"json", 0, "", "one JSON object per generated token, then a summary object", ""},
      {"quiet", 'q', "", "no timing summary on stderr", ""},
      {"stats", 0, "", "after the summary, the serving core's limits and counters on stderr (--json: always "
                       "in the summary object)", ""},
  };
  specs.insert(specs.end(), output_specs.begin(), output_specs.end());
  const std::vector<OptionSpec> audit_specs = audit_option_specs();
  specs.insert(specs.end(), audit_specs.begin(), audit_specs.end());
  Args args("sitsrt run", "Generate text from a prompt (or, with --chat, answer it as a chat turn).", specs);
  args.parse(argc, argv, 2);
  if (args.has("help")) {
    fmt::print("{}", args.help());
    return 0;
  }
  std::string prompt = args.get_or("prompt", "");
  if (const auto file = args.get("file")) {
    if (args.has("prompt")) throw UsageError("give the prompt with -p or -f, not both");
    prompt = read_text_file(*file, "prompt file");
  }
  const bool chat = args.has("chat");
  if (!chat && args.has("system")) throw UsageError("--system needs --chat (or use 'sitsrt chat')");
  GenerationConfig config = generation_config_from(args, 128);
  if (args.has("no-bos")) config.add_bos = false;
  const bool json = args.has("json");

  EngineOptions engine_options = engine_options_from(args);
  apply_chat_options(args, engine_options);
  apply_audit_options(args, engine_options, config);
  const std::vector<std::shared_ptr<AuditSink>> audit_sinks = engine_options.audit_sinks;
  const Engine engine(std::move(engine_options));
  const std::vector<ChatMessage> messages = chat ? chat_messages(args, prompt) : std::vector<ChatMessage>{};
  if (args.has("echo") && !json) {
    fmt::print("{}", chat ? engine.apply_chat_template(messages, true) : prompt);
    std::fflush(stdout);
  }
  const auto on_token = [&](const TokenEvent& e) {
    if (json) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& t : e.top) top.push_back({{"id", t.id}, {"logprob", t.logprob}});
      const nlohmann::json line = {{"type", "token"},     {"step", e.index},   {"id", e.token_id},
                                   {"text", e.text},      {"logprob", e.logprob}, {"entropy", e.entropy},
                                   {"top", top},          {"t", e.seconds_since_start}};
      fmt::print("{}\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
      fmt::print("{}", e.text);
    }
    std::fflush(stdout);
    return true;
  };
  const GenerationResult result =
      chat ? engine.chat(messages, config, on_token) : engine.generate(prompt, config, on_token);
  // A log or trace write that failed after the last token (disk full, ulimit -f) fails the run too.
  for (const auto& sink : audit_sinks) sink->flush();
  const GenerationTimings& t = result.timings;
  if (json) {
    const nlohmann::json summary = {
        {"type", "summary"},
        {"finish_reason", to_string(result.finish_reason)},
        {"text", result.text},
        {"prompt_tokens", result.prompt_tokens},
        {"tokens", result.tokens},
        {"seed", result.seed},
        {"weights", weights_json(engine.model_info())},
        {"serving", serving_json(engine.queue_stats())},
        {"timings", {{"prompt_tokens", t.prompt_tokens}, {"generated_tokens", t.generated_tokens},
                     {"prefill_seconds", t.prefill_seconds}, {"decode_seconds", t.decode_seconds},
                     {"prefill_tokens_per_s", t.prefill_tokens_per_second()},
                     {"decode_tokens_per_s", t.decode_tokens_per_second()}}},
    };
    fmt::print("{}\n", summary.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    fmt::print("\n");
    std::fflush(stdout);  // keep the summary after the text when both streams share a terminal or pipe
    if (!args.has("quiet")) {
      fmt::print(stderr, "[{} prompt tokens: {:.1f} tok/s | {} generated: {:.1f} tok/s | finish: {} | seed {}]\n",
                 t.prompt_tokens, t.prefill_tokens_per_second(), t.generated_tokens, t.decode_tokens_per_second(),
                 to_string(result.finish_reason), result.seed);
    }
    if (args.has("stats")) fmt::print(stderr, "[{}]\n", serving_text(engine.queue_stats()));
  }
  return 0;
}

}  // namespace sitsrt::cli
