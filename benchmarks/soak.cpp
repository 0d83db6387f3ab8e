// Soak test: mixed requests from several threads for a fixed time while the process RSS is
// sampled every few seconds. A leak or per-request growth shows as a rising curve; the report
// prints the curve, the RSS after warm-up and at the end, and the least-squares slope.
//   soak [--model FILE] [--seconds 600] [--clients 3] [--threads 2] [--sample 10]
// Requests vary prompt length (1..200 tokens), max tokens (1..96), sampling (greedy, temperature
// with top-k/top-p/min-p, repetition penalty), stop strings, logprobs, cancellation from the token
// callback, and audit (none / JSONL sink per request, rotated and deleted as it grows).
#include <sitsrt/audit.hpp>
#include <sitsrt/engine.hpp>
#include <sitsrt/error.hpp>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace sitsrt;
using Clock = std::chrono::steady_clock;

namespace {

double rss_mib() {
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return static_cast<double>(pages_resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

std::string random_prompt(std::mt19937_64& rng) {
  static const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "then", "it", "ran", "far", "away",
                                "Once", "upon", "time", "little", "girl", "named", "Lily", "café", "日本", "🙂"};
  std::string p;
  const int n = std::uniform_int_distribution<int>(1, 120)(rng);
  for (int i = 0; i < n; ++i) p += std::string(i ? " " : "") + words[rng() % std::size(words)];
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "build/models/soak.gguf";
  int seconds = 600, clients = 3, threads = 2, sample = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model") model = argv[i + 1];
    else if (a == "--seconds") seconds = std::stoi(argv[i + 1]);
    else if (a == "--clients") clients = std::stoi(argv[i + 1]);
    else if (a == "--threads") threads = std::stoi(argv[i + 1]);
    else if (a == "--sample") sample = std::stoi(argv[i + 1]);
    else {
      fmt::print(stderr, "unknown option {}\n", a);
      return 2;
    }
  }
  if (!std::filesystem::exists(model)) {
    fmt::print(stderr, "{} is absent; make one, e.g. sitsrt make-model --dim 256 --layers 4 -o {}\n", model, model);
    return 1;
  }
  EngineOptions o;
  o.model_path = model;
  o.threads = threads;
  o.context_length = 512;
  const Engine engine(o);
  const std::string dir = fmt::format("{}/sitsrt-soak-{}", std::filesystem::temp_directory_path().string(), ::getpid());
  std::filesystem::create_directories(dir);

  std::atomic<bool> stop{false};
  std::atomic<long> requests{0}, tokens{0}, cancelled{0}, audited{0}, errors{0};
  std::mutex error_mutex;
  std::string first_error;
  std::vector<std::thread> workers;
  for (int c = 0; c < clients; ++c) {
    workers.emplace_back([&, c] {
      std::mt19937_64 rng(1000 + static_cast<std::uint64_t>(c));
      const std::string own_dir = fmt::format("{}/client{}", dir, c);  // each client deletes only its logs
      std::filesystem::create_directories(own_dir);
      int n = 0;
      while (!stop.load()) {
        GenerationConfig g;
        g.max_new_tokens = std::uniform_int_distribution<int>(1, 96)(rng);
        const int mode = static_cast<int>(rng() % 4);
        g.temperature = mode == 0 ? 0.0f : 0.8f;
        g.top_k = mode == 1 ? 0 : 40;
        g.top_p = mode == 2 ? 0.9f : 1.0f;
        g.min_p = mode == 3 ? 0.05f : 0.0f;
        g.repeat_penalty = mode == 3 ? 1.1f : 1.0f;
        g.seed = rng();
        g.top_logprobs = static_cast<int>(rng() % 6);
        if (rng() % 5 == 0) g.stop = {"the"};
        std::shared_ptr<AuditSink> sink;
        const std::string log = fmt::format("{}/{}.jsonl", own_dir, n++);
        if (rng() % 3 == 0) {
          JsonlAuditLogOptions lo;
          lo.path = log;
          lo.rotate_bytes = 64 * 1024;
          sink = make_jsonl_audit_sink(lo);
          g.audit.level = rng() % 2 ? TraceLevel::kTokens : TraceLevel::kTopK;
          g.audit.sinks.push_back(sink);
          ++audited;
        }
        const int cancel_at = rng() % 7 == 0 ? std::uniform_int_distribution<int>(0, 20)(rng) : -1;
        GenerationResult result;
        try {
          result = engine.generate(random_prompt(rng), g, [&](const TokenEvent& e) {
            return cancel_at < 0 || e.index < cancel_at;
          });
        } catch (const Error& e) {  // counted and reported: a soak must see none
          ++errors;
          std::lock_guard lock(error_mutex);
          if (first_error.empty()) first_error = e.what();
        }
        if (cancel_at >= 0) ++cancelled;
        tokens += static_cast<long>(result.tokens.size());
        ++requests;
        sink.reset();
        for (const auto& entry : std::filesystem::directory_iterator(own_dir)) std::filesystem::remove(entry.path());
      }
    });
  }
  const auto start = Clock::now();
  std::vector<std::pair<double, double>> curve;  // (seconds, RSS MiB)
  fmt::print("{:>8} {:>10} {:>10} {:>10}\n", "t (s)", "RSS (MiB)", "requests", "tokens");
  while (true) {
    const double t = std::chrono::duration<double>(Clock::now() - start).count();
    curve.emplace_back(t, rss_mib());
    fmt::print("{:>8.0f} {:>10.2f} {:>10} {:>10}\n", t, curve.back().second, requests.load(), tokens.load());
    std::fflush(stdout);
    if (t >= seconds) break;
    std::this_thread::sleep_for(std::chrono::seconds(sample));
  }
  stop = true;
  for (auto& w : workers) w.join();
  std::filesystem::remove_all(dir);

  // Slope over the samples after the first 10% (warm-up: pools, sessions, allocator arenas).
  const std::size_t from = curve.size() / 10;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = static_cast<double>(curve.size() - from);
  for (std::size_t i = from; i < curve.size(); ++i) {
    sx += curve[i].first;
    sy += curve[i].second;
    sxx += curve[i].first * curve[i].first;
    sxy += curve[i].first * curve[i].second;
  }
  const double slope = n > 1 ? (n * sxy - sx * sy) / (n * sxx - sx * sx) : 0.0;
  double lo = curve[from].second, hi = lo;
  for (std::size_t i = from; i < curve.size(); ++i) {
    lo = std::min(lo, curve[i].second);
    hi = std::max(hi, curve[i].second);
  }
  fmt::print("\nsoak: {} s, {} clients, {} requests ({} audited, {} cancelled), {} tokens, {} errors{}\n", seconds,
             clients, requests.load(), audited.load(), cancelled.load(), tokens.load(), errors.load(),
             first_error.empty() ? "" : " (first: " + first_error + ")");
  fmt::print("RSS after warm-up {:.2f} MiB, at the end {:.2f} MiB, range after warm-up {:.2f} MiB, "
             "slope {:.4f} MiB/min\n",
             curve[from].second, curve.back().second, hi - lo, slope * 60.0);
  return 0;
}
