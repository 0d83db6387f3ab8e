// Subcommands of the sitsrt command-line tool. Each returns the process exit code.
#pragma once

#include "args.hpp"

#include <sitsrt/engine.hpp>

#include <nlohmann/json.hpp>

#include <vector>

namespace sitsrt::cli {

int run_command(int argc, char** argv);
int info_command(int argc, char** argv);
int graph_command(int argc, char** argv);
int bench_command(int argc, char** argv);
int make_model_command(int argc, char** argv);
int logits_command(int argc, char** argv);
int convert_command(int argc, char** argv);
int audit_command(int argc, char** argv);
int tokenize_command(int argc, char** argv);
int perplexity_command(int argc, char** argv);
int template_command(int argc, char** argv);
int chat_command(int argc, char** argv);
int serve_command(int argc, char** argv);

// Sampling options (run, chat) and the GenerationConfig they give.
std::vector<OptionSpec> sampling_option_specs();
GenerationConfig generation_config_from(const Args& args, std::int32_t default_max_tokens);
// --audit-log and friends: adds the sinks to the engine options and sets the trace level.
std::vector<OptionSpec> audit_option_specs();
void apply_audit_options(const Args& args, EngineOptions& engine_options, GenerationConfig& config);
// --system and --chat-template-file (run --chat, chat).
std::vector<OptionSpec> chat_option_specs();
void apply_chat_options(const Args& args, EngineOptions& engine_options);
// [--system message,] one user message.
std::vector<ChatMessage> chat_messages(const Args& args, const std::string& user_text);

// Options shared by every command that loads a model.
std::vector<OptionSpec> engine_option_specs();
EngineOptions engine_options_from(const Args& args);

// --weights (EngineOptions::weights) and how a loaded engine reports its conversion.
OptionSpec weights_option_spec();
nlohmann::json weights_json(const ModelInfo& info);
std::string weights_text(const ModelInfo& info);

// The serving core's limits (as resolved at load) and counters, from Engine::queue_stats().
nlohmann::json serving_json(const RequestQueueStats& stats);
std::string serving_text(const RequestQueueStats& stats);

// The bytes of a regular file ('-': standard input) of at most max_bytes; throws UsageError
// naming `what` and the path otherwise (missing, a directory or device, unreadable, too large).
std::string read_text_file(const std::string& path, std::string_view what, std::uintmax_t max_bytes = 1u << 30);

// An HMAC key from a file: its bytes, less one trailing newline. Throws UsageError.
std::string read_key_file(const std::string& path);

// Prints a one-line, self-overwriting progress indicator on stderr.
void print_progress(std::string_view stage, double fraction);

}  // namespace sitsrt::cli
