// sitsrt: run, inspect and benchmark models with libsitsrt.
#include "commands.hpp"

#include <sitsrt/error.hpp>
#include <sitsrt/version.hpp>

#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <new>
#include <string_view>
#include <unistd.h>

namespace {

constexpr const char* kUsage = R"(usage: sitsrt <command> [options]

commands:
  run         generate text from a prompt (streams text, or one JSON object per token with --json; --chat)
  chat        talk with a chat model, turn by turn, through its chat template
  serve       serve a model over an OpenAI-compatible HTTP API (completions, chat, streaming, logprobs)
  info        print a model's (GGUF file or HF directory) metadata, tensor table, parameter count and bytes by type
  graph       print the computation graph and activation memory plan, or --plan the device plan
  bench       measure prefill and decode tokens/s against the memory-bandwidth floor
  tokenize    print the token ids of a text (GGUF model or tokenizer.json; --json, --batch)
  template    render a model's chat template over a conversation, as transformers' apply_chat_template
  logits      print the raw next-token logits for token ids or a prompt as JSON
  perplexity  perplexity of a text (llama-perplexity style); save or compare KL-divergence bases
  convert     convert a Hugging Face model directory (config.json + safetensors) to GGUF
  make-model  write a deterministic random-weight GGUF (llama, mistral, qwen2, qwen3, gemma3)
  audit       verify, replay or show an audit log (sitsrt audit verify|replay|show --help)

'sitsrt <command> --help' describes a command's options.
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string_view command = argv[1];
  // Past RLIMIT_FSIZE (ulimit -f) a write fails with EFBIG, reported as "File too large" naming
  // the file, instead of the process being killed by SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  if (command == "--version") {
    fmt::print("sitsrt {}\n", sitsrt::kVersion);
    return 0;
  }
  try {
    if (command == "run") return sitsrt::cli::run_command(argc, argv);
    if (command == "chat") return sitsrt::cli::chat_command(argc, argv);
#ifdef SITSRT_CLI_NO_SERVE
    if (command == "serve") {
      fmt::print(stderr, "sitsrt serve: not built in (configured with SITSRT_CLI_SERVE=OFF)\n");
      return 2;
    }
#else
    if (command == "serve") return sitsrt::cli::serve_command(argc, argv);
#endif
    if (command == "info") return sitsrt::cli::info_command(argc, argv);
    if (command == "graph") return sitsrt::cli::graph_command(argc, argv);
    if (command == "bench") return sitsrt::cli::bench_command(argc, argv);
    if (command == "audit") return sitsrt::cli::audit_command(argc, argv);
    if (command == "tokenize") return sitsrt::cli::tokenize_command(argc, argv);
    if (command == "template") return sitsrt::cli::template_command(argc, argv);
    if (command == "logits") return sitsrt::cli::logits_command(argc, argv);
    if (command == "perplexity") return sitsrt::cli::perplexity_command(argc, argv);
    if (command == "convert") return sitsrt::cli::convert_command(argc, argv);
    if (command == "make-model") return sitsrt::cli::make_model_command(argc, argv);
    fmt::print(stderr, "sitsrt: unknown command '{}'\n\n{}", command, kUsage);
    return 2;
  } catch (const sitsrt::cli::UsageError& e) {
    fmt::print(stderr, "sitsrt {}: {}\n", command, e.what());
    return 2;
  } catch (const sitsrt::Error& e) {
    fmt::print(stderr, "sitsrt {}: error: {}\n", command, e.what());
    return 1;
  } catch (const std::bad_alloc&) {  // past ulimit -v, or the machine's memory
    fmt::print(stderr, "sitsrt {}: error: out of memory (an allocation failed; raise the memory limit, or for a model "
               "try a smaller --ctx or --mmap)\n", command);
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "sitsrt {}: unexpected error: {}\n", command, e.what());
    return 1;
  }
}
