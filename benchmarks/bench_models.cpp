// End-to-end decode and prefill throughput of synthetic ~0.35B-parameter llama models
// (dim 1024, 24 layers, 16 heads, 8 KV heads, ffn 2816, vocab 32000) in F16, Q8_0 and Q4_0,
// at 1 thread and all threads. Each decode figure is printed beside its physical floor:
// weight bytes read per token / read bandwidth measured by this program in the same run.
//   bench_models [--dir DIR] [--types f16,q8_0,q4_0] [--prompt 128] [--gen 32] [--reps 3]
#include "core/memory_bandwidth.hpp"
#include "core/thread_pool.hpp"
#include "model/random_model.hpp"

#include <sitsrt/engine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace sitsrt;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Resident set size now (the peak would include the bandwidth probe's buffer).
double rss_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0.0;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "build/models";
  std::vector<std::string> types = {"f16", "q8_0", "q4_0"};
  int prompt_tokens = 128, gen_tokens = 32, reps = 3;
  bool mmap_weights = false;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      fmt::print("usage: bench_models [--dir DIR] [--types f16,q8_0,q4_0,q4_k_m,fp8_e4m3] [--prompt 128] [--gen 32] "
                 "[--reps 3] [--threads 1,2] [--mmap]\nWrites the synthetic 0.35B models it lacks into DIR, then "
                 "prints prefill and decode tokens/s at 1 thread and all threads (or --threads) beside the "
                 "memory-bandwidth floor. --mmap: weights read in place from the file instead of resident.\n");
      return 0;
    }
    if (a == "--mmap") {
      mmap_weights = true;
    } else {
      args.push_back(a);
    }
  }
  const int all_threads = ThreadPool::hardware_threads();
  std::vector<int> thread_counts = {1};
  if (all_threads > 1) thread_counts.push_back(all_threads);
  for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
    const std::string& a = args[i];
    const char* value = args[i + 1].c_str();
    if (a == "--threads") {
      thread_counts.clear();
      for (const std::string& t : split(value)) thread_counts.push_back(std::stoi(t));
    } else if (a == "--dir") {
      dir = value;
    } else if (a == "--types") {
      types = split(value);
    } else if (a == "--prompt") {
      prompt_tokens = std::stoi(value);
    } else if (a == "--gen") {
      gen_tokens = std::stoi(value);
    } else if (a == "--reps") {
      reps = std::stoi(value);
    }
  }
  std::filesystem::create_directories(dir);

  fmt::print("{:<6} {:>3} {:>10} {:>12} {:>12} {:>11} {:>8} {:>12} {:>10}\n", "type", "thr", "MiB/token",
             "prefill t/s", "decode t/s", "floor t/s", "ratio", "GB/s (meas)", "RSS");
  for (const std::string& type_name : types) {
    RandomModelOptions o = benchmark_model_options(DType::kQ8_0);
    if (!set_weight_type(o, type_name)) {  // a DType name or a mix such as q4_k_m
      fmt::print(stderr, "unknown type {}\n", type_name);
      return 2;
    }
    const std::string path = fmt::format("{}/bench-0.35b-{}.gguf", dir, type_name);
    if (!std::filesystem::exists(path)) {
      fmt::print(stderr, "writing {} ...\n", path);
      write_random_model(o, path);
    }
    for (int threads : thread_counts) {
      EngineOptions eo;
      eo.model_path = path;
      eo.threads = threads;
      eo.context_length = prompt_tokens + gen_tokens + 8;
      eo.mmap_weights = mmap_weights;
      const Engine engine(eo);
      std::vector<std::int32_t> prompt;
      for (int i = 0; i < prompt_tokens; ++i) prompt.push_back(3 + (i * 7919) % 31000);
      GenerationConfig c;
      c.max_new_tokens = gen_tokens;
      c.temperature = 0.0f;
      c.top_logprobs = 0;
      c.stop_at_end_of_sequence = false;
      engine.generate_from_tokens(std::span(prompt).first(4), c);  // warm-up: page in the weights
      // The host's bandwidth drifts by tens of percent within seconds (other tenants), so every
      // rep is bracketed by a probe just before and just after it and compared with their mean.
      ThreadPool pool(threads);
      const auto probe = [&] { return measure_read_bandwidth(pool, dram_probe_bytes(), 3); };
      const auto bytes = static_cast<double>(engine.model_info().weight_bytes_per_token);
      std::vector<double> prefill, decode, bandwidths, ratios;
      for (int r = 0; r < reps; ++r) {
        const double before = probe();
        const auto res = engine.generate_from_tokens(prompt, c);
        const double bandwidth = (before + probe()) / 2.0;
        prefill.push_back(res.timings.prefill_tokens_per_second());
        decode.push_back(res.timings.decode_tokens_per_second());
        bandwidths.push_back(bandwidth);
        ratios.push_back(decode.back() / (bandwidth / bytes));
      }
      const double rss = rss_mib();
      const double bandwidth = median(bandwidths);
      fmt::print("{:<6} {:>3} {:>10.1f} {:>12.1f} {:>12.2f} {:>11.2f} {:>7.0f}% {:>12.2f} {:>8.0f}Mi\n", type_name,
                 threads, bytes / (1 << 20), median(prefill), median(decode), bandwidth / bytes,
                 100.0 * median(ratios), bandwidth / 1e9, rss);
    }
  }
  fmt::print("\nfloor = measured read bandwidth / weight bytes per token (decode cannot be faster than reading\n"
             "every weight once per token); ratio = decode / floor, each run against the mean of a bandwidth probe\n"
             "just before and just after it. Medians of {} runs; {} prompt tokens, {} generated.\n"
             "Weights {}.\n",
             reps, prompt_tokens, gen_tokens,
             mmap_weights ? "read in place from the mmapped file" : "resident (huge pages, Q8_0/Q4_0/FP8 repacked where the CPU has their kernels)");
  return 0;
}
