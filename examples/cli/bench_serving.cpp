// sitsrt bench --concurrency 1,4,16,64: the serving core under concurrent streams. At each level
// c, c requests (the same fixed pseudo-random prompts) arrive together and are generated to
// their end through Engine::submit. Reported per level: aggregate decode tokens/s over the
// steady part (from the moment every stream has its first token to the last token), TTFT and
// inter-token latency percentiles, KV bytes per token, preemptions, peak RSS, and the
// weight-bandwidth floor for c streams (c x bandwidth / weight bytes per token: one pass over the
// weights serves every stream of a step). With --profile, each level's op times, its decode steps
// (one row per sequence) apart from the steps with prompt chunks. With --reps N, N rounds run the
// levels in turn and each figure is the median over the rounds.
#include "bench_serving.hpp"
#include "op_profile_table.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <sys/resource.h>

namespace sitsrt::cli {
namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::uint64_t peak_rss() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
}

struct LevelResult {
  int concurrency = 0;
  double aggregate_decode_tps = 0, aggregate_tps = 0;
  double ttft_p50 = 0, ttft_p95 = 0, itl_p50 = 0, itl_p95 = 0;
  std::int64_t generated = 0;
  std::uint64_t preemptions = 0;
  std::int64_t max_step_sequences = 0;
  std::uint64_t rss = 0;
  OpProfile profile;  // (EngineOptions::profile_ops)
};

LevelResult run_level(const Engine& engine, int c, const std::vector<std::vector<std::int32_t>>& prompts,
                      const GenerationConfig& config) {
  struct Stream {
    Clock::time_point submitted;
    std::vector<Clock::time_point> tokens;
  };
  std::vector<Stream> streams(static_cast<std::size_t>(c));
  std::mutex m;
  const RequestQueueStats before = engine.queue_stats();
  engine.reset_op_profile();
  std::vector<RequestHandle> handles;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < c; ++i) {
    SubmitOptions so;
    so.on_token = [&streams, &m, i](const TokenEvent&) {
      std::lock_guard lock(m);
      streams[static_cast<std::size_t>(i)].tokens.push_back(Clock::now());
      return true;
    };
    streams[static_cast<std::size_t>(i)].submitted = Clock::now();
    handles.push_back(engine.submit_tokens(prompts[static_cast<std::size_t>(i) % prompts.size()], config, std::move(so)));
  }
  LevelResult r;
  r.concurrency = c;
  for (auto& h : handles) r.generated += static_cast<std::int64_t>(h.wait().tokens.size());
  const Clock::time_point end = Clock::now();
  const RequestQueueStats after = engine.queue_stats();
  Clock::time_point all_first = start, last = start;
  std::vector<double> ttft, itl;
  for (const Stream& s : streams) {
    if (s.tokens.empty()) continue;
    all_first = std::max(all_first, s.tokens.front());
    last = std::max(last, s.tokens.back());
    ttft.push_back(std::chrono::duration<double>(s.tokens.front() - s.submitted).count());
    for (std::size_t k = 1; k < s.tokens.size(); ++k) itl.push_back(std::chrono::duration<double>(s.tokens[k] - s.tokens[k - 1]).count());
  }
  std::int64_t steady = 0;
  for (const Stream& s : streams) steady += std::count_if(s.tokens.begin(), s.tokens.end(), [&](auto t) { return t > all_first; });
  const double window = std::chrono::duration<double>(last - all_first).count();
  r.aggregate_decode_tps = window > 0 ? static_cast<double>(steady) / window : 0.0;
  r.aggregate_tps = static_cast<double>(r.generated) / std::chrono::duration<double>(end - start).count();
  r.ttft_p50 = percentile(ttft, 0.5);
  r.ttft_p95 = percentile(ttft, 0.95);
  r.itl_p50 = percentile(itl, 0.5);
  r.itl_p95 = percentile(itl, 0.95);
  r.preemptions = after.preemptions - before.preemptions;
  r.max_step_sequences = after.max_step_sequences;
  r.rss = peak_rss();
  r.profile = engine.op_profile();
  return r;
}

// One level over the rounds: medians of its per-round figures, and of its per-round ratio to the
// single stream measured in the same round (adjacent in time, so a drifting host cancels).
struct LevelSummary {
  LevelResult median;  // the last round's counters and profile, median rates and latencies
  std::vector<double> round_tps, round_speedup;
};

double median(std::vector<double> v) {
  return percentile(std::move(v), 0.5);
}

LevelSummary summarize(const std::vector<std::vector<LevelResult>>& rounds, std::size_t level, std::size_t single) {
  LevelSummary s;
  s.median = rounds.back()[level];
  std::vector<double> all, ttft50, ttft95, itl50, itl95;
  for (const std::vector<LevelResult>& round : rounds) {
    const LevelResult& r = round[level];
    s.round_tps.push_back(r.aggregate_decode_tps);
    if (single < round.size() && round[single].aggregate_decode_tps > 0) {
      s.round_speedup.push_back(r.aggregate_decode_tps / round[single].aggregate_decode_tps);
    }
    all.push_back(r.aggregate_tps);
    ttft50.push_back(r.ttft_p50);
    ttft95.push_back(r.ttft_p95);
    itl50.push_back(r.itl_p50);
    itl95.push_back(r.itl_p95);
  }
  s.median.aggregate_decode_tps = median(s.round_tps);
  s.median.aggregate_tps = median(all);
  s.median.ttft_p50 = median(ttft50);
  s.median.ttft_p95 = median(ttft95);
  s.median.itl_p50 = median(itl50);
  s.median.itl_p95 = median(itl95);
  return s;
}

std::string joined(const std::vector<double>& v, const char* format) {
  std::string out;
  for (double x : v) {
    if (!out.empty()) out += ' ';
    out += fmt::format(fmt::runtime(format), x);
  }
  return out;
}

}  // namespace

std::vector<int> parse_concurrency(const std::string& text) {
  std::vector<int> levels;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    int v = 0;
    try {
      std::size_t used = 0;
      v = std::stoi(item, &used);
      if (used != item.size()) v = 0;
    } catch (const std::exception&) {
      v = 0;
    }
    if (v < 1 || v > 4096) throw UsageError(fmt::format("--concurrency expects numbers in [1, 4096] separated by commas, got '{}'", text));
    levels.push_back(v);
    at = comma + 1;
  }
  return levels;
}

int run_serving_bench(const Engine& engine, const std::vector<int>& levels, std::int64_t n_prompt, std::int64_t n_gen,
                      double bandwidth, bool json, bool profile, int rounds) {
  const ModelInfo& info = engine.model_info();
  // Fixed pseudo-random prompts of ordinary tokens, one per stream (no two share a prefix).
  std::vector<std::vector<std::int32_t>> prompts;
  std::uint64_t state = 0x5EED;
  const int most = *std::max_element(levels.begin(), levels.end());
  for (int s = 0; s < most; ++s) {
    std::vector<std::int32_t> p;
    for (std::int64_t i = 0; i < n_prompt; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      p.push_back(static_cast<std::int32_t>(3 + (state >> 33) % static_cast<std::uint64_t>(info.n_vocab - 3)));
    }
    prompts.push_back(std::move(p));
  }
  GenerationConfig config;
  config.max_new_tokens = static_cast<std::int32_t>(n_gen);
  config.temperature = 0.0f;
  config.stop_at_end_of_sequence = false;
  config.top_logprobs = 0;
  config.seed = 1;
  // Warm-up (first touches of the arena and caches): a few tokens, not a whole generation.
  GenerationConfig warm_up = config;
  warm_up.max_new_tokens = std::min<std::int32_t>(config.max_new_tokens, 8);
  (void)engine.generate_from_tokens(std::span(prompts[0]).first(std::min<std::size_t>(prompts[0].size(), 8)), warm_up);

  // Rounds run every level in turn (1, 16, 1, 16, ...), so each round's ratio to the single
  // stream compares figures taken minutes apart at most.
  std::vector<std::vector<LevelResult>> by_round;
  for (int round = 0; round < rounds; ++round) {
    by_round.emplace_back();
    for (int c : levels) by_round.back().push_back(run_level(engine, c, prompts, config));
  }
  const auto single_at = static_cast<std::size_t>(std::find(levels.begin(), levels.end(), 1) - levels.begin());
  std::vector<LevelSummary> summaries;
  for (std::size_t i = 0; i < levels.size(); ++i) summaries.push_back(summarize(by_round, i, single_at));
  const RequestQueueStats q = engine.queue_stats();
  const double kv_bytes_per_token = static_cast<double>(q.kv_block_bytes) / static_cast<double>(q.limits.kv_block_size);
  const double floor1 = bandwidth > 0 ? bandwidth / static_cast<double>(info.weight_bytes_per_token) : 0.0;
  const double single_tps = single_at < summaries.size() ? summaries[single_at].median.aggregate_decode_tps : 0.0;
  const auto speedup = [](const LevelSummary& s) { return s.round_speedup.empty() ? 0.0 : median(s.round_speedup); };
  if (json) {
    nlohmann::json levels_json = nlohmann::json::array();
    for (const LevelSummary& summary : summaries) {
      const LevelResult& r = summary.median;
      levels_json.push_back({{"concurrency", r.concurrency},
                             {"aggregate_decode_tokens_per_s", r.aggregate_decode_tps},
                             {"rounds_decode_tokens_per_s", summary.round_tps},
                             {"aggregate_tokens_per_s", r.aggregate_tps},
                             {"speedup_vs_single_stream", speedup(summary)},
                             {"rounds_speedup_vs_single_stream", summary.round_speedup},
                             {"ttft_p50_s", r.ttft_p50},
                             {"ttft_p95_s", r.ttft_p95},
                             {"itl_p50_s", r.itl_p50},
                             {"itl_p95_s", r.itl_p95},
                             {"generated_tokens", r.generated},
                             {"preemptions", r.preemptions},
                             {"decode_floor_tokens_per_s", floor1 * r.concurrency},
                             {"peak_rss_bytes", r.rss}});
      if (profile) {
        levels_json.back()["profile"] = {{"decode", op_profile_json(r.profile.decode)},
                                         {"prefill", op_profile_json(r.profile.prefill)}};
      }
    }
    const nlohmann::json doc = {{"model", info.path},
                                {"threads", info.threads},
                                {"cpu_isa", info.cpu_isa},
                                {"k_cache_type", info.k_cache_type},
                                {"v_cache_type", info.v_cache_type},
                                {"prompt_tokens", n_prompt},
                                {"gen_tokens", n_gen},
                                {"rounds", rounds},
                                {"kv_bytes_per_token", kv_bytes_per_token},
                                {"weight_bytes_per_token", info.weight_bytes_per_token},
                                {"read_bandwidth_bytes_per_s", bandwidth},
                                {"single_stream_decode_tokens_per_s", single_tps},
                                {"max_num_seqs", q.limits.max_num_seqs},
                                {"max_num_batched_tokens", q.limits.max_num_batched_tokens},
                                {"serving", serving_json(q)},
                                {"levels", levels_json}};
    fmt::print("{}\n", doc.dump(2));
    return 0;
  }
  fmt::print("model        {} ({} threads, {}; KV {}/{}, {:.0f} bytes per token)\n", info.path, info.threads,
             info.cpu_isa, info.k_cache_type, info.v_cache_type, kv_bytes_per_token);
  fmt::print("requests     prompt {} + generate {} tokens each, all arriving together; max_num_seqs {}, "
             "max_num_batched_tokens {}\n", n_prompt, n_gen, q.limits.max_num_seqs, q.limits.max_num_batched_tokens);
  fmt::print("{}\n", serving_text(q));
  if (floor1 > 0) {
    fmt::print("floor        {:.2f} GB/s read -> {:.1f} tok/s for one stream; c streams share each pass over the "
               "weights: c x that\n", bandwidth / 1e9, floor1);
  }
  if (rounds > 1) {
    fmt::print(
        "rounds       {}: the levels in turn, each figure the median over the rounds; x single is the "
        "median of each round's ratio to that round's single stream\n",
        rounds);
  }
  fmt::print("\n{:>5} {:>12} {:>8} {:>10} {:>10} {:>10} {:>10} {:>8} {:>10} {:>10}\n", "conc", "decode tok/s",
             "x single", "TTFT p50", "TTFT p95", "ITL p50", "ITL p95", "preempt", "floor", "peak RSS");
  for (const LevelSummary& summary : summaries) {
    const LevelResult& r = summary.median;
    fmt::print("{:>5} {:>12.1f} {:>8.2f} {:>8.1f}ms {:>8.1f}ms {:>8.1f}ms {:>8.1f}ms {:>8} {:>10.0f} {:>7.0f}MiB\n",
               r.concurrency, r.aggregate_decode_tps, speedup(summary), 1e3 * r.ttft_p50, 1e3 * r.ttft_p95,
               1e3 * r.itl_p50, 1e3 * r.itl_p95, r.preemptions, floor1 * r.concurrency,
               static_cast<double>(r.rss) / (1 << 20));
  }
  if (rounds > 1) {
    fmt::print("\nper round (tok/s; x single)\n");
    for (const LevelSummary& summary : summaries) {
      fmt::print("{:>5} {}; {}\n", summary.median.concurrency, joined(summary.round_tps, "{:.1f}"),
                 joined(summary.round_speedup, "{:.2f}"));
    }
  }
  if (profile) {  // the last round's
    for (const LevelSummary& summary : summaries) {
      const LevelResult& r = summary.median;
      print_op_profile(fmt::format("{} streams, decode steps (one row per sequence)", r.concurrency), r.profile.decode,
                       false, "step");
      print_op_profile(fmt::format("{} streams, steps with prompt chunks", r.concurrency), r.profile.prefill, false,
                       "step");
    }
  }
  return 0;
}

}  // namespace sitsrt::cli
