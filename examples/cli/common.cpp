#include "commands.hpp"

#include "audit/key_file.hpp"

#include <sitsrt/error.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <cctype>
#include <cstdint>
#include <limits>
#include <unistd.h>

namespace sitsrt::cli {

namespace {

// "cpu" (, "cuda" ...): the backends this build registered.
std::string backend_names() {
  std::string names;
  for (const BackendSummary& b : available_backends()) names += (names.empty() ? "" : ", ") + b.name;
  return names;
}

}  // namespace

std::vector<OptionSpec> engine_option_specs() {
  return {
      {"model", 'm', "PATH", "model: a GGUF file or a Hugging Face directory (config.json + safetensors)", ""},
      {"threads", 't', "N", "compute threads", "all cores"},
      {"ctx", 'c', "N", "context length", "min(training context, 4096)"},
      {"kv-type", 0, "TYPE",
       "KV cache element type: f32, f16, int8 (f16 scale per position and head) or int4 "
       "(16 levels, 8-bit scale per 32 values)",
       "f16"},
      {"k-type", 0, "TYPE", "element type of cached keys alone (f32, f16, int8, int4)", "--kv-type"},
      {"v-type", 0, "TYPE", "element type of cached values alone (f32, f16, int8, int4)", "--kv-type"},
      {"no-kv-hadamard", 0, "",
       "store int8/int4 K and V without the Hadamard rotation (higher quantization "
       "error; for comparison)",
       ""},
      {"no-kv-centering", 0, "",
       "store int8/int4 K without the per-layer mean key and channel scales measured "
       "at load (higher quantization error; for comparison)",
       ""},
      {"kv-recent-window", 0, "N",
       "int8/int4 K and V keep f16 copies of each request's latest N positions, "
       "which every query reads instead of the quantized rows (0: off)",
       "32"},
      {"max-num-seqs", 0, "N", "requests the scheduler runs in one batch", "16"},
      {"max-num-batched-tokens", 0, "N", "tokens per batched step (decode rows + prompt chunks)", "--batch"},
      {"kv-block-size", 0, "N", "positions per KV cache block", "16"},
      {"kv-pool-tokens", 0, "N", "positions the KV block pool holds over all requests (>= --ctx)", "2 x context"},
      {"preemption", 0, "POLICY", "when KV blocks run out: recompute or swap (copy to host memory)", "recompute"},
      {"no-prefix-cache", 0, "", "do not share the KV blocks of equal prompt prefixes between requests", ""},
      {"tenant-max-seqs", 0, "N", "concurrent requests per tenant (0: no limit)", "0"},
      {"tenant-max-kv-blocks", 0, "N", "KV blocks per tenant (0: no limit)", "0"},
      {"batch", 'b', "N", "prompt tokens per forward pass", "256"},
      {"device", 0, "NAME", "backend and device that run the model (this build: " + backend_names() + ")", "cpu"},
      {"isa", 0, "LEVEL", "CPU kernel level: auto, amx, avx512vnni, avx512, avx2, generic", "auto"},
      {"activations", 0, "KIND", "decode activations for quantized weights: int8 or f32", "int8"},
      weights_option_spec(),
      {"mmap", 0, "",
       "read weights in place from the mmapped file (default: copy them into huge pages, Q8_0/Q4_0 "
       "repacked for the decode kernels; faster decode, slower load)",
       ""},
      {"no-decode-fusion", 0, "",
       "run every node of a decode step on its own (to measure what the fused matmul "
       "groups save; same results)",
       ""},
      {"no-device-graphs", 0, "",
       "launch every kernel of a GPU decode step from the host instead of replaying a "
       "captured CUDA graph (to measure what the graphs save; same results)",
       ""},
      {"rope-style", 0, "STYLE", "rotary embedding pairs: auto, normal (adjacent), neox (halves)", "auto"},
      {"deterministic", 0, "", "deterministic mode (recorded in audit logs; see docs/audit-log.md)", ""},
      {"memory-budget", 0, "BYTES",
       "memory for weights + KV caches + activations, e.g. 512M or 2G (K/M/G/T: powers of 1024); a model that does "
       "not fit is refused at load, requests beyond it queue; 0 = unlimited",
       "unlimited"},
  };
}

namespace {

// "1073741824", "512M", "2G", "1GiB", "64KB": K/M/G/T are powers of 1024. Throws UsageError.
std::uint64_t parse_byte_size(const std::string& option, const std::string& text) {
  const auto bad = [&] {
    return UsageError(fmt::format("--{} expects a byte count such as 1073741824, 512M or 2G, got '{}'", option, text));
  };
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 20) throw bad();
  std::string suffix = text.substr(digits);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix.ends_with("IB")) suffix.resize(suffix.size() - 2);
  else if (suffix.size() > 1 && suffix.ends_with("B")) suffix.pop_back();
  int shift = 0;
  if (suffix == "K") shift = 10;
  else if (suffix == "M") shift = 20;
  else if (suffix == "G") shift = 30;
  else if (suffix == "T") shift = 40;
  else if (!suffix.empty() && suffix != "B") throw bad();
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < digits; ++i) {
    const auto digit = static_cast<std::uint64_t>(text[i] - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) throw bad();
    value = value * 10 + digit;
  }
  if (shift > 0 && value > (std::numeric_limits<std::uint64_t>::max() >> shift)) throw bad();
  return value << shift;
}

}  // namespace

EngineOptions engine_options_from(const Args& args) {
  EngineOptions o;
  const auto model = args.get("model");
  if (!model) throw UsageError("no model given: pass -m FILE.gguf or -m HF_DIR (write a GGUF with 'sitsrt make-model')");
  o.model_path = *model;
  o.threads = static_cast<int>(args.get_int("threads", 0, 0, 1024));
  o.context_length = args.get_int("ctx", 0, 0, 1 << 28);
  o.max_batch_tokens = args.get_int("batch", 256, 1, 65536);
  const auto kv_type = [&](const char* option, const std::string& text) {
    if (text == "f16") return KvCacheType::kF16;
    if (text == "f32") return KvCacheType::kF32;
    if (text == "int8") return KvCacheType::kInt8;
    if (text == "int4") return KvCacheType::kInt4;
    throw UsageError(fmt::format("--{} must be f32, f16, int8 or int4, got '{}'", option, text));
  };
  o.kv_cache_type = kv_type("kv-type", args.get_or("kv-type", "f16"));
  if (const auto k = args.get("k-type")) o.k_cache_type = kv_type("k-type", *k);
  if (const auto v = args.get("v-type")) o.v_cache_type = kv_type("v-type", *v);
  o.kv_hadamard = !args.has("no-kv-hadamard");
  o.kv_k_centering = !args.has("no-kv-centering");
  o.kv_recent_window = args.get_int("kv-recent-window", 32, 0, 256);
  o.serving.max_num_seqs = args.get_int("max-num-seqs", 16, 1, 4096);
  o.serving.max_num_batched_tokens = args.get_int("max-num-batched-tokens", 0, 1, 65536);
  if (o.serving.max_num_batched_tokens > o.max_batch_tokens) {
    throw UsageError(fmt::format("--max-num-batched-tokens {} is above --batch {} (the activation arena's rows)",
                                 o.serving.max_num_batched_tokens, o.max_batch_tokens));
  }
  o.serving.kv_block_size = args.get_int("kv-block-size", 16, 1, 4096);
  o.serving.kv_pool_tokens = args.get_int("kv-pool-tokens", 0, 1, std::int64_t{1} << 30);
  const std::string preemption = args.get_or("preemption", "recompute");
  if (preemption != "recompute" && preemption != "swap") {
    throw UsageError(fmt::format("--preemption must be recompute or swap, got '{}'", preemption));
  }
  o.serving.preempt_by_swap = preemption == "swap";
  o.serving.prefix_caching = !args.has("no-prefix-cache");
  o.serving.tenant_max_seqs = args.get_int("tenant-max-seqs", 0, 0, 4096);
  o.serving.tenant_max_kv_blocks = args.get_int("tenant-max-kv-blocks", 0, 0, std::int64_t{1} << 30);
  o.device = args.get_or("device", "cpu");  // the Engine rejects an unknown one, listing the registered backends
  o.cpu_isa = args.get_or("isa", "auto");
  o.decode_fusion = !args.has("no-decode-fusion");
  o.device_graphs = !args.has("no-device-graphs");
  const std::string rope = args.get_or("rope-style", "auto");
  if (rope == "auto") {
    o.rope_style = RopeStyleOption::kAuto;
  } else if (rope == "normal") {
    o.rope_style = RopeStyleOption::kNormal;
  } else if (rope == "neox") {
    o.rope_style = RopeStyleOption::kNeox;
  } else {
    throw UsageError(fmt::format("--rope-style must be auto, normal or neox, got '{}'", rope));
  }
  o.deterministic = args.has("deterministic");
  const std::string act = args.get_or("activations", "int8");
  if (act != "int8" && act != "f32") throw UsageError(fmt::format("--activations must be int8 or f32, got '{}'", act));
  o.int8_activations = act == "int8";
  o.weights = args.get_or("weights", "as-stored");  // the Engine rejects a bad value, listing the valid ones
  o.mmap_weights = args.has("mmap");
  if (const auto budget = args.get("memory-budget")) o.memory_budget_bytes = parse_byte_size("memory-budget", *budget);
  o.on_progress = print_progress;
  return o;
}

OptionSpec weights_option_spec() {
  return {"weights", 0, "FORMAT",
          "matmul weight format: as-stored, or converted at load to f16, bf16, q8 (Q8_0), q4 (Q4_0), fp8 (E4M3; "
          "the output head stays 16-bit: bf16 for an f32 head), fp8-channel (E4M3, one scale per output row: FP8 x "
          "FP8 prefill on Hopper), fp8-block (E4M3, one scale per 128x128 block, as DeepSeek-V3 / Qwen3-FP8: FP8 x FP8 "
          "prefill on Hopper), fp8-all (E4M3, the head too) or q4g128 (INT4 g128)",
          "as-stored"};
}

nlohmann::json weights_json(const ModelInfo& info) {
  return {{"format", info.weights},
          {"converted_tensors", info.weights_converted_tensors},
          {"kept_tensors", info.weights_kept_tensors},
          {"converted_bytes", info.weights_converted_bytes},
          {"converted_to_bytes", info.weights_converted_to_bytes},
          {"convert_seconds", info.weights_convert_seconds},
          {"output_head", info.weights_output_head},
          {"mmapped", info.weights_mmapped},
          {"repacked_tensors", info.weights_repacked_tensors},
          {"copy_seconds", info.weights_copy_seconds}};
}

std::string weights_text(const ModelInfo& info) {
  const std::string placement =
      info.weights_mmapped ? "mmapped"
                           : fmt::format("resident ({} repacked, copied in {:.3f} s)", info.weights_repacked_tensors,
                                         info.weights_copy_seconds);
  if (info.weights == "as-stored") return "as stored, " + placement;
  std::string text =
      fmt::format("{}: {} matmul tensors converted ({:.1f} MiB -> {:.1f} MiB in {:.3f} s), {} kept as stored",
                  info.weights, info.weights_converted_tensors,
                  static_cast<double>(info.weights_converted_bytes) / (1 << 20),
                  static_cast<double>(info.weights_converted_to_bytes) / (1 << 20), info.weights_convert_seconds,
                  info.weights_kept_tensors);
  if (!info.weights_output_head.empty()) text += fmt::format("; output head in {}", info.weights_output_head);
  return text + "; " + placement;
}

nlohmann::json serving_json(const RequestQueueStats& q) {
  const ServingOptions& l = q.limits;
  return {{"limits",
           {{"max_num_seqs", l.max_num_seqs},
            {"max_num_batched_tokens", l.max_num_batched_tokens},
            {"kv_block_size", l.kv_block_size},
            {"kv_pool_tokens", l.kv_pool_tokens},
            {"kv_block_bytes", q.kv_block_bytes},
            {"preemption", l.preempt_by_swap ? "swap" : "recompute"},
            {"prefix_caching", l.prefix_caching},
            {"tenant_max_kv_blocks", l.tenant_max_kv_blocks},
            {"tenant_max_seqs", l.tenant_max_seqs},
            {"reject_over_quota", l.reject_over_quota}}},
          {"submitted", q.submitted},
          {"finished", q.finished},
          {"rejected", q.rejected},
          {"waiting", q.waiting},
          {"running", q.running},
          {"preemptions", q.preemptions},
          {"admission_waits", q.admission_waits},
          {"steps", q.steps},
          {"step_tokens", q.step_tokens},
          {"max_step_sequences", q.max_step_sequences},
          {"kv_blocks", q.kv_blocks},
          {"kv_blocks_free", q.kv_blocks_free},
          {"kv_blocks_cached", q.kv_blocks_cached},
          {"prefix_cache_hits", q.prefix_cache_hits},
          {"prefix_cache_misses", q.prefix_cache_misses},
          {"kv_copies", q.kv_copies},
          {"device_graph_captures", q.device_graph_captures},
          {"device_graph_replays", q.device_graph_replays},
          {"device_prefill_fp8_matmuls", q.device_prefill_fp8_matmuls},
          {"device_prefill_bf16_matmuls", q.device_prefill_bf16_matmuls},
          {"device_decode_tensor_core_matmuls", q.device_decode_tensor_core_matmuls},
          {"device_decode_cuda_core_matmuls", q.device_decode_cuda_core_matmuls},
          {"device_prefill_tiled_attentions", q.device_prefill_tiled_attentions},
          {"device_prefill_row_attentions", q.device_prefill_row_attentions},
          {"device_prefill_fp8_activation_reuses", q.device_prefill_fp8_activation_reuses},
          {"device_prefill_fp8_block_matmuls", q.device_prefill_fp8_block_matmuls}};
}

std::string serving_text(const RequestQueueStats& q) {
  const ServingOptions& l = q.limits;
  const auto limit = [](std::int64_t v) { return v > 0 ? std::to_string(v) : std::string("unlimited"); };
  const std::string quotas =
      l.tenant_max_seqs <= 0 && l.tenant_max_kv_blocks <= 0
          ? "none"
          : fmt::format("seqs {}, KV blocks {}{}", limit(l.tenant_max_seqs), limit(l.tenant_max_kv_blocks),
                        l.reject_over_quota ? " (over quota: rejected)" : " (over quota: wait)");
  return fmt::format(
      "serving: max_num_seqs {}, max_num_batched_tokens {}, KV pool {} blocks x {} positions ({:.1f} MiB), "
      "preemption {}, prefix cache {}, tenant quotas {} | {} steps, {} prefix-cache hits, {} preemptions",
      l.max_num_seqs, l.max_num_batched_tokens, q.kv_blocks, l.kv_block_size,
      static_cast<double>(q.kv_blocks) * static_cast<double>(q.kv_block_bytes) / (1 << 20),
      l.preempt_by_swap ? "swap" : "recompute", l.prefix_caching ? "on" : "off", quotas, q.steps,
      q.prefix_cache_hits, q.preemptions);
}

std::string read_text_file(const std::string& path, std::string_view what, std::uintmax_t max_bytes) {
  std::string text;
  if (path == "-") {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    text = ss.str();
  } else {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(status)) throw UsageError(fmt::format("{} '{}' does not exist", what, path));
    if (!std::filesystem::is_regular_file(status)) {
      throw UsageError(fmt::format("{} '{}' is not a regular file", what, path));
    }
    if (std::filesystem::file_size(path, ec) > max_bytes) {
      throw UsageError(fmt::format("{} '{}' is larger than {} bytes", what, path, max_bytes));
    }
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    if (in) ss << in.rdbuf();
    if (!in || in.bad()) throw UsageError(fmt::format("cannot read {} '{}'", what, path));
    text = ss.str();
  }
  if (text.size() > max_bytes) throw UsageError(fmt::format("{} '{}' is larger than {} bytes", what, path, max_bytes));
  return text;
}

std::string read_key_file(const std::string& path) {
  try {
    return audit::read_key_file(path);  // bounded; a FIFO or device is refused, not read
  } catch (const Error& e) {
    throw UsageError(fmt::format("cannot use key file: {}", e.what()));
  }
}

void print_progress(std::string_view stage, double fraction) {
  static int last = -1;
  const int percent = static_cast<int>(fraction * 100.0);
  if (percent == last) return;
  last = percent;
  if (percent >= 100) {
    last = -1;
    if (isatty(STDERR_FILENO)) fmt::print(stderr, "\r{}: done      \n", stage);
    return;
  }
  if (isatty(STDERR_FILENO)) fmt::print(stderr, "\r{}: {:3d}%", stage, percent);
}

}  // namespace sitsrt::cli
