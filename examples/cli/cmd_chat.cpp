// sitsrt chat: an interactive multi-turn conversation through the model's chat template. Each
// line read is a user turn; the answer streams as it is generated and joins the history.
// Ctrl-C stops the answer being generated (not the program); /clear forgets the history; /exit
// or end of input (Ctrl-D) quits.
#include "commands.hpp"

#include <sitsrt/engine.hpp>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <span>
#include <string>
#include <unistd.h>

namespace sitsrt::cli {
namespace {

std::atomic<bool> g_interrupted{false};

extern "C" void on_sigint(int) { g_interrupted.store(true); }

// SIGINT sets a flag instead of ending the process; without SA_RESTART a read waiting at the
// prompt returns, so the loop can tell an interrupt from the end of input.
struct InterruptGuard {
  struct sigaction previous {};
  InterruptGuard() {
    struct sigaction action {};
    action.sa_handler = on_sigint;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;
    sigaction(SIGINT, &action, &previous);
  }
  ~InterruptGuard() { sigaction(SIGINT, &previous, nullptr); }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
};

constexpr const char* kHelp = "commands: /clear (forget the conversation), /exit (quit), /help; Ctrl-C stops an answer\n";

// Drops the oldest turns (after a system message) until the rendered conversation and the
// answer fit the context; false when even the last user turn alone does not fit.
bool fit_context(const Engine& engine, std::vector<ChatMessage>& messages, std::int32_t answer_tokens) {
  const std::int64_t context = engine.model_info().context_length;
  const std::size_t first = !messages.empty() && messages.front().role == "system" ? 1 : 0;
  for (;;) {
    const auto prompt = static_cast<std::int64_t>(engine.chat_tokens(messages).size());
    if (prompt + answer_tokens <= context) return true;
    if (messages.size() - first <= 1) return false;
    // Remove the oldest turn and any answers that followed it, up to the next user turn.
    auto end = messages.begin() + static_cast<std::ptrdiff_t>(first) + 1;
    while (end != messages.end() && end->role != "user") ++end;
    messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first), end);
    fmt::print(stderr, "(the conversation outgrew the context of {} tokens: the oldest turn was dropped)\n", context);
  }
}

}  // namespace

int chat_command(int argc, char** argv) {
  std::vector<OptionSpec> specs = engine_option_specs();
  for (auto* group : {&chat_option_specs, &sampling_option_specs, &audit_option_specs}) {
    const std::vector<OptionSpec> more = (*group)();
    specs.insert(specs.end(), more.begin(), more.end());
  }
  specs.push_back({"quiet", 'q', "", "no per-answer statistics on stderr", ""});
  Args args("sitsrt chat",
            "Talk with a chat model: each input line is a user turn, the answer streams and joins the "
            "conversation.\n/clear forgets it, /exit (or Ctrl-D) quits, Ctrl-C stops the current answer.",
            specs);
  args.parse(argc, argv, 2);
  if (args.has("help")) {
    fmt::print("{}", args.help());
    return 0;
  }
  if (!args.positional().empty()) throw UsageError("sitsrt chat reads the conversation from its input, not arguments");
  GenerationConfig config = generation_config_from(args, 512);
  EngineOptions engine_options = engine_options_from(args);
  apply_chat_options(args, engine_options);
  apply_audit_options(args, engine_options, config);
  const std::vector<std::shared_ptr<AuditSink>> audit_sinks = engine_options.audit_sinks;
  const Engine engine(std::move(engine_options));
  if (engine.chat_template() == nullptr) {
    (void)engine.apply_chat_template(std::span<const ChatMessage>{}, true);  // throws the reason (no template, or why it did not parse)
  }
  const bool interactive = isatty(STDIN_FILENO) != 0;
  const bool quiet = args.has("quiet");
  std::vector<ChatMessage> history;
  if (const auto system = args.get("system")) history.push_back({"system", *system, {}});
  const std::size_t kept = history.size();
  if (interactive) {
    const ModelInfo& info = engine.model_info();
    fmt::print(stderr, "sitsrt chat: {} ({}, context {}). {}", info.name.empty() ? info.path : info.name,
               info.architecture, info.context_length, kHelp);
  }

  const InterruptGuard guard;
  std::string line;
  for (;;) {
    if (interactive) {
      fmt::print("> ");
      std::fflush(stdout);
    }
    g_interrupted = false;
    if (!std::getline(std::cin, line)) {
      // Ctrl-C at the prompt: a fresh prompt (the interrupted read looks like end of input to
      // the stream, so the flag decides).
      if (g_interrupted.load()) {
        std::cin.clear();
        clearerr(stdin);
        fmt::print("\n");
        continue;
      }
      if (interactive) fmt::print("\n");
      break;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/clear") {
      history.resize(kept);
      fmt::print(stderr, "(conversation cleared)\n");
      continue;
    }
    if (line == "/help") {
      fmt::print(stderr, "{}", kHelp);
      continue;
    }
    if (line.front() == '/' && line.find(' ') == std::string::npos) {
      fmt::print(stderr, "unknown command {}; {}", line, kHelp);
      continue;
    }
    history.push_back({"user", line, {}});
    if (!fit_context(engine, history, config.max_new_tokens)) {
      fmt::print(stderr, "error: this message alone does not fit the context of {} tokens with {} for the answer\n",
                 engine.model_info().context_length, config.max_new_tokens);
      history.pop_back();
      continue;
    }
    const GenerationResult result = engine.chat(history, config, [](const TokenEvent& e) {
      fmt::print("{}", e.text);
      std::fflush(stdout);
      return !g_interrupted.load();
    });
    const bool stopped = result.finish_reason == FinishReason::kCallback;
    fmt::print("\n");
    std::fflush(stdout);
    if (stopped) fmt::print(stderr, "(answer stopped)\n");
    // The answer joins the history as the caller saw it (also when stopped part-way).
    history.push_back({"assistant", result.text, {}});
    // A log write that failed (disk full, ulimit -f) ends the conversation with its error.
    for (const auto& sink : audit_sinks) sink->flush();
    if (!quiet) {
      const GenerationTimings& t = result.timings;
      fmt::print(stderr, "[{} prompt tokens: {:.1f} tok/s | {} generated: {:.1f} tok/s | finish: {}]\n",
                 t.prompt_tokens, t.prefill_tokens_per_second(), t.generated_tokens, t.decode_tokens_per_second(),
                 to_string(result.finish_reason));
    }
  }
  return 0;
}

}  // namespace sitsrt::cli
