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

// Options shared by every command that loads a model.
std::vector<OptionSpec> engine_option_specs();
EngineOptions engine_options_from(const Args& args);

// --weights (EngineOptions::weights) and how a loaded engine reports its conversion.
OptionSpec weights_option_spec();
nlohmann::json weights_json(const ModelInfo& info);
std::string weights_text(const ModelInfo& info);

// An HMAC key from a file: its bytes, less one trailing newline. Throws UsageError.
std::string read_key_file(const std::string& path);

// Prints a one-line, self-overwriting progress indicator on stderr.
void print_progress(std::string_view stage, double fraction);

}  // namespace sitsrt::cli
