// sitsrt make-model: a deterministic random-weight llama GGUF of any shape and tensor type.
#include "commands.hpp"

#include "core/dtype.hpp"
#include "model/random_model.hpp"

#include <fmt/format.h>

#include <unistd.h>

namespace sitsrt::cli {

int make_model_command(int argc, char** argv) {
  Args args("sitsrt make-model",
            "Write a llama-architecture GGUF with deterministic random weights (not a trained model)\n"
            "and a byte-level ASCII vocabulary in which every token decodes. Same options, same bytes.",
            {{"output", 'o', "FILE", "output path", ""},
             {"dim", 0, "N", "embedding width", "256"},
             {"layers", 0, "N", "transformer blocks", "4"},
             {"heads", 0, "N", "attention heads", "8"},
             {"kv-heads", 0, "N", "key/value heads (GQA)", "4"},
             {"ffn", 0, "N", "feed-forward width", "704"},
             {"vocab", 0, "N", "vocabulary size (>= 259)", "2048"},
             {"ctx", 0, "N", "training context length written to the metadata", "2048"},
             {"type", 0, "TYPE",
              "2-D weight type: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k q8_k iq4_nl,\n"
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
  o.dim = args.get_int("dim", o.dim);
  o.layers = args.get_int("layers", o.layers);
  o.heads = args.get_int("heads", o.heads);
  o.kv_heads = args.get_int("kv-heads", o.kv_heads);
  o.ffn = args.get_int("ffn", o.ffn);
  o.vocab = args.get_int("vocab", o.vocab);
  o.context = args.get_int("ctx", o.context);
  const std::string type = args.get_or("type", "q8_0");
  if (!set_weight_type(o, type)) throw UsageError(fmt::format("unknown --type '{}'", type));
  o.tied_embeddings = args.has("tied");
  o.seed = static_cast<std::uint64_t>(args.get_int("seed", static_cast<long long>(o.seed)));
  o.name = args.get_or("name", o.name);
  o.threads = static_cast<int>(args.get_int("threads", 0));
  const bool tty = isatty(STDERR_FILENO) != 0;
  write_random_llama(o, *out, [&](std::size_t done, std::size_t total) {
    if (tty) fmt::print(stderr, "\rwriting tensors: {}/{}", done, total);
  });
  if (tty) fmt::print(stderr, "\n");
  fmt::print(stderr, "wrote {} ({:.1f} M parameters, {}, random weights seed {})\n", *out,
             static_cast<double>(random_llama_parameters(o)) / 1e6, weight_type_name(o), o.seed);
  return 0;
}

}  // namespace sitsrt::cli
