// Bit-identity across refactors: digests of the logits (prefill rows and one-token decode steps)
// and greedy tokens of stories260K, the real models and synthetic models of every weight format,
// at every ISA level this CPU runs, resident and mmapped, int8 and float decode activations,
// compared with digests recorded on the same kind of machine before a change
// (tests/data/logit_digests.json). A machine kind with no recorded digests skips visibly; record
// them with SITSRT_RECORD_DIGESTS=FILE (merges this machine's entry into FILE) on a commit known
// to be good.
#include "audit/hash.hpp"
#include "cpu/cpu_context.hpp"
#include "support/isa.hpp"
#include "support/model_files.hpp"
#include "support/skip.hpp"

#include <sitsrt/engine.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace sitsrt {
namespace {

const std::string kDigestFile = std::string(SITSRT_SOURCE_DIR) + "/tests/data/logit_digests.json";

// The CPU model and the instruction-set features that select kernels: digests are only
// comparable between machines that agree on all of them.
// SITSRT_DIGEST_MACHINE_KEY names another kind (with SITSRT_TEST_ISA_CAP at that kind's top
// level): the generic and SIMD kernels are fixed instruction sequences, so a machine with more
// features computes a lesser kind's levels bit for bit and can check or record them.
std::string machine_key() {
  if (const char* key = std::getenv("SITSRT_DIGEST_MACHINE_KEY"); key != nullptr && *key != '\0') return key;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown", flags;
  while (std::getline(cpuinfo, line)) {
    const auto value = [&] { return line.substr(line.find(':') + 2); };
    if (line.rfind("model name", 0) == 0 && model == "unknown") model = value();
    if (line.rfind("flags", 0) == 0 && flags.empty()) flags = " " + value() + " ";
  }
  std::string key = model;
  for (const char* f : {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni",
                        "avx512_vbmi", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "avx_vnni"}) {
    if (flags.find(std::string(" ") + f + " ") != std::string::npos) key += std::string(" ") + f;
  }
  return key;
}

std::string digest_floats(const std::vector<float>& values) {
  return audit::sha256_hex(std::string_view(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
}

struct Mode {
  const char* name;
  bool mmap;
  bool int8;
};
constexpr Mode kModes[] = {{"resident-int8", false, true}, {"mmap-int8", true, true}, {"resident-f32", false, false}};

// Token ids inside [4, vocab): no specials, deterministic.
std::vector<std::int32_t> prompt_ids(std::int64_t vocab, int n) {
  std::vector<std::int32_t> ids;
  std::uint32_t state = 12345;
  for (int i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    ids.push_back(static_cast<std::int32_t>(4 + (state >> 8) % static_cast<std::uint32_t>(vocab - 4)));
  }
  return ids;
}

// prefill rows, decode rows and greedy tokens of one configuration, as three digests.
std::map<std::string, std::string> run_case(const std::string& model, const std::string& isa, const Mode& mode,
                                            int prompt_tokens, int decode_tokens) {
  EngineOptions o;
  o.model_path = model;
  o.threads = 2;
  o.cpu_isa = isa;
  o.mmap_weights = mode.mmap;
  o.int8_activations = mode.int8;
  o.max_batch_tokens = 8;  // prompts of more tokens run in several steps
  o.context_length = 128;
  Engine engine(o);
  const std::vector<std::int32_t> ids = prompt_ids(engine.model_info().n_vocab, prompt_tokens);
  std::map<std::string, std::string> out;
  out["prefill"] = digest_floats(engine.logits(ids, true));
  std::vector<float> decode;
  EvaluateOptions eval;
  eval.first_scored = prompt_tokens - decode_tokens;
  eval.decode_scored = true;
  engine.evaluate(ids, eval, [&](std::int64_t, std::span<const float> row) { decode.insert(decode.end(), row.begin(), row.end()); });
  out["decode"] = digest_floats(decode);
  GenerationConfig g;
  g.temperature = 0.0f;
  g.max_new_tokens = decode_tokens;
  g.stop_at_end_of_sequence = false;
  const GenerationResult r = engine.generate_from_tokens(std::span(ids).first(4), g);
  out["greedy"] = audit::sha256_hex(std::span<const std::int32_t>(r.tokens));
  return out;
}

struct Case {
  std::string name;
  std::string model;
  std::vector<std::string> isas;
  std::vector<Mode> modes;
  int prompt_tokens;
  int decode_tokens;
};

std::vector<std::string> supported_isas(bool with_generic) {
  std::vector<std::string> isas;
  for (cpu::Isa isa : {cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAvx512Vnni, cpu::Isa::kAmx}) {
    if (isa == cpu::Isa::kGeneric && !with_generic) continue;
    if (test::isa_supported(isa)) isas.emplace_back(cpu::name(isa));
  }
  return isas;
}

// Two layers of a 256-wide model: rows of whole K-quant blocks, several heads sharing KV heads.
RandomModelOptions synthetic_options(const char* architecture, std::uint64_t seed) {
  RandomModelOptions r;
  r.architecture = architecture;
  r.dim = 256;
  r.layers = 2;
  r.heads = 4;
  r.kv_heads = 2;
  r.ffn = 512;
  r.vocab = 512;
  r.context = 256;
  r.seed = seed;
  r.threads = 1;
  return r;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const std::vector<Mode> modes(std::begin(kModes), std::end(kModes));
  // Synthetic llamas of every weight format the random-model writer makes (K-quants need rows of 256).
  for (const char* type : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k",
                           "q5_k", "q6_k", "iq4_nl", "fp8_e4m3", "q4_g128", "q4_k_m"}) {
    RandomModelOptions r = synthetic_options("llama", 77);
    REQUIRE(set_weight_type(r, type));
    cases.push_back({std::string("synthetic-llama-") + type, test::random_model(r, std::string("digest-") + type),
                     supported_isas(true), modes, 12, 6});
  }
  // The other architectures' blocks (biases, Q/K norms, GeGLU + soft-cap, sliding window).
  for (const char* arch : {"qwen2", "qwen3", "gemma3", "mistral"}) {
    RandomModelOptions r = synthetic_options(arch, 78);
    r.sliding_window = 8;
    r.final_logit_softcap = std::string(arch) == "gemma3" ? 30.0f : 0.0f;
    r.type = DType::kQ8_0;
    cases.push_back({std::string("synthetic-") + arch + "-q8_0", test::random_model(r, std::string("digest-") + arch),
                     supported_isas(true), modes, 12, 6});
  }
  for (const char* file : {"stories260K.gguf", "stories260K-F16.gguf", "stories260K-Q8_0.gguf", "stories260K-Q4_0.gguf"}) {
    cases.push_back({file, test::shared_path(std::string("models/") + file), supported_isas(true), modes, 24, 8});
  }
  const char* env = std::getenv("SITSRT_MODELS_DIR");
  const std::string models = env ? env : std::string(SITSRT_SOURCE_DIR) + "/build/models";
  for (const char* file : {"SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"}) {
    // The generic kernels take seconds per token on these: the SIMD levels only.
    cases.push_back({file, models + "/" + file, supported_isas(false), {kModes[0], kModes[1]}, 10, 4});
  }
  return cases;
}

TEST_CASE("logits and greedy tokens are bit-identical to the recorded digests", "[digest][gated]") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The digests are of the Release build; a sanitizer build compiles the kernels with other
  // optimisation flags, so its floats may round differently.
  SITSRT_SKIP("digests are recorded for the Release build, not a sanitizer build");
#endif
  const std::string key = machine_key();
  nlohmann::json recorded = nlohmann::json::object();
  if (std::ifstream in(kDigestFile); in) in >> recorded;
  const char* record_to = std::getenv("SITSRT_RECORD_DIGESTS");
  const bool known = recorded.contains(key);
  if (!known && record_to == nullptr) {
    SITSRT_SKIP("no digests recorded for this machine kind (" << key << ") in " << kDigestFile);
  }
  nlohmann::json computed = nlohmann::json::object();
  int compared = 0, absent = 0;
  for (const Case& c : all_cases()) {
    if (!std::filesystem::exists(c.model)) {
      WARN("skipped " << c.name << ": " << c.model << " is absent");
      ++absent;
      continue;
    }
    for (const std::string& isa : c.isas) {
      for (const Mode& mode : c.modes) {
        const std::string id = c.name + " " + isa + " " + mode.name;
        for (const auto& [what, digest] : run_case(c.model, isa, mode, c.prompt_tokens, c.decode_tokens)) {
          computed[id + " " + what] = digest;
          if (record_to != nullptr || !recorded[key].contains(id + " " + what)) continue;
          INFO(id << " " << what);
          CHECK(digest == recorded[key][id + " " + what].get<std::string>());
          ++compared;
        }
      }
    }
  }
  if (record_to != nullptr) {
    nlohmann::json out = nlohmann::json::object();
    if (std::ifstream in(record_to); in) in >> out;
    out[key] = computed;
    std::ofstream(record_to) << out.dump(1) << "\n";
    WARN("recorded " << computed.size() << " digests for " << key << " in " << record_to);
    return;
  }
  WARN(compared << " digests compared for " << key << " (" << absent << " models absent)");
  CHECK(compared > 0);
}

}  // namespace
}  // namespace sitsrt
