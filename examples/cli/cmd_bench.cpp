// sitsrt bench: prefill and decode throughput of one model, beside the memory-bandwidth floor.
#include "bench_serving.hpp"
#include "op_profile_table.hpp"
#include "commands.hpp"

#include "core/memory_bandwidth.hpp"
#include "core/thread_pool.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <sys/resource.h>

namespace sitsrt::cli {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::uint64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace

int bench_command(int argc, char** argv) {
  std::vector<OptionSpec> specs = engine_option_specs();
  const std::vector<OptionSpec> more = {
      {"prompt-tokens", 'p', "N", "prompt length for the prefill measurement", "128"},
      {"gen-tokens", 'n', "N", "tokens generated for the decode measurement", "64"},
      {"reps", 'r', "N", "repetitions, the median reported (default 3); with --concurrency, rounds of every "
                         "level in turn (default 1)", ""},
      {"no-bandwidth", 0, "", "skip measuring memory bandwidth (no floor ratio)", ""},
      {"profile", 0, "", "time every graph node and print where decode and prefill steps spend it", ""},
      {"concurrency", 0, "LIST", "serving benchmark: streams per level, e.g. 1,4,16,64 (prompt 128 and generate "
                                 "128 tokens each unless -p/-n say otherwise)", ""},
      {"prefix-cache", 0, "", "keep prefix caching on: repetitions (and later --concurrency levels) then reuse the "
                              "cached blocks of the same prompts, so prefill and TTFT measure the cache", ""},
      {"json", 0, "", "machine-readable output", ""},
  };
  specs.insert(specs.end(), more.begin(), more.end());
  Args args("sitsrt bench", "Measure prefill and decode tokens/s, peak RSS and the ratio to the\n"
                            "memory-bandwidth floor (weight bytes per token / measured read bandwidth).", specs);
  args.parse(argc, argv, 2);
  if (args.has("help")) {
    fmt::print("{}", args.help());
    return 0;
  }
  const auto concurrency = args.get("concurrency");
  const auto n_prompt = args.get_int("prompt-tokens", 128, 1, 1 << 20);
  const auto n_gen = args.get_int("gen-tokens", concurrency ? 128 : 64, 2, 1 << 20);
  const auto reps = args.get_int("reps", 3, 1, 10000);
  if (n_prompt < 1 || n_gen < 2 || reps < 1) throw UsageError("prompt-tokens >= 1, gen-tokens >= 2, reps >= 1");
  EngineOptions options = engine_options_from(args);
  if (options.context_length == 0) options.context_length = n_prompt + n_gen + 1;
  options.profile_ops = args.has("profile");
  // Every repetition and level sends the same prompts: with prefix caching all but the first
  // would skip their full prompt blocks and prefill would measure the cache, not the model.
  if (!args.has("prefix-cache")) options.serving.prefix_caching = false;
  if (concurrency) {
    const std::vector<int> levels = parse_concurrency(*concurrency);
    const int most = *std::max_element(levels.begin(), levels.end());
    // Every stream's blocks fit unless the options say otherwise (then preemptions are reported).
    if (!args.has("max-num-seqs")) options.serving.max_num_seqs = most;
    if (!args.has("kv-pool-tokens")) {
      options.serving.kv_pool_tokens = std::max<std::int64_t>(options.context_length, most * (n_prompt + n_gen + 16));
    }
    const Engine engine(options);
    double bandwidth = 0.0;
    if (!args.has("no-bandwidth")) {
      ThreadPool pool(engine.model_info().threads);
      bandwidth = measure_read_bandwidth(pool);
    }
    const int rounds = args.has("reps") ? static_cast<int>(reps) : 1;
    return run_serving_bench(engine, levels, n_prompt, n_gen, bandwidth, args.has("json"), options.profile_ops, rounds);
  }
  const Engine engine(options);
  const ModelInfo& info = engine.model_info();

  // A fixed pseudo-random prompt of ordinary tokens (ids past the first 3 specials).
  std::vector<std::int32_t> prompt;
  std::uint64_t state = 0x5EED;
  for (long long i = 0; i < n_prompt; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    prompt.push_back(static_cast<std::int32_t>(3 + (state >> 33) % static_cast<std::uint64_t>(info.n_vocab - 3)));
  }
  GenerationConfig config;
  config.max_new_tokens = static_cast<std::int32_t>(n_gen);
  config.temperature = 0.0f;
  config.stop_at_end_of_sequence = false;
  config.top_logprobs = 0;
  config.seed = 1;
  engine.generate_from_tokens(std::span(prompt).first(std::min<std::size_t>(prompt.size(), 8)), config);  // warm-up
  engine.reset_op_profile();

  std::vector<double> prefill, decode;
  for (long long r = 0; r < reps; ++r) {
    const GenerationResult res = engine.generate_from_tokens(prompt, config);
    prefill.push_back(res.timings.prefill_tokens_per_second());
    decode.push_back(res.timings.decode_tokens_per_second());
  }
  const std::uint64_t rss = peak_rss_bytes();  // before the bandwidth probe's own buffer (dram_probe_bytes)
  double bandwidth = 0.0;
  if (!args.has("no-bandwidth")) {
    ThreadPool pool(info.threads);
    bandwidth = measure_read_bandwidth(pool);
  }
  const double floor_tps = bandwidth > 0 ? bandwidth / static_cast<double>(info.weight_bytes_per_token) : 0.0;
  const double decode_tps = median(decode);
  const double prefill_tps = median(prefill);
  const OpProfile profile = engine.op_profile();
  if (args.has("json")) {
    nlohmann::json doc = {{"model", info.path},
                          {"device", info.device},
                          {"device_description", info.device_description},
                          {"threads", info.threads},
                          {"cpu_isa", info.cpu_isa},
                          {"cpu_weight_prefetch", info.cpu_weight_prefetch},
                          {"decode_fusion", info.decode_fusion},
                          {"activations", info.int8_activations ? "int8" : "f32"},
                          {"weights", weights_json(info)},
                          {"prompt_tokens", n_prompt},
                          {"gen_tokens", n_gen},
                          {"reps", reps},
                          {"prefill_tokens_per_s", prefill_tps},
                          {"decode_tokens_per_s", decode_tps},
                          {"weight_bytes_per_token", info.weight_bytes_per_token},
                          {"read_bandwidth_bytes_per_s", bandwidth},
                          {"decode_floor_tokens_per_s", floor_tps},
                          {"decode_fraction_of_floor", floor_tps > 0 ? decode_tps / floor_tps : 0.0},
                          {"peak_rss_bytes", rss},
                          {"serving", serving_json(engine.queue_stats())}};
    if (options.profile_ops) doc["profile"] = {{"decode", op_profile_json(profile.decode)}, {"prefill", op_profile_json(profile.prefill)}};
    fmt::print("{}\n", doc.dump(2));
    return 0;
  }
  fmt::print("model        {} ({} layers, dim {}, {:.1f} M params, {:.1f} MiB of weights per token)\n", info.path,
             info.n_layer, info.n_embd, static_cast<double>(info.n_params) / 1e6,
             static_cast<double>(info.weight_bytes_per_token) / (1 << 20));
  fmt::print("device       {} ({})\n", info.device, info.device_description);
  fmt::print("threads      {} ({}, {} activations{}{}{})\n", info.threads, info.cpu_isa,
             info.int8_activations ? "int8" : "f32", info.decode_fusion ? "" : ", decode fusion off",
             info.cpu_weight_prefetch.empty() ? "" : ", weight prefetch ", info.cpu_weight_prefetch);
  fmt::print("weights      {}\n", weights_text(info));
  fmt::print("prefill      {:9.1f} tok/s  ({} prompt tokens, median of {})\n", prefill_tps, n_prompt, reps);
  fmt::print("decode       {:9.1f} tok/s  ({} tokens, median of {})\n", decode_tps, n_gen, reps);
  if (bandwidth > 0) {
    fmt::print("bandwidth    {:9.2f} GB/s read (measured now) -> decode floor {:.1f} tok/s; decode at {:.0f}% of it\n",
               bandwidth / 1e9, floor_tps, 100.0 * decode_tps / floor_tps);
  }
  fmt::print("peak RSS     {:.1f} MiB\n", static_cast<double>(rss) / (1 << 20));
  if (options.profile_ops) {
    // Per token for decode (one token a step); per prompt token for prefill.
    print_op_profile("decode", profile.decode, false, "token");
    print_op_profile("prefill", profile.prefill, true, "token");
  }
  return 0;
}

}  // namespace sitsrt::cli
