// sitsrt perplexity: perplexity of a text, chunk by chunk, with llama-perplexity's conventions;
// --kl-divergence-base writes the scored positions' next-token distributions, --kl-divergence
// compares another run (other weights, activations, KV type, ISA) against such a base file.
// The statistics and the base file are lib/eval; the format is in docs/perplexity.md.
#include "commands.hpp"
#include "perplexity_report.hpp"

#include "core/check.hpp"
#include "eval/kld_base_file.hpp"
#include "eval/log_probs.hpp"
#include "eval/perplexity_stats.hpp"

#include <sitsrt/error.hpp>
#include <sitsrt/version.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

namespace sitsrt::cli {
namespace {

constexpr std::int64_t kDefaultChunk = 512;

// What the evaluation runs over: the chunks' tokens and how each chunk starts.
struct Plan {
  std::int64_t n_ctx = 0;
  std::int64_t first = 0;  // first scored position of a chunk
  std::int64_t chunks = 0;
  bool add_bos = false;
  std::int32_t bos = -1;
  std::vector<std::int32_t> tokens;  // at least chunks · n_ctx
};

[[noreturn]] void base_mismatch(const std::string& file, std::string_view field, const std::string& problem) {
  raise(ErrorCode::kInvalidArgument, "{}: KL-divergence base file field '{}': {}", file, field, problem);
}

// The base file's tokens, checked against the model (and the text, when -f is given too).
Plan plan_from_base(const eval::KldBaseReader& base, const Engine& engine, const Args& args) {
  const eval::KldBaseHeader& h = base.header();
  const ModelInfo& info = engine.model_info();
  if (h.n_vocab != info.n_vocab) {
    base_mismatch(base.path(), "n_vocab",
                  fmt::format("{} tokens, but {} has a vocabulary of {}: the base is of another model family",
                              h.n_vocab, info.path, info.n_vocab));
  }
  if (h.add_bos && h.bos != info.bos) {
    base_mismatch(
        base.path(), "bos",
        fmt::format("the base chunks start with token {}, but the BOS of {} is {}", h.bos, info.path, info.bos));
  }
  Plan p{h.n_ctx, h.first_scored, h.n_chunks, h.add_bos, h.bos, h.tokens};
  if (const auto file = args.get("file")) {
    const std::vector<std::int32_t> text = engine.tokenize(read_text_file(*file, "text file"), info.add_bos);
    for (std::size_t i = 0; i < h.tokens.size(); ++i) {
      if (i >= text.size()) {
        base_mismatch(
            base.path(), "tokens",
            fmt::format("the base holds {} tokens, but {} tokenizes to only {}", h.tokens.size(), *file, text.size()));
      }
      if (text[i] != h.tokens[i]) {
        base_mismatch(base.path(), "tokens",
                      fmt::format("token {} is {} in the base but {} in {} as {} tokenizes it: another text or "
                                  "tokenizer",
                                  i, h.tokens[i], text[i], *file, info.path));
      }
    }
  }
  return p;
}

Plan plan_from_text(const Engine& engine, const Args& args, std::int64_t n_ctx) {
  const auto file = args.get("file");
  if (!file) throw UsageError("no text given: pass -f FILE (or --kl-divergence with --kl-divergence-base FILE)");
  const ModelInfo& info = engine.model_info();
  Plan p;
  p.n_ctx = n_ctx;
  p.first = n_ctx / 2;
  p.add_bos = info.add_bos;
  p.bos = info.bos;
  p.tokens = engine.tokenize(read_text_file(*file, "text file"), info.add_bos);
  const auto n = static_cast<std::int64_t>(p.tokens.size());
  if (n < 2 * n_ctx) {
    raise(ErrorCode::kInvalidArgument,
          "{} tokenizes to {} tokens; perplexity with chunks of -c {} needs at least {} (two chunks)", *file, n, n_ctx,
          2 * n_ctx);
  }
  p.chunks = n / n_ctx;
  return p;
}

std::string engine_description(const Engine& engine, bool decode) {
  const ModelInfo& i = engine.model_info();
  return fmt::format("sitsrt {}: model {}, weights {}, activations {}, kv {}, isa {}, threads {}, {}", kVersion, i.path,
                     i.weights, i.int8_activations ? "int8" : "f32", i.kv_cache_type, i.cpu_isa, i.threads,
                     decode ? "scored positions as decode steps" : "prompt steps");
}

}  // namespace

int perplexity_command(int argc, char** argv) {
  std::vector<OptionSpec> specs = engine_option_specs();
  for (OptionSpec& s : specs) {
    if (s.long_name != "ctx") continue;
    s.help = "tokens per chunk; each chunk is evaluated from an empty context and its second half scored";
    s.default_text = "512; with --kl-divergence the base file's";
  }
  const std::vector<OptionSpec> more = {
      {"file", 'f', "FILE", "the text to score (tokenized with the model's BOS setting)", ""},
      {"chunks", 0, "N", "score at most the first N chunks", "all"},
      {"kl-divergence-base", 0, "FILE",
       "alone: save the scored positions' next-token distributions to FILE (~2 bytes x vocab per position); with "
       "--kl-divergence: the base to compare against",
       ""},
      {"kl-divergence", 0, "",
       "compare this model and its settings against --kl-divergence-base over the file's tokens (-f optional: "
       "checked against them)",
       ""},
      {"decode", 0, "",
       "run every scored position as its own one-token step (the decode kernels, where --activations int8 "
       "applies); the unscored first half of a chunk is still prefilled",
       ""},
      {"json", 0, "", "print one JSON summary on stdout instead of the text report", ""},
  };
  specs.insert(specs.end(), more.begin(), more.end());
  Args args("sitsrt perplexity",
            "Perplexity of a text, llama-perplexity style: the tokens are cut into chunks of -c N, each chunk is "
            "evaluated from scratch (its first token replaced by BOS where the model adds one) and the second half "
            "of each chunk is scored. Prints running estimates [1]ppl,[2]ppl,... and 'Final estimate: PPL = X +/- "
            "Y'. With --kl-divergence-base: save or (--kl-divergence) compare full next-token distributions.",
            specs);
  args.parse(argc, argv, 2);
  if (args.has("help")) {
    fmt::print("{}", args.help());
    return 0;
  }
  const bool kld = args.has("kl-divergence");
  const auto base_path = args.get("kl-divergence-base");
  if (kld && !base_path) throw UsageError("--kl-divergence needs --kl-divergence-base FILE");
  const bool decode = args.has("decode");
  const bool json = args.has("json");

  // The base file is checked before the model loads: a bad file fails fast.
  std::optional<eval::KldBaseReader> reader;
  if (kld) reader.emplace(*base_path);
  std::int64_t n_ctx = args.get_int("ctx", kDefaultChunk, 4, 1 << 24);
  if (reader) {
    if (args.has("ctx") && n_ctx != reader->header().n_ctx) {
      base_mismatch(
          *base_path, "n_ctx",
          fmt::format("the base has chunks of {} tokens, but -c {} was given", reader->header().n_ctx, n_ctx));
    }
    n_ctx = reader->header().n_ctx;
  }
  if (n_ctx < 4) throw UsageError(fmt::format("-c {} is too small: a chunk needs at least 4 tokens", n_ctx));
  EngineOptions options = engine_options_from(args);
  options.context_length = n_ctx;
  const Engine engine(options);
  const ModelInfo& info = engine.model_info();
  if (n_ctx > info.n_ctx_train) {
    fmt::print(stderr, "perplexity: warning: chunks of {} tokens exceed the model's training context {}\n", n_ctx,
               info.n_ctx_train);
  }
  Plan plan = reader ? plan_from_base(*reader, engine, args) : plan_from_text(engine, args, n_ctx);
  if (args.has("chunks")) {
    const long long limit = args.get_int("chunks", 1, 1, 1LL << 40);
    if (limit < 1) throw UsageError(fmt::format("--chunks {} must be at least 1", limit));
    plan.chunks = std::min<std::int64_t>(plan.chunks, limit);
  }
  if (reader && reader->header().decode_scored != decode) {
    fmt::print(stderr, "perplexity: note: the base scored its positions as {}, this run as {}\n",
               reader->header().decode_scored ? "decode steps" : "prompt steps",
               decode ? "decode steps" : "prompt steps");
  }

  std::unique_ptr<eval::KldBaseWriter> writer;
  if (base_path && !kld) {
    eval::KldBaseHeader h;
    h.n_vocab = static_cast<std::uint32_t>(info.n_vocab);
    h.n_ctx = static_cast<std::uint32_t>(plan.n_ctx);
    h.n_chunks = static_cast<std::uint32_t>(plan.chunks);
    h.first_scored = static_cast<std::uint32_t>(plan.first);
    h.add_bos = plan.add_bos;
    h.decode_scored = decode;
    h.bos = plan.bos;
    h.model_sha256 = engine.model_sha256();
    h.description = engine_description(engine, decode);
    h.tokens.assign(plan.tokens.begin(), plan.tokens.begin() + plan.chunks * plan.n_ctx);
    writer = std::make_unique<eval::KldBaseWriter>(*base_path, std::move(h));
  }

  const std::int64_t rows_per_chunk = plan.n_ctx - 1 - plan.first;
  const double total_rows = static_cast<double>(plan.chunks * rows_per_chunk);
  if (!json) {
    fmt::print(stderr, "perplexity: {} tokens, {} chunks of {}, scoring positions {}..{} of each ({} positions){}\n",
               plan.tokens.size(), plan.chunks, plan.n_ctx, plan.first, plan.n_ctx - 2, plan.chunks * rows_per_chunk,
               decode ? ", each a decode step" : "");
    if (kld) print_kld_chunk_header();
  }
  eval::PerplexityAccumulator ppl;
  eval::KldAccumulator divergence;
  std::vector<double> running;
  std::vector<std::uint16_t> codes(static_cast<std::size_t>(info.n_vocab));
  std::vector<std::int32_t> chunk(static_cast<std::size_t>(plan.n_ctx - 1));
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t c = 0; c < plan.chunks; ++c) {
    const auto chunk_start = std::chrono::steady_clock::now();
    const std::int32_t* begin = plan.tokens.data() + c * plan.n_ctx;
    // The last position would predict a token past the chunk: it is not evaluated.
    std::copy(begin, begin + plan.n_ctx - 1, chunk.begin());
    if (plan.add_bos) chunk[0] = plan.bos;
    engine.evaluate(chunk, {plan.first, decode}, [&](std::int64_t position, std::span<const float> logits) {
      const std::int32_t target = begin[position + 1];
      const eval::RowSoftmax softmax = eval::log_softmax(logits);
      ppl.add(softmax.log_z - static_cast<double>(logits[static_cast<std::size_t>(target)]));
      if (writer) writer->write_row(eval::quantize_row(logits, softmax, target, codes), codes);
      if (reader) {
        const eval::QuantizedRow base = reader->next_row(codes);
        divergence.add(eval::compare_row(base, codes, logits, softmax, target));
      }
      print_progress("perplexity", static_cast<double>(ppl.count()) / total_rows);
    });
    running.push_back(ppl.perplexity().value);
    if (c == 0 && plan.chunks > 1) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - chunk_start).count();
      fmt::print(stderr, "\rperplexity: {:.2f} seconds per chunk, ETA {:.1f} minutes\n", seconds,
                 seconds * static_cast<double>(plan.chunks - 1) / 60.0);
    }
    if (json) continue;
    if (kld) {
      print_kld_chunk_line(c + 1, divergence.running());
    } else {
      fmt::print("[{}]{:.4f},", c + 1, running.back());
      std::fflush(stdout);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  print_progress("perplexity", 1.0);
  if (writer) writer->finish();

  const eval::Estimate final_ppl = ppl.perplexity();
  const std::int64_t evaluated = plan.chunks * (plan.n_ctx - 1);
  RunFacts facts{info,      plan.n_ctx, plan.first, plan.chunks, static_cast<std::int64_t>(ppl.count()),
                 evaluated, seconds,    decode,     plan.add_bos};
  if (json) {
    nlohmann::json doc = run_json(facts, engine.model_sha256(), final_ppl, running);
    if (writer) doc["kl_divergence_base"] = base_json(writer->header(), *base_path, "written");
    if (reader) {
      doc["kl_divergence_base"] = base_json(reader->header(), *base_path, "read");
      doc["kl_divergence"] = kld_json(divergence.summary());
    }
    fmt::print("{}\n", doc.dump(2));
    return 0;
  }
  if (!kld) fmt::print("\n");
  fmt::print(stderr, "perplexity: {} positions scored in {:.2f} s ({:.1f} tokens/s evaluated)\n", ppl.count(), seconds,
             static_cast<double>(evaluated) / seconds);
  if (writer) {
    fmt::print(stderr, "perplexity: saved the next-token distributions of {} positions to {} ({:.1f} MiB)\n",
               writer->header().rows(), *base_path, static_cast<double>(writer->header().file_bytes()) / (1 << 20));
  }
  if (kld) {
    fmt::print("\nbase: {}\n", reader->header().description);
    fmt::print("this: {}\n", engine_description(engine, decode));
    print_kld_summary(divergence.summary());
  } else {
    fmt::print("Final estimate: PPL = {:.4f} +/- {:.5f}\n", final_ppl.value, final_ppl.error);
  }
  return 0;
}

}  // namespace sitsrt::cli
