// Options shared by the commands that generate (run, chat): sampling and audit logging.
#include "commands.hpp"

#include <fmt/format.h>

#include <cstdlib>

namespace sitsrt::cli {

std::vector<OptionSpec> sampling_option_specs() {
  return {
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
      {"ignore-eos", 0, "", "keep generating after the end-of-sequence (or end-of-turn) token", ""},
  };
}

GenerationConfig generation_config_from(const Args& args, std::int32_t default_max_tokens) {
  GenerationConfig config;
  config.max_new_tokens = static_cast<std::int32_t>(args.get_int("max-tokens", default_max_tokens, 0, INT32_MAX));
  config.temperature = static_cast<float>(args.get_double("temp", 0.8, 0.0, 1e6));
  config.top_k = static_cast<std::int32_t>(args.get_int("top-k", 40, 0, INT32_MAX));
  config.top_p = static_cast<float>(args.get_double("top-p", 0.95, 0.0, 1.0));
  config.min_p = static_cast<float>(args.get_double("min-p", 0.05, 0.0, 1.0));
  config.repeat_penalty = static_cast<float>(args.get_double("repeat-penalty", 1.0, 1e-6, 1e6));
  config.repeat_last_n = static_cast<std::int32_t>(args.get_int("repeat-last-n", 64, 0, INT32_MAX));
  if (args.has("seed")) config.seed = args.get_uint64("seed", 0);
  config.stop = args.all("stop");
  config.top_logprobs = static_cast<std::int32_t>(args.get_int("top-logprobs", 5, 0, 64));
  config.stop_at_end_of_sequence = !args.has("ignore-eos");
  return config;
}

std::vector<OptionSpec> audit_option_specs() {
  return {
      {"audit-log", 0, "FILE",
       "write a hash-chained JSONL audit log (a new file unless --audit-append; rotations go to FILE.1, ...)", ""},
      {"audit-append", 0, "",
       "continue an existing --audit-log: its last file is verified, then its chain goes on (created if missing)", ""},
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
}

void apply_audit_options(const Args& args, EngineOptions& engine_options, GenerationConfig& config) {
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
    log_options.rotate_bytes = args.get_uint64("audit-rotate-bytes", 0);
    log_options.append = args.has("audit-append");
    for (const auto& step : args.all("audit-full-step")) {
      char* end = nullptr;
      const long long i = std::strtoll(step.c_str(), &end, 10);
      if (step.empty() || *end != '\0' || i < 0) {
        throw UsageError(fmt::format("--audit-full-step expects a token index, got '{}'", step));
      }
      config.audit.full_distribution_steps.push_back(i);
    }
    config.audit.metadata = {args.get_or("audit-tenant", ""), args.get_or("audit-user", ""), args.all("audit-tag")};
    // Created last, so that a usage error leaves no log file behind.
    engine_options.audit_sinks.push_back(make_jsonl_audit_sink(log_options));
  } else if (args.has("audit-key-file")) {
    throw UsageError("--audit-key-file needs --audit-log FILE");
  } else if (args.has("audit-append")) {
    throw UsageError("--audit-append needs --audit-log FILE");
  }
  if (const auto trace = args.get("otlp-trace")) engine_options.audit_sinks.push_back(make_otlp_trace_sink({*trace}));
}

}  // namespace sitsrt::cli

namespace sitsrt::cli {

std::vector<OptionSpec> chat_option_specs() {
  return {
      {"system", 0, "TEXT", "system message (replaces the chat template's default one)", ""},
      {"chat-template-file", 0, "FILE", "use this Jinja chat template instead of the model's", ""},
  };
}

void apply_chat_options(const Args& args, EngineOptions& engine_options) {
  if (const auto file = args.get("chat-template-file")) {
    engine_options.chat_template = read_text_file(*file, "chat template file", 1u << 24);
    if (engine_options.chat_template.empty()) throw UsageError(fmt::format("chat template file '{}' is empty", *file));
  }
}

std::vector<ChatMessage> chat_messages(const Args& args, const std::string& user_text) {
  std::vector<ChatMessage> messages;
  if (const auto system = args.get("system")) messages.push_back({"system", *system, {}});
  messages.push_back({"user", user_text, {}});
  return messages;
}

}  // namespace sitsrt::cli
