// The generation loop of one request: prefill, then sample -> report -> decode until a stop
// condition. Produces TokenEvents with UTF-8-safe text pieces and holds back text that may be
// the start of a stop string, so a stop string never reaches the caller.
#pragma once

#include "runtime/executor.hpp"
#include "runtime/sampler.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/utf8_stream.hpp"

#include <sitsrt/generation.hpp>
#include <sitsrt/token_event.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace sitsrt {

class Sampler;

// Text accumulated for the caller, with stop-string detection and hold-back.
class TextStream {
 public:
  explicit TextStream(const std::vector<std::string>& stops) : stops_(stops) {}
  // Adds decoded text; returns what may be released now. Sets stopped() when a stop string
  // appeared (the text from it on is dropped).
  std::string push(const std::string& piece);
  std::string flush() { return std::exchange(held_, {}); }
  [[nodiscard]] bool stopped() const noexcept { return stopped_; }

 private:
  const std::vector<std::string>& stops_;
  std::string held_;
  bool stopped_ = false;
};

// One request's generation as a state machine, so that a scheduler can drive many requests
// through shared batched steps: feed the prompt, then repeatedly sample() from the logits after
// the last fed token, hand the event to the consumer, advance() with its answer, and feed
// next_token(). generate_tokens() is the one-request loop over it; the serving scheduler runs
// the same calls, so tokens, text and finish reasons are the same whichever drives it.
class TokenGenerator {
 public:
  // Throws kInvalidArgument for an invalid config, an empty prompt, or a prompt that does not
  // fit `capacity` positions.
  TokenGenerator(const Tokenizer& tokenizer, std::span<const std::int32_t> prompt, const GenerationConfig& config,
                 std::int64_t capacity);
  ~TokenGenerator();
  TokenGenerator(const TokenGenerator&) = delete;
  TokenGenerator& operator=(const TokenGenerator&) = delete;

  // Samples the token after `logits`; `position` is how many tokens the cache then holds.
  // kInvalidModel when no logit is finite. The event is valid until the next call.
  const TokenEvent& sample(std::span<const float> logits, std::int64_t position);
  // How many best ids the next sample() can work from as a row's summary (sampler's need and
  // top_logprobs), or 0 when it needs the row: sampling parameters that read the whole row, the
  // full distribution asked for this token, or more than `limit` (the backend's) best ids.
  [[nodiscard]] std::int64_t summary_k(std::int64_t limit) const noexcept;
  // sample() from the summary of the row (with at least summary_k() best ids): the same token,
  // statistics and event as from the row.
  const TokenEvent& sample(const LogitSummary& summary, std::int64_t position);
  // Applies the consumer's answer to the last event. true: feed next_token() and sample again.
  bool advance(bool keep_going);
  // Ends the request from outside (cancel, error path) with `reason`.
  void stop(FinishReason reason);
  [[nodiscard]] bool done() const noexcept { return done_; }
  [[nodiscard]] std::int32_t next_token() const noexcept { return history_.back(); }
  // Prompt and sampled tokens: what a preempted request recomputes its cache from.
  [[nodiscard]] std::span<const std::int32_t> history() const noexcept { return history_; }
  [[nodiscard]] std::int64_t generated() const noexcept { return static_cast<std::int64_t>(result_.tokens.size()); }
  [[nodiscard]] const GenerationConfig& config() const noexcept { return config_; }
  [[nodiscard]] std::chrono::steady_clock::time_point start_time() const noexcept { return start_; }
  GenerationTimings& timings() noexcept { return result_.timings; }
  // The result (call once, after done()).
  GenerationResult finish();

 private:
  // Appends the sampled token (stats_ holds its statistics) and fills event_.
  void record(std::int32_t token, std::int64_t position);
  const Tokenizer& tokenizer_;
  GenerationConfig config_;
  std::int64_t capacity_;
  std::unique_ptr<Sampler> sampler_;
  std::vector<std::int32_t> history_;
  Utf8StreamDecoder utf8_;
  TextStream text_;
  TokenStats stats_;
  TokenEvent event_;
  GenerationResult result_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  bool end_of_sequence_ = false, last_by_length_ = false, context_full_ = false, done_ = false;
};

// Runs one request on a fresh (reset) session. Throws sitsrt::Error(kInvalidArgument) naming
// the parameter for an invalid config, or when the prompt does not fit the context;
// kInvalidModel when a step's logits hold no finite value (NaN or infinite weights/activations).
GenerationResult generate_tokens(Session& session, const Tokenizer& tokenizer,
                                 std::span<const std::int32_t> prompt, const GenerationConfig& config,
                                 const TokenCallback& on_token);

}  // namespace sitsrt
