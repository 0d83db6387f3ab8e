// sitsrt make-model: a deterministic random-weight GGUF of any supported architecture, shape and tensor type.
#include "commands.hpp"

#include "core/dtype.hpp"
#include "model/random_model.hpp"

#include <fmt/format.h>

#include <unistd.h>

namespace sitsrt::cli {

int make_model_command(int argc, char** argv) {
  Args args("sitsrt make-model",
            "Write a GGUF of the chosen architecture with deterministic random weights (not a trained model)\n"
            "and a byte-level ASCII vocabulary in which every token decodes. Same options, same bytes.",
            {{"output", 'o', "FILE", "output path (a new file; an existing regular file only with --force)", ""},
             {"force", 0, "", "replace an existing output file (never a device, FIFO, symlink or directory)", ""},
             {"arch", 0, "NAME", "architecture: llama mistral qwen2 qwen3 gemma3", "llama"},
             {"head-dim", 0, "N", "attention head width (written as key_length)", "dim/heads"},
             {"sliding-window", 0, "N", "sliding-window length (mistral, gemma3)", "4096 mistral, 512 gemma3"},
             {"rope-scaling", 0, "TYPE", "rope scaling: none linear yarn llama3", "none"},
             {"rope-factor", 0, "X", "rope scaling factor", "4"},
             {"rope-original-ctx", 0, "N", "context before scaling (yarn, llama3)", "ctx/factor"},
             {"rope-base", 0, "X", "rope frequency base (global layers)", "10000"},
             {"logit-softcap", 0, "X", "final logit soft-cap (0: none)", "0"},
             {"dim", 0, "N", "embedding width", "256"},
             {"layers", 0, "N", "transformer blocks", "4"},
             {"heads", 0, "N", "attention heads", "8"},
             {"kv-heads", 0, "N", "key/value heads (GQA)", "4"},
             {"ffn", 0, "N", "feed-forward width", "704"},
             {"vocab", 0, "N", "vocabulary size (>= 259)", "2048"},
             {"ctx", 0, "N", "training context length written to the metadata", "2048"},
             {"type", 0, "TYPE",
              "2-D weight type: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 fp8 (fp8_e4m3) fp8-channel (one scale per row) "
              "fp8-block (one scale per 128x128 block) q4g128 (q4_g128)\n"
              "q2_k q3_k q4_k q5_k q6_k q8_k iq4_nl,\n"
              "or the mixes q4_k_m / q5_k_m (Q6_K for output.weight and attn_v / ffn_down of about half\n"
              "the layers, llama.cpp's rule)",
              "q8_0"},
             {"tied", 0, "", "share the embedding as the output head (no output.weight)", ""},
             {"seed", 's', "N", "weight seed", "1234"},
             {"name", 0, "TEXT", "general.name", "sitsrt-random"},
             {"threads", 't', "N", "threads for generating weights", "all cores"}});
  args.parse(argc, argv, 2);
  if (args.has("help")) {
    fmt::print("{}", args.help());
    return 0;
  }
  const auto out = args.get("output");
  if (!out) throw UsageError("no output file: pass -o FILE.gguf");
  RandomModelOptions o;
  o.architecture = args.get_or("arch", o.architecture);
  o.head_dim = args.get_int("head-dim", 0, 0, 4096);
  o.sliding_window = args.get_int("sliding-window", 0, 0, 1 << 24);
  o.rope_scaling = args.get_or("rope-scaling", o.rope_scaling);
  o.rope_scaling_factor = static_cast<float>(args.get_double("rope-factor", o.rope_scaling_factor, 1e-6, 1e6));
  o.rope_original_context = args.get_int("rope-original-ctx", 0, 0, 1 << 24);
  o.rope_freq_base = static_cast<float>(args.get_double("rope-base", o.rope_freq_base, 1.0, 1e12));
  o.final_logit_softcap = static_cast<float>(args.get_double("logit-softcap", 0.0, 0.0, 1e6));
  o.dim = args.get_int("dim", o.dim, 1, 1 << 20);
  o.layers = args.get_int("layers", o.layers, 1, 4096);
  o.heads = args.get_int("heads", o.heads, 1, 4096);
  o.kv_heads = args.get_int("kv-heads", o.kv_heads, 1, 4096);
  o.ffn = args.get_int("ffn", o.ffn, 1, 1 << 22);
  o.vocab = args.get_int("vocab", o.vocab, 1, 1 << 24);
  o.context = args.get_int("ctx", o.context, 1, 1 << 24);
  const std::string type = args.get_or("type", "q8_0");
  if (!set_weight_type(o, type)) throw UsageError(fmt::format("unknown --type '{}'", type));
  o.tied_embeddings = args.has("tied");
  o.seed = args.get_uint64("seed", o.seed);
  o.name = args.get_or("name", o.name);
  o.threads = static_cast<int>(args.get_int("threads", 0, 0, 1024));
  const bool tty = isatty(STDERR_FILENO) != 0;
  OutputFileOptions output;
  output.replace_existing = args.has("force");
  output.exists_hint = "pass --force to replace it";
  write_random_model(
      o, *out,
      [&](std::size_t done, std::size_t total) {
        if (tty) fmt::print(stderr, "\rwriting tensors: {}/{}", done, total);
      },
      output);
  if (tty) fmt::print(stderr, "\n");
  fmt::print(stderr, "wrote {} ({}, {:.1f} M parameters, {}, random weights seed {})\n", *out, o.architecture,
             static_cast<double>(random_model_parameters(o)) / 1e6, weight_type_name(o), o.seed);
  return 0;
}

}  // namespace sitsrt::cli
