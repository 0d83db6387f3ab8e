// Cost of auditing: decode tokens/s of the same engine with no audit, and with a JSONL audit log
// (fsync per request) at each trace level. Runs are interleaved round-robin so drift in a shared
// machine hits every configuration alike; each figure is the median over the repeats.
//   bench_audit [--model FILE] [--threads N] [--gen 64] [--reps 7]
// Make the model first (~20 s):
//   build/bin/sitsrt make-model --dim 1024 --layers 24 --heads 16 --kv-heads 8 --ffn 2816
//     --vocab 32000 --type q8_0 -o build/models/bench-0.35b-q8_0.gguf  (one command line)
#include <sitsrt/audit.hpp>
#include <sitsrt/engine.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>
#include <unistd.h>

using namespace sitsrt;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Config {
  std::string name;
  bool audited = false;
  TraceLevel level = TraceLevel::kOff;
};

}  // namespace

int main(int argc, char** argv) {
  std::string model = "build/models/bench-0.35b-q8_0.gguf";
  int threads = 0, gen = 64, reps = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model") model = argv[i + 1];
    else if (a == "--threads") threads = std::stoi(argv[i + 1]);
    else if (a == "--gen") gen = std::stoi(argv[i + 1]);
    else if (a == "--reps") reps = std::stoi(argv[i + 1]);
    else {
      fmt::print(stderr, "unknown option {}\n", a);
      return 2;
    }
  }
  if (!std::filesystem::exists(model)) {
    fmt::print(stderr, "{} is absent; make it with sitsrt make-model (see the header of bench_audit.cpp)\n", model);
    return 1;
  }
  EngineOptions o;
  o.model_path = model;
  o.threads = threads;
  const Engine engine(o);
  (void)engine.model_sha256();  // hashed once, before the first audited request, outside the timing
  const std::string dir = fmt::format("{}/sitsrt-bench-audit-{}", std::filesystem::temp_directory_path().string(), ::getpid());
  std::filesystem::create_directories(dir);

  const std::vector<Config> configs = {{"no audit", false, TraceLevel::kOff},
                                       {"jsonl, level off", true, TraceLevel::kOff},
                                       {"jsonl, level tokens", true, TraceLevel::kTokens},
                                       {"jsonl, level topk", true, TraceLevel::kTopK},
                                       {"jsonl, level full (1 step)", true, TraceLevel::kFull}};
  std::vector<std::vector<double>> decode(configs.size());
  GenerationConfig base;
  base.max_new_tokens = gen;
  base.temperature = 0.8f;
  base.seed = 7;
  base.stop_at_end_of_sequence = false;
  (void)engine.generate("Warm up the caches", base);
  int file = 0;
  for (int r = 0; r < reps; ++r) {
    for (std::size_t c = 0; c < configs.size(); ++c) {
      GenerationConfig config = base;
      std::shared_ptr<AuditSink> sink;
      if (configs[c].audited) {
        JsonlAuditLogOptions log;
        log.path = fmt::format("{}/log-{}.jsonl", dir, file++);
        log.durability = Durability::kPerRequest;
        sink = make_jsonl_audit_sink(log);
        config.audit.sinks = {sink};
        config.audit.level = configs[c].level;
        config.audit.full_distribution_steps = {gen / 2};
      }
      const GenerationResult result = engine.generate("The quick brown fox jumps over the lazy dog", config);
      decode[c].push_back(result.timings.decode_tokens_per_second());
      if (sink) sink->flush();  // the writer's fsync finishes outside the next measurement
    }
  }
  std::filesystem::remove_all(dir);
  const double off = median(decode[0]);
  fmt::print("model {} | {} threads | {} generated tokens | median of {} interleaved runs\n", model,
             engine.model_info().threads, gen, reps);
  fmt::print("{:<28} {:>14} {:>12}\n", "configuration", "decode tok/s", "overhead");
  for (std::size_t c = 0; c < configs.size(); ++c) {
    const double v = median(decode[c]);
    fmt::print("{:<28} {:>14.2f} {:>11.2f}%\n", configs[c].name, v, c == 0 ? 0.0 : (off - v) / off * 100.0);
  }
  return 0;
}
