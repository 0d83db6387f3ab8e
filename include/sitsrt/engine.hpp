// Engine: a loaded model ready to generate. Immutable after construction and safe to share
// between threads; each generate() call gets its own KV cache and sampler state.
#pragma once

#include <sitsrt/audit.hpp>
#include <sitsrt/chat.hpp>
#include <sitsrt/export.hpp>
#include <sitsrt/generation.hpp>
#include <sitsrt/model_info.hpp>
#include <sitsrt/plan.hpp>
#include <sitsrt/request.hpp>
#include <sitsrt/token_event.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt {

// Element type of cached keys and values. kInt8: per position and head, an f16 scale (0.53x
// the bytes of f16); kInt4: per group of 32 values, an f16 scale (0.28x). See docs/serving.md.
enum class KvCacheType { kF32, kF16, kInt8, kInt4 };
SITSRT_API const char* to_string(KvCacheType type) noexcept;

// The serving scheduler's limits (Engine::submit, generate; docs/serving.md). Requests run in
// shared batched steps; their KV caches are blocks of a pool sized once at load.
struct ServingOptions {
  std::int64_t max_num_seqs = 16;            // requests in the running batch
  std::int64_t max_num_batched_tokens = 0;   // tokens per step (decode rows + prompt chunks); 0: max_batch_tokens
  std::int64_t kv_block_size = 16;           // positions per KV block
  // Positions the KV block pool holds over all requests; 0: 2 x context_length. At least
  // context_length (one request of the whole context always fits).
  std::int64_t kv_pool_tokens = 0;
  bool preempt_by_swap = false;  // when blocks run out: false recomputes, true copies blocks to host memory
  bool prefix_caching = true;    // full prompt blocks are shared between requests with the same prefix
  std::int64_t tenant_max_kv_blocks = 0;  // per tenant id (SubmitOptions::tenant); 0: no limit
  std::int64_t tenant_max_seqs = 0;       // concurrent requests per tenant; 0: no limit
  bool reject_over_quota = false;         // true: a request over its tenant's quota fails (kRejected) instead of waiting
};
enum class RopeStyleOption { kAuto, kNormal, kNeox };

struct EngineOptions {
  std::string model_path;             // a GGUF file, or a Hugging Face directory (config.json + safetensors)
  int threads = 0;                    // <= 0: all hardware threads
  std::int64_t context_length = 0;    // <= 0: min(training context, 4096)
  KvCacheType kv_cache_type = KvCacheType::kF16;
  std::optional<KvCacheType> k_cache_type;  // K apart (unset: kv_cache_type)
  std::optional<KvCacheType> v_cache_type;  // V apart
  // int8/int4 K or V are stored Hadamard-rotated per head when head_dim is a power of two
  // (lower quantization error; docs/serving.md). Recorded in ModelInfo::kv_cache_type.
  bool kv_hadamard = true;
  // int8/int4 K rows are stored minus a per-layer mean key and divided by per-channel scales,
  // both measured at load on a built-in text (softmax cancels the shift, q takes the scales;
  // the quantization scales then fit what varies between keys; channels that rope turns over
  // the context keep their mean). Needs the tokenizer; recorded in ModelInfo::kv_cache_type as
  // "+centered". docs/serving.md has the measurements.
  bool kv_k_centering = true;
  // int8/int4 K and V also keep f16 copies of each sequence's latest positions: a query reads
  // its last kv_recent_window keys and values (itself included) from them, the older ones
  // quantized. The latest keys are the ones attended most, so this cuts int4's KL divergence
  // ~2-3x (docs/serving.md) for kv_recent_window f16 rows per layer and sequence (0: off; at most
  // 256). Recorded in ModelInfo::kv_cache_type as ",recent=N" (a backend without the window's
  // kernels would run without it, and the label show none). Positions taken from the prefix
  // cache have no copies (read quantized), so deterministic mode turns prefix caching off while
  // a window is on.
  std::int64_t kv_recent_window = 32;
  ServingOptions serving;
  std::int64_t max_batch_tokens = 256;  // prompt tokens per forward pass (activation arena size)
  RopeStyleOption rope_style = RopeStyleOption::kAuto;  // override only for mislabelled checkpoints
  // The backend and device that run the model: "cpu" (or "cpu:0"); the backends this build has
  // are listed by sitsrt::available_backends(). Unknown or absent ones fail the load
  // (kUnsupported, naming the registered backends).
  std::string device = "cpu";
  std::string cpu_isa = "auto";  // "auto", "amx", "avx512vnni", "avx512", "avx2" or "generic" (clamped to the CPU)
  // Decode matmuls of Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q4_G128 weights quantize their input row to int8 per
  // 32-block and use integer dot products (faster; adds the activation rounding error, see
  // docs/quantization.md). false: float activations everywhere. Recorded in ModelInfo.
  bool int8_activations = true;
  // Format of the matmul weights: "as-stored" (read in place from the file), or converted at
  // load to "f16", "bf16", "q8" (Q8_0), "q4" (Q4_0), "fp8" (FP8 E4M3), "fp8-channel" (FP8 E4M3,
  // one scale per output row), "fp8-block" (FP8 E4M3, one scale per 128 x 128 block), "fp8-all" (FP8 including the
  // output head) or "q4g128" (INT4 g128). Norms stay f32 and a token embedding that is not also the output head stays
  // as stored; weights whose rows are not whole blocks of the target are kept too. The cost is reported in ModelInfo
  // (weights_convert_seconds / weights_converted_bytes). See docs/quantization.md.
  std::string weights = "as-stored";
  // false (default): the weights are copied at load into one huge-page host buffer, Q8_0, Q4_0,
  // Q4_K and FP8 matmul weights repacked into the layouts the decode kernels stream fastest
  // (Q8_0/Q4_0: same results bit for bit; FP8 and Q4_K decode with other kernels, whose results
  // differ within their rounding bounds; audit logs record this choice and replay uses it), and
  // the file's pages are dropped: faster decode, a load that reads the whole file. true: matmuls
  // read the mmapped file in place (instant load, pages shared between processes, 4 KiB pages).
  // The copy's cost is in ModelInfo::weights_copy_seconds. With mmapped weights the file must
  // not change while the engine lives: every request (generate, logits) first checks the file's
  // size and modification time and fails with kIo if it changed since the load; a file truncated
  // *during* a request ends the process with SIGBUS (a page of the mapping no longer exists; the
  // library installs no signal handler). Resident weights are immune (docs/hardening.md).
  bool mmap_weights = false;
  // Memory for weights + KV caches + activation arenas; 0: unlimited. A budget that cannot hold
  // the weights and one request is refused at load (kOutOfMemory, naming the deficit); when
  // concurrent requests fill it, later requests wait in arrival order for a session to free up.
  std::uint64_t memory_budget_bytes = 0;
  // Called during load with a stage name and a fraction in [0, 1] (e.g. for a progress line).
  std::function<void(std::string_view stage, double fraction)> on_progress;
  // Deterministic mode: a request's tokens and logprobs depend only on the model, the prompt,
  // the sampling parameters and the recorded engine digest (ISA level, max_batch_tokens, KV
  // type), never on the thread count or on other requests; "auto" ISA is resolved once and
  // recorded. See docs/audit-log.md.
  bool deterministic = false;
  // With deterministic: also batch-invariant (a request's bits do not depend on the requests
  // sharing its batched steps; docs/serving.md). false reproduces engines before the serving
  // core (replay of their logs sets it from the record).
  bool deterministic_batching = true;
  // Audit: sinks that receive every request (requests can add their own), anomaly rules applied
  // to every request, and a callback for tripped rules (called on the generating thread).
  std::vector<std::shared_ptr<AuditSink>> audit_sinks;
  std::vector<AnomalyRule> anomaly_rules;
  std::function<void(const AnomalyEvent&)> on_anomaly;
  // Jinja source of the chat template used by chat() and apply_chat_template() instead of the
  // model's own (GGUF tokenizer.chat_template, tokenizer_config.json chat_template); empty: the
  // model's. Parsed at load: a template with a construct this version does not support fails the
  // load (kUnsupported, naming the construct and its line:column).
  std::string chat_template;
  // Time every graph node (a clock read and a backend synchronise around each); read the totals
  // with Engine::op_profile(). For finding where a step's time goes; off by default.
  bool profile_ops = false;
  // One-token (decode) steps run groups of matmuls that share an input, and matmul + SwiGLU or
  // residual add epilogues, as one parallel region each (same results bit for bit). false runs
  // every node on its own, to measure what the fusion saves.
  bool decode_fusion = true;
  // Decode steps on a GPU backend are captured once per batch size as a CUDA graph and replayed
  // (the same kernels, bit for bit the same results; queue_stats() counts them). false launches
  // every kernel from the host, to measure what the graphs save.
  bool device_graphs = true;
};

// Wall time per kind of graph node (op_profile()), for decode steps and prefill steps apart.
struct OpTime {
  std::string op;  // graph op name ("matmul", "attention", ...; "matmul (output head)")
  std::uint64_t calls = 0;
  double seconds = 0.0;
};
struct StepTimes {
  std::uint64_t steps = 0;
  std::uint64_t tokens = 0;
  double seconds = 0.0;      // whole steps (the ops plus the gaps between them)
  std::vector<OpTime> ops;   // most time first
};
struct OpProfile {
  StepTimes decode;   // steps in which every sequence feeds one token (one row, or a decode batch)
  StepTimes prefill;  // steps with a prompt chunk (several tokens of one sequence)
};

// The scheduler's queue, its limits and the KV block pool (generate, chat, submit), then the
// sessions of logits() / evaluate() (each a KV cache and an activation arena of its own).
struct RequestQueueStats {
  std::int64_t waiting = 0;            // submitted, not admitted (preempted ones included)
  std::int64_t running = 0;            // admitted
  std::int64_t preempted = 0;          // waiting after a preemption
  std::uint64_t submitted = 0;
  std::uint64_t finished = 0;
  std::uint64_t rejected = 0;          // refused by a tenant quota
  std::uint64_t preemptions = 0;
  std::uint64_t admission_waits = 0;   // requests that waited for KV blocks before admission
  std::uint64_t steps = 0;             // batched steps run
  std::uint64_t step_tokens = 0;       // token rows over those steps
  std::int64_t max_step_sequences = 0; // most sequences in one step
  std::int64_t kv_blocks = 0;
  std::int64_t kv_blocks_free = 0;     // including cached prefix blocks
  std::int64_t kv_blocks_cached = 0;
  std::uint64_t prefix_cache_hits = 0;  // blocks reused
  std::uint64_t prefix_cache_misses = 0;
  std::uint64_t kv_copies = 0;          // copy-on-write copies
  std::uint64_t device_graph_captures = 0;  // decode-step graphs captured (GPU backends)
  std::uint64_t device_graph_replays = 0;   // steps run from a graph, its capture included
  // GPU backends' matmuls by kernel, counted as queued from the host (a replayed graph's once,
  // at its capture): prompt chunks FP8 x FP8 or BF16 on the tensor cores; decode rows on the
  // tensor-core decode kernels or the CUDA cores.
  std::uint64_t device_prefill_fp8_matmuls = 0;
  std::uint64_t device_prefill_bf16_matmuls = 0;
  std::uint64_t device_decode_tensor_core_matmuls = 0;
  std::uint64_t device_decode_cuda_core_matmuls = 0;
  // Their attentions of steps longer than flash-decoding takes (prompt chunks): on the tiled
  // tensor-core kernel, or a block per row (batch invariance, other head sizes).
  std::uint64_t device_prefill_tiled_attentions = 0;
  std::uint64_t device_prefill_row_attentions = 0;
  // Their FP8 x FP8 prompt matmuls that found the activations quantized already (by the fused
  // RMSNorm + quantize, or an earlier matmul over the same rows: Q, K and V).
  std::uint64_t device_prefill_fp8_activation_reuses = 0;
  // Of device_prefill_fp8_matmuls: those with 128 x 128 block-scaled weights (DeepSeek-V3 /
  // Qwen3-FP8 checkpoints, --weights fp8-block); the rest are scaled per channel.
  std::uint64_t device_prefill_fp8_block_matmuls = 0;
  ServingOptions limits;                // as resolved at load
  std::int64_t kv_block_bytes = 0;
  // logits() / evaluate() sessions:
  std::uint64_t requests = 0;       // sessions handed out (generate, logits, ...)
  std::uint64_t sessions = 0;       // sessions allocated; the others were reused
  std::uint64_t queued = 0;         // requests that waited for memory
  double queued_seconds = 0.0;      // their total wait
  std::size_t in_flight = 0;        // requests holding a session now
  std::size_t peak_in_flight = 0;
};

// How Engine::evaluate() runs a sequence and which positions it reports.
struct EvaluateOptions {
  // Positions before this one are context only: their logits are neither computed by the output
  // head nor reported. Must be in [0, tokens.size()).
  std::int64_t first_scored = 0;
  // false: prompt steps of up to max_batch_tokens from the first token (the prefill kernels), as
  // logits(tokens, true) runs them. true: the context before first_scored in prompt steps, then
  // every scored position as its own one-token step: the decode kernels generation uses.
  // EngineOptions::int8_activations applies to both: prefill rows of the formats with an int8
  // GEMM are computed as the int8 decode computes each row.
  bool decode_scored = false;
};
// Receives the next-token logits after tokens[position] (n_vocab floats), once per scored
// position in increasing order. `logits` is a view into the request's activation arena, valid
// only during the call: copy what must outlive it. Runs on the calling thread without the
// engine's step lock held, so it may take its time and may call other Engine methods (they
// take their own session); an exception it throws ends the evaluation and propagates.
using LogitsCallback = std::function<void(std::int64_t position, std::span<const float> logits)>;

// A backend this build can run models on (EngineOptions::device).
struct BackendSummary {
  std::string name;     // "cpu"
  std::string summary;  // one line: what it runs on
};
// In registration order; the first is the default.
SITSRT_API std::vector<BackendSummary> available_backends();

class SITSRT_API Engine {
 public:
  // Loads and validates the model; throws sitsrt::Error naming the file and field on failure.
  explicit Engine(EngineOptions options);
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Generates a continuation of `prompt`. on_token (optional) runs on the calling thread for
  // each token and may stop generation by returning false. Thread-safe.
  GenerationResult generate(std::string_view prompt, const GenerationConfig& config = {},
                            const TokenCallback& on_token = {}) const;
  // Same, from token ids (no BOS is added).
  GenerationResult generate_from_tokens(std::span<const std::int32_t> prompt_tokens,
                                        const GenerationConfig& config = {},
                                        const TokenCallback& on_token = {}) const;

  // Chat: `messages` rendered through the chat template (EngineOptions::chat_template, else the
  // model's), tokenized with special tokens parsed as single ids (BOS prepended per the model's
  // metadata unless the rendering starts with it), then generated from; generation ends at the
  // model's end-of-turn tokens (<|im_end|>, <end_of_turn>, <|eot_id|>, ...) unless
  // config.stop_at_end_of_sequence is false. options.add_generation_prompt is normally true.
  // Audit records carry the rendered prompt's SHA-256 (input_sha256), the messages and the
  // template's SHA-256. Throws kUnsupported when there is no template, kInvalidArgument when the
  // template raises (raise_exception) or a message is malformed. Thread-safe.
  GenerationResult chat(std::span<const ChatMessage> messages, const GenerationConfig& config = {},
                        const TokenCallback& on_token = {}, const ChatTemplateOptions& options = {}) const;
  // The prompt text chat() would feed the model (bos_token/eos_token are the vocabulary's).
  [[nodiscard]] std::string apply_chat_template(std::span<const ChatMessage> messages,
                                                const ChatTemplateOptions& options = {}) const;
  [[nodiscard]] std::string apply_chat_template(std::span<const ChatMessage> messages,
                                                bool add_generation_prompt) const;
  // ... and its token ids as chat() feeds them.
  [[nodiscard]] std::vector<std::int32_t> chat_tokens(std::span<const ChatMessage> messages,
                                                      const ChatTemplateOptions& options = {}) const;
  // The template chat() uses; nullptr when neither the options nor the model give one.
  [[nodiscard]] const ChatTemplate* chat_template() const noexcept;

  // Queues a request with the scheduler and returns at once; the handle polls its token events,
  // waits for the result or cancels it (docs/serving.md). Thread-safe. Audit sinks and anomaly
  // rules apply as for generate(), their calls made on the scheduler thread. Throws as
  // generate() for invalid input, and kRejected when the tenant's quota refuses it.
  [[nodiscard]] RequestHandle submit(std::string_view prompt, const GenerationConfig& config = {},
                                     SubmitOptions options = {}) const;
  [[nodiscard]] RequestHandle submit_tokens(std::span<const std::int32_t> prompt_tokens,
                                            const GenerationConfig& config = {}, SubmitOptions options = {}) const;
  // chat() through the scheduler: the messages rendered and tokenized as chat() does (the audit
  // record carries the same chat fields), then queued as submit() queues a prompt.
  [[nodiscard]] RequestHandle submit_chat(std::span<const ChatMessage> messages, const GenerationConfig& config = {},
                                          SubmitOptions options = {}, const ChatTemplateOptions& template_options = {}) const;

  // Next-token logits after each of `tokens` (all_positions) or after the last one only.
  // Row-major [positions x vocab].
  std::vector<float> logits(std::span<const std::int32_t> tokens, bool all_positions = false) const;
  // Scores `tokens` from an empty context without materialising [positions x vocab]: calls
  // on_logits for each position >= options.first_scored as its step completes (perplexity, KL
  // divergence; sitsrt perplexity). With first_scored 0 and decode_scored false the rows equal
  // logits(tokens, true) bit for bit. Memory: one request's session, as logits(). Thread-safe.
  void evaluate(std::span<const std::int32_t> tokens, const EvaluateOptions& options,
                const LogitsCallback& on_logits) const;

  [[nodiscard]] std::vector<std::int32_t> tokenize(std::string_view text, bool add_bos = true) const;
  // Text of a token sequence; a sequence starting with BOS loses the tokenizer's dummy-prefix
  // space, so detokenize(tokenize(text)) == text.
  [[nodiscard]] std::string detokenize(std::span<const std::int32_t> tokens) const;
  // Bytes of one token as printed (may be a partial UTF-8 sequence).
  [[nodiscard]] std::string token_bytes(std::int32_t token) const;

  [[nodiscard]] const ModelInfo& model_info() const noexcept;
  // Hex SHA-256 of the model file (an HF directory: of "NAME SHA256\n" per .json/.safetensors
  // file, in name order), computed on first use (with on_progress("hash", f)) and cached. It is
  // read from the files as they were when the engine loaded them (kept open since before the
  // load, so renaming another file over the path changes nothing); throws sitsrt::Error(kIo)
  // naming the file when one was rewritten since, as no hash could then name the weights in use.
  [[nodiscard]] const std::string& model_sha256() const;
  [[nodiscard]] EngineDigest engine_digest() const;
  // The engine-wide circuit breaker: opened by a rule with AnomalyAction::kOpenBreaker; while
  // open, generate() throws sitsrt::Error(kRejected). Thread-safe.
  [[nodiscard]] bool circuit_breaker_open() const noexcept;
  void reset_circuit_breaker() const noexcept;
  void open_circuit_breaker() const noexcept;  // e.g. by a shadow evaluator's divergence rule
  // Devices, their memory against the budget, and the layers of each stage (print with
  // to_table() / to_json()). One CPU device until the multi-device partitioner lands.
  [[nodiscard]] const DevicePlan& plan() const noexcept;
  [[nodiscard]] RequestQueueStats queue_stats() const;
  // Totals since load (or the last reset); empty unless EngineOptions::profile_ops.
  [[nodiscard]] OpProfile op_profile() const;
  void reset_op_profile() const;
  [[nodiscard]] std::string graph_table() const;  // the computation graph and memory plan
  [[nodiscard]] std::string graph_json() const;

 private:
  struct ChatInput;
  // The messages rendered and tokenized as chat() feeds them, with their audit fields.
  [[nodiscard]] ChatInput prepare_chat(std::span<const ChatMessage> messages, const ChatTemplateOptions& options,
                                       const GenerationConfig& config) const;
  GenerationResult run_request(std::string_view prompt_text, std::span<const std::int32_t> prompt_tokens,
                               const GenerationConfig& config, const TokenCallback& on_token,
                               const ChatInput* chat = nullptr) const;
  RequestHandle submit_request(std::string_view prompt_text, std::span<const std::int32_t> prompt_tokens,
                               const GenerationConfig& config, SubmitOptions options,
                               const ChatInput* chat = nullptr) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sitsrt
