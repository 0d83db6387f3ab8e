// sitsrt run: stream a generation as text, or as one JSON object per token (--json).
#include "commands.hpp"

#include <sitsrt/engine.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace sitsrt::cli {

int run_command(int argc, char** argv) {
  std::vector<OptionSpec> specs = engine_option_specs();
  const std::vector<OptionSpec> more = {
      {"prompt", 'p', "TEXT", "prompt text", "\"\""},
      {"file", 'f', "FILE", "read the prompt from a file", ""},
      {"max-tokens", 'n', "N", "tokens to generate", "128"},
      {"temp", 0, "T", "temperature; 0 = greedy", "0.8"},
      {"top-k", 0, "K", "keep the K most likely tokens; 0 = off", "40"},
      {"top-p", 0, "P", "nucleus sampling threshold; 1 = off", "0.95"},
      {"min-p", 0, "P", "drop tokens below P x the top probability; 0 = off", "0.05"},
      {"repeat-penalty", 0, "X", "penalty for recently seen tokens; 1 = off", "1.0"},
      {"repeat-last-n", 0, "N", "history window of the repeat penalty", "64"},
      {"seed", 's', "N", "sampling seed (same seed, same tokens)", "random"},
      {"stop", 0, "TEXT", "stop when TEXT appears (repeatable)", ""},
      {"top-logprobs", 0, "K", "alternatives reported per token", "5"},
      {"ignore-eos", 0, "", "keep generating after the end-of-sequence token", ""},
      {"no-bos", 0, "", "do not prepend the BOS token", ""},
      {"echo", 0, "", "print the prompt before the generated text", ""},
      {"json", 0, "", "one JSON object per generated token, then a summary object", ""},
      {"quiet", 'q', "", "no timing summary on stderr", ""},
      {"audit-log", 0, "FILE", "write a hash-chained JSONL audit log (a new file; rotations go to FILE.1, ...)", ""},
      {"audit-level", 0, "LEVEL", "audit trace level: off, tokens, topk, full", "tokens"},
      {"audit-full-step", 0, "I", "at level full, record the whole distribution of token I (repeatable)", ""},
      {"audit-key-file", 0, "FILE", "authenticate the audit log with HMAC-SHA-256 under this key", ""},
      {"audit-fsync", 0, "WHEN", "fsync the audit log per: record, request or never", "request"},
      {"audit-rotate-bytes", 0, "N", "start a new audit file past N bytes; 0 = never", "0"},
      {"audit-tenant", 0, "TEXT", "tenant recorded with the request", ""},
      {"audit-user", 0, "TEXT", "user recorded with the request", ""},
      {"audit-tag", 0, "TEXT", "tag recorded with the request (repeatable)", ""},
      {"otlp-trace", 0, "FILE", "append an OpenTelemetry OTLP/JSON span (token events per --audit-level)", ""},
  };
  specs.insert(specs.end(), more.begin(), more.end());
  Args args("sitsrt run", "Generate text from a prompt with a GGUF model.", specs);
  args.parse(argc, argv, 2);
  if (args.has("help")) {
    fmt::print("{}", args.help());
    return 0;
  }
  std::string prompt = args.get_or("prompt", "");
  if (const auto file = args.get("file")) {
    std::ifstream in(*file, std::ios::binary);
    if (!in) throw UsageError(fmt::format("cannot read prompt file '{}'", *file));
    std::stringstream ss;
    ss << in.rdbuf();
    prompt = ss.str();
  }
  GenerationConfig config;
  config.max_new_tokens = static_cast<std::int32_t>(args.get_int("max-tokens", 128));
  config.temperature = static_cast<float>(args.get_double("temp", 0.8));
  config.top_k = static_cast<std::int32_t>(args.get_int("top-k", 40));
  config.top_p = static_cast<float>(args.get_double("top-p", 0.95));
  config.min_p = static_cast<float>(args.get_double("min-p", 0.05));
  config.repeat_penalty = static_cast<float>(args.get_double("repeat-penalty", 1.0));
  config.repeat_last_n = static_cast<std::int32_t>(args.get_int("repeat-last-n", 64));
  if (args.has("seed")) config.seed = static_cast<std::uint64_t>(args.get_int("seed", 0));
  config.stop = args.all("stop");
  config.top_logprobs = static_cast<std::int32_t>(args.get_int("top-logprobs", 5));
  config.stop_at_end_of_sequence = !args.has("ignore-eos");
  if (args.has("no-bos")) config.add_bos = false;
  const bool json = args.has("json");

  EngineOptions engine_options = engine_options_from(args);
  if (args.has("audit-log") || args.has("otlp-trace")) {
    config.audit.level = parse_trace_level(args.get_or("audit-level", "tokens"));
  } else if (args.has("audit-level")) {
    throw UsageError("--audit-level needs --audit-log FILE or --otlp-trace FILE");
  }
  if (const auto log = args.get("audit-log")) {
    JsonlAuditLogOptions log_options;
    log_options.path = *log;
    if (const auto key = args.get("audit-key-file")) log_options.hmac_key = read_key_file(*key);
    const std::string fsync = args.get_or("audit-fsync", "request");
    if (fsync == "record") {
      log_options.durability = Durability::kPerRecord;
    } else if (fsync == "request") {
      log_options.durability = Durability::kPerRequest;
    } else if (fsync == "never") {
      log_options.durability = Durability::kNever;
    } else {
      throw UsageError(fmt::format("--audit-fsync must be record, request or never, got '{}'", fsync));
    }
    log_options.rotate_bytes = static_cast<std::uint64_t>(args.get_int("audit-rotate-bytes", 0));
    for (const auto& step : args.all("audit-full-step")) {
      char* end = nullptr;
      const long long i = std::strtoll(step.c_str(), &end, 10);
      if (step.empty() || *end != '\0' || i < 0) throw UsageError(fmt::format("--audit-full-step expects a token index, got '{}'", step));
      config.audit.full_distribution_steps.push_back(i);
    }
    config.audit.metadata = {args.get_or("audit-tenant", ""), args.get_or("audit-user", ""), args.all("audit-tag")};
    // Created last, so that a usage error leaves no log file behind.
    engine_options.audit_sinks.push_back(make_jsonl_audit_sink(log_options));
  } else if (args.has("audit-key-file")) {
    throw UsageError("--audit-key-file needs --audit-log FILE");
  }
  if (const auto trace = args.get("otlp-trace")) engine_options.audit_sinks.push_back(make_otlp_trace_sink({*trace}));
  const std::vector<std::shared_ptr<AuditSink>> audit_sinks = engine_options.audit_sinks;
  const Engine engine(std::move(engine_options));
  if (args.has("echo") && !json) {
    fmt::print("{}", prompt);
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
  const GenerationResult result = engine.generate(prompt, config, on_token);
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
  }
  return 0;
}

}  // namespace sitsrt::cli
