// Audit hooks: what an engine reports about every request, the sinks that receive it, trace
// levels, anomaly rules, and the JSONL hash-chained audit log sink. See docs/audit-log.md.
#pragma once

#include <sitsrt/export.hpp>
#include <sitsrt/token_event.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sitsrt {

// How much of each token an audited request reports to its sinks.
enum class TraceLevel {
  kOff,     // request begin/end records only
  kTokens,  // + per token: index, id, text, logprob, time
  kTopK,    // + top-k alternatives and entropy
  kFull,    // + the full-vocabulary log-prob distribution at the steps the request names
};
SITSRT_API const char* to_string(TraceLevel level) noexcept;
// Parses "off", "tokens", "topk", "full"; throws sitsrt::Error(kInvalidArgument) otherwise.
SITSRT_API TraceLevel parse_trace_level(const std::string& name);

// Optional caller-supplied identity of a request, copied into its records.
struct RequestMetadata {
  std::string tenant;
  std::string user;
  std::vector<std::string> tags;
};

// Sampling parameters as resolved for the request (seed included even when drawn at random).
struct SamplingRecord {
  float temperature = 0.0f;
  std::int32_t top_k = 0;
  float top_p = 0.0f;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  std::int32_t repeat_last_n = 0;
  std::uint64_t seed = 0;
  std::int32_t max_new_tokens = 0;
  std::int32_t top_logprobs = 0;
  std::vector<std::string> stop;
  bool stop_at_end_of_sequence = true;
};

// Settings of the engine that can change the numbers a request produces.
struct EngineDigest {
  std::string library_version;
  std::string weights_format;  // e.g. "q8_0" (the format of most weight bytes)
  // EngineOptions::weights and mmap_weights as the request ran: a conversion changes the
  // weights, and the resident layouts of FP8 and Q4_K decode with other kernels than the mmapped
  // file (the same weight values, other roundings), so replay needs both.
  std::string weights_conversion = "as-stored";
  std::string weights_placement = "resident";  // "resident" or "mmap"
  std::string kv_cache_type;   // "f16" / "f32"
  std::string cpu_isa;         // kernel level in use
  std::string activations = "int8";  // decode activations for quantized weights: "int8" or "f32"
  int threads = 0;
  std::int64_t max_batch_tokens = 0;
  std::int64_t context_length = 0;
  bool deterministic = false;
  // Deterministic with batch invariance (EngineOptions::deterministic_batching): each row's
  // results independent of its batch mates. Absent (false) in logs written before the serving core.
  bool batch_invariant = false;
};

// Reported once per request, before its first token.
struct RequestRecord {
  std::string request_id;            // unique within the engine's process (random prefix + counter)
  std::int64_t unix_time_ns = 0;     // wall clock at the start of the request
  std::string model_path;
  std::string model_sha256;          // hex SHA-256 of the model file
  EngineDigest engine;
  SamplingRecord sampling;
  TraceLevel level = TraceLevel::kTokens;
  std::string input_sha256;          // of the prompt text (empty text when called with token ids)
  std::string input_tokens_sha256;   // of the prompt token ids as little-endian int32
  std::vector<std::int32_t> input_tokens;  // the prompt token ids (needed for replay)
  RequestMetadata metadata;
  // Chat requests (Engine::chat): the messages as a JSON array text (OpenAI style), the chat
  // template's SHA-256 and whether a generation prompt was added; input_sha256 is then the
  // rendered prompt's. Empty for plain prompts.
  std::string chat_messages_json;
  std::string chat_template_sha256;
  bool chat_add_generation_prompt = false;
};

// What a tripped anomaly rule does.
enum class AnomalyAction {
  kContinue,     // report only
  kStopRequest,  // end the request with FinishReason::kCircuitBreaker
  kOpenBreaker,  // stop the request and reject new ones (ErrorCode::kRejected) until reset
};
SITSRT_API const char* to_string(AnomalyAction action) noexcept;

// A rule over the token stream. Set exactly the fields of its kind.
struct AnomalyRule {
  enum class Kind {
    kEntropyAbove,  // entropy > threshold for `consecutive` steps in a row
    kLogprobBelow,  // the chosen token's logprob < threshold
    kBannedToken,   // the chosen token id == token_id
    kBannedString,  // the generated text (as released to the caller) contains `text`
  };
  std::string name;  // reported in callbacks and records
  Kind kind = Kind::kLogprobBelow;
  float threshold = 0.0f;
  std::int32_t consecutive = 1;
  std::int32_t token_id = -1;
  std::string text;
  AnomalyAction action = AnomalyAction::kContinue;
};

struct AnomalyEvent {
  std::string request_id;
  std::string rule;  // AnomalyRule::name
  AnomalyAction action = AnomalyAction::kContinue;
  std::int64_t token_index = 0;
  std::string detail;  // human-readable: the value that tripped the rule
};

// Shadow evaluation of one request: a second engine re-scored the generated tokens
// teacher-forced (see include/sitsrt/shadow.hpp).
struct ShadowDivergence {
  std::string request_id;
  std::string shadow_model_sha256;
  std::vector<float> logprob_diff;  // per generated token: shadow logprob - main logprob
  std::vector<float> topk_kl;       // per token: KL(main || shadow) over the main top-k, renormalised
                                    // (empty when the request's level has no top-k)
  float max_abs_logprob_diff = 0.0f;
  float mean_topk_kl = 0.0f;
  bool tripped = false;             // the divergence rule fired
};

// Reported once per request after its last token (also when it ends by an error).
struct RequestSummary {
  std::string request_id;
  std::string finish_reason;  // to_string(FinishReason), or "error"
  std::string error;          // the error message when finish_reason == "error"
  std::int64_t prompt_tokens = 0;
  std::int64_t generated_tokens = 0;
  std::vector<std::int32_t> tokens;  // generated ids
  std::int64_t prefill_ns = 0;
  std::int64_t decode_ns = 0;
  std::int64_t total_ns = 0;
};

// Receives a request's records. Calls for one request come from the thread running it, in
// order begin -> token* / anomaly* -> end; calls for different requests may be concurrent, so
// implementations must be thread-safe. Keep the work per call small (hand it to another
// thread): it runs on the generation path. A sink throws only to fail the request (e.g. a log
// that can no longer be written); the engine then reports the end as "error" to every sink,
// ignoring their exceptions, and rethrows the first.
class SITSRT_API AuditSink {
 public:
  virtual ~AuditSink();
  virtual void on_request_begin(const RequestRecord& record) = 0;
  // The event carries the fields of the request's trace level (see TraceLevel).
  virtual void on_token(const std::string& request_id, const TokenEvent& event) = 0;
  virtual void on_anomaly(const AnomalyEvent& /*event*/) {}
  // From a shadow evaluator's thread, after the request ended (possibly after later requests).
  virtual void on_shadow(const ShadowDivergence& /*divergence*/) {}
  virtual void on_request_end(const RequestSummary& summary) = 0;
  // Blocks until everything received so far is written (and synced when the sink syncs).
  virtual void flush() {}
};

// Per-request audit options (GenerationConfig::audit).
struct RequestAuditOptions {
  TraceLevel level = TraceLevel::kTokens;  // used when any sink is attached
  std::vector<std::int64_t> full_distribution_steps;  // kFull: token indices to record in full
  std::vector<std::shared_ptr<AuditSink>> sinks;     // in addition to the engine's
  std::vector<AnomalyRule> rules;                    // in addition to the engine's
  RequestMetadata metadata;
};

enum class Durability {
  kNever,       // leave it to the OS
  kPerRequest,  // fsync after each request's end record (default)
  kPerRecord,   // fsync after every record
};

struct JsonlAuditLogOptions {
  std::string path;  // the first file; rotation continues in path.1, path.2, ...
  std::string hmac_key;  // non-empty: records are authenticated with HMAC-SHA-256 under this key
  Durability durability = Durability::kPerRequest;
  std::uint64_t rotate_bytes = 0;  // start a new file when one grows past this; 0: never
  std::size_t queue_records = 4096;  // bounded queue; a full queue makes generation wait
  // Continue an existing log instead of refusing it: the last file of its series is verified
  // (from its header: chain, sequence, HMAC under `hmac_key`) and records follow its last one;
  // a log that does not verify there, or ends in a torn line, is refused (kIo, naming the file
  // and line). A log that does not exist yet is created as without `append`.
  bool append = false;
};

// A sink that writes one canonical JSON record per line with a SHA-256 (or HMAC) hash chain,
// from its own thread. The file must not exist yet unless `append` (an audit log is never overwritten);
// throws sitsrt::Error(kIo) when it exists or cannot be created; when another writer (another
// process, or another sink of this one) holds it, the message says "audit log PATH is in use by
// pid N". The file is write-locked (fcntl) while the sink lives; see docs/audit-log.md. Writes pending records on
// destruction. Thread-safe. If a write fails (e.g. disk full) the sink stops writing and every
// later hook call and flush() throws sitsrt::Error(kIo), so requests fail instead of running
// unaudited.
SITSRT_API std::shared_ptr<AuditSink> make_jsonl_audit_sink(const JsonlAuditLogOptions& options);

struct OtlpTraceOptions {
  std::string path;  // created or appended to; one ExportTraceServiceRequest (OTLP/JSON) per line
  std::string service_name = "sitsrt";
};

// A sink that writes one OpenTelemetry span per request (GenAI semantic conventions:
// gen_ai.operation.name, gen_ai.request.*, gen_ai.response.*, gen_ai.usage.*) with one event per
// token when the request's level records tokens, in the OTLP/JSON file format the OpenTelemetry
// Collector's file exporter writes and its otlpjsonfile receiver reads. The line is written when
// the request ends; no network I/O. Throws sitsrt::Error(kIo) when the file cannot be opened
// (a FIFO without a reader fails at once). A line that cannot be written whole (disk full, "File
// too large") is cut back off the file and fails that request's end (kIo, with the system's
// reason), every later request and flush(). Thread-safe.
SITSRT_API std::shared_ptr<AuditSink> make_otlp_trace_sink(const OtlpTraceOptions& options);

}  // namespace sitsrt
