// Per-request generation settings and results.
#pragma once

#include <sitsrt/audit.hpp>
#include <sitsrt/export.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sitsrt {

struct GenerationConfig {
  std::int32_t max_new_tokens = 256;
  float temperature = 0.8f;          // 0: greedy
  std::int32_t top_k = 40;           // 0: off
  float top_p = 0.95f;               // >= 1: off
  float min_p = 0.05f;               // <= 0: off
  float repeat_penalty = 1.0f;       // 1: off
  std::int32_t repeat_last_n = 64;
  std::optional<std::uint64_t> seed;  // unset: drawn from std::random_device (reported in the result)
  std::vector<std::string> stop;     // generation ends when the text contains one; it is not returned
  bool stop_at_end_of_sequence = true;
  std::int32_t top_logprobs = 5;     // alternatives reported per TokenEvent (0..64)
  std::optional<bool> add_bos;       // unset: as the model's tokenizer metadata says
  RequestAuditOptions audit;         // trace level, extra sinks and rules, caller metadata
};

// Throws sitsrt::Error(kInvalidArgument) naming the field for a value out of range:
// max_new_tokens, top_k, repeat_last_n >= 0; temperature in [0, 1e6] (0 = greedy); top_p and
// min_p in [0, 1]; repeat_penalty in (0, 1e6]; top_logprobs in [0, 64]; no empty stop string;
// no negative audit.full_distribution_steps. Every Engine entry point calls it first.
SITSRT_API void validate(const GenerationConfig& config);

enum class FinishReason {
  kLength,         // max_new_tokens reached
  kEndOfSequence,  // the model produced its end-of-sequence token
  kStopString,     // a stop string appeared in the text
  kCallback,       // the token callback returned false
  kContextFull,    // the context window is full
  kCircuitBreaker, // an anomaly rule stopped the request
  kCancelled,      // RequestHandle::cancel() (or the handle dropped) stopped the request
};
SITSRT_API const char* to_string(FinishReason reason) noexcept;

struct GenerationTimings {
  std::int64_t prompt_tokens = 0;
  std::int64_t generated_tokens = 0;
  double prefill_seconds = 0.0;  // prompt processing up to the first sampled token
  double decode_seconds = 0.0;   // forward passes of generated tokens
  double total_seconds = 0.0;
  [[nodiscard]] double prefill_tokens_per_second() const noexcept {
    return prefill_seconds > 0 ? static_cast<double>(prompt_tokens) / prefill_seconds : 0.0;
  }
  [[nodiscard]] double decode_tokens_per_second() const noexcept {
    // the last sampled token needs no forward pass
    return decode_seconds > 0 && generated_tokens > 1
               ? static_cast<double>(generated_tokens - 1) / decode_seconds : 0.0;
  }
};

struct GenerationResult {
  std::string text;                         // generated text (prompt excluded, stop string removed)
  std::vector<std::int32_t> prompt_tokens;  // as fed to the model (BOS included when added)
  std::vector<std::int32_t> tokens;         // generated token ids
  FinishReason finish_reason = FinishReason::kLength;
  std::uint64_t seed = 0;                   // the seed actually used
  std::string request_id;                   // as in the audit records (empty when not audited)
  GenerationTimings timings;
};

}  // namespace sitsrt
