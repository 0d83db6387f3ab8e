#include "runtime/generator.hpp"

#include "core/check.hpp"
#include "runtime/sampler.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cmath>
#include <limits>
#include <random>

namespace sitsrt {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}


// log-softmax of the raw logits, for TraceLevel::kFull steps (double accumulation).
void full_log_softmax(std::span<const float> logits, std::vector<float>& out) {
  float max = -INFINITY;
  for (const float x : logits) max = std::max(max, x);
  double sum = 0.0;
  for (const float x : logits) sum += std::exp(static_cast<double>(x - max));
  const float log_sum = static_cast<float>(std::log(sum));
  out.resize(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - max - log_sum;
}

bool wants_full(const GenerationConfig& c, std::int64_t index) {
  if (c.audit.level != TraceLevel::kFull) return false;
  const auto& steps = c.audit.full_distribution_steps;
  return std::find(steps.begin(), steps.end(), index) != steps.end();
}

// Length of the longest suffix of `text` that is a proper prefix of some stop string: that
// much text must wait, since the next token may complete the stop string.
std::size_t stop_prefix_overlap(std::string_view text, const std::vector<std::string>& stops) {
  std::size_t best = 0;
  for (const auto& stop : stops) {
    const std::size_t max_len = std::min(text.size(), stop.size() - 1);
    for (std::size_t len = max_len; len > best; --len) {
      if (text.substr(text.size() - len) == std::string_view(stop).substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

// Text accumulated for the caller, with stop-string detection and hold-back.
class TextStream {
 public:
  explicit TextStream(const std::vector<std::string>& stops) : stops_(stops) {}

  // Adds decoded text; returns what may be released now. Sets stopped() when a stop string
  // appeared (the text from it on is dropped).
  std::string push(const std::string& piece) {
    held_ += piece;
    if (stops_.empty()) return std::exchange(held_, {});
    // A stop string may straddle released text only within `held_`, because everything that
    // could start one was held back.
    std::size_t cut = std::string::npos;
    for (const auto& stop : stops_) cut = std::min(cut, held_.find(stop));
    if (cut != std::string::npos) {
      stopped_ = true;
      std::string out = held_.substr(0, cut);
      held_.clear();
      return out;
    }
    const std::size_t keep = stop_prefix_overlap(held_, stops_);
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
  }
  std::string flush() { return std::exchange(held_, {}); }
  [[nodiscard]] bool stopped() const noexcept { return stopped_; }

 private:
  const std::vector<std::string>& stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace

void validate(const GenerationConfig& c) {
  const auto in_range = [](const char* field, double v, double lo, double hi) {
    if (!(v >= lo && v <= hi)) {  // also NaN
      raise(ErrorCode::kInvalidArgument, "GenerationConfig::{} = {} is out of range [{}, {}]", field, v, lo, hi);
    }
  };
  in_range("max_new_tokens", c.max_new_tokens, 0, INT32_MAX);
  in_range("temperature", c.temperature, 0.0, 1e6);
  in_range("top_k", c.top_k, 0, INT32_MAX);
  in_range("top_p", c.top_p, 0.0, 1.0);
  in_range("min_p", c.min_p, 0.0, 1.0);
  if (!(c.repeat_penalty > 0.0f && c.repeat_penalty <= 1e6f)) {
    raise(ErrorCode::kInvalidArgument, "GenerationConfig::repeat_penalty = {} must be in (0, 1e6]", c.repeat_penalty);
  }
  in_range("repeat_last_n", c.repeat_last_n, 0, INT32_MAX);
  in_range("top_logprobs", c.top_logprobs, 0, 64);
  for (const auto& s : c.stop) {
    if (s.empty()) raise(ErrorCode::kInvalidArgument, "GenerationConfig::stop holds an empty string");
  }
  for (const std::int64_t step : c.audit.full_distribution_steps) {
    if (step < 0) raise(ErrorCode::kInvalidArgument, "audit.full_distribution_steps holds {} (< 0)", step);
  }
}

namespace {

// Weights or activations that hold NaN or infinity leave no finite logit to sample from (the
// sampler would refuse too, without saying why): kInvalidModel, which the engine completes with
// the model file and the first non-finite weight.
void require_finite_logits(std::span<const float> logits, std::int32_t step) {
  float max = -std::numeric_limits<float>::infinity();
  bool all_nan = true;
  for (const float l : logits) {
    if (std::isnan(l)) continue;
    all_nan = false;
    max = std::max(max, l);
  }
  if (!std::isfinite(max)) {
    raise(ErrorCode::kInvalidModel, "the model produced no finite logit at step {} ({}): its weights or "
          "activations are NaN or infinite", step, all_nan ? "every logit is NaN" : fmt::format("largest {}", max));
  }
}

}  // namespace

const char* to_string(FinishReason reason) noexcept {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kEndOfSequence: return "eos";
    case FinishReason::kStopString: return "stop";
    case FinishReason::kCallback: return "callback";
    case FinishReason::kContextFull: return "context_full";
    case FinishReason::kCircuitBreaker: return "circuit_breaker";
  }
  return "unknown";
}

GenerationResult generate_tokens(Session& session, const Tokenizer& tokenizer,
                                 std::span<const std::int32_t> prompt, const GenerationConfig& config,
                                 const TokenCallback& on_token) {
  validate(config);
  if (prompt.empty()) raise(ErrorCode::kInvalidArgument, "prompt is empty (no tokens)");
  if (static_cast<std::int64_t>(prompt.size()) >= session.capacity()) {
    raise(ErrorCode::kInvalidArgument, "prompt of {} tokens does not fit the context length {}", prompt.size(),
          session.capacity());
  }
  GenerationResult result;
  result.prompt_tokens.assign(prompt.begin(), prompt.end());
  result.seed = config.seed ? *config.seed : (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^
                                                 std::random_device{}();
  SamplingParams params;
  params.temperature = config.temperature;
  params.top_k = config.top_k;
  params.top_p = config.top_p;
  params.min_p = config.min_p;
  params.repeat_penalty = config.repeat_penalty;
  params.repeat_last_n = config.repeat_last_n;
  params.seed = result.seed;
  const std::int32_t vocab = tokenizer.vocab().size();
  Sampler sampler(params, vocab);

  std::vector<std::int32_t> history(prompt.begin(), prompt.end());
  history.reserve(prompt.size() + static_cast<std::size_t>(config.max_new_tokens));
  result.tokens.reserve(static_cast<std::size_t>(config.max_new_tokens));
  Utf8StreamDecoder utf8;
  TextStream text(config.stop);
  TokenStats stats;
  TokenEvent event;

  const Clock::time_point start = Clock::now();
  session.reset();
  std::span<const float> logits = session.forward(prompt);
  result.timings.prompt_tokens = static_cast<std::int64_t>(prompt.size());
  result.timings.prefill_seconds = seconds_between(start, Clock::now());

  result.finish_reason = FinishReason::kLength;
  for (std::int32_t i = 0; i < config.max_new_tokens; ++i) {
    require_finite_logits(logits, i);
    const std::int32_t token = sampler.sample(logits, history);
    compute_token_stats(logits, token, config.top_logprobs, stats);
    history.push_back(token);
    result.tokens.push_back(token);

    const bool end_of_sequence = config.stop_at_end_of_sequence && tokenizer.is_end_of_generation(token);
    const bool last_by_length = i + 1 == config.max_new_tokens;
    const bool context_full = session.position() >= session.capacity();
    std::string piece = text.push(utf8.push(tokenizer.token_bytes(token)));
    if (!text.stopped() && (end_of_sequence || last_by_length || context_full)) {
      piece += text.push(utf8.flush());
      if (!text.stopped()) piece += text.flush();
    }
    result.text += piece;

    event.index = i;
    event.token_id = token;
    event.text = std::move(piece);
    event.logprob = stats.logprob;
    event.entropy = stats.entropy;
    event.top.clear();
    for (const auto& t : stats.top) event.top.push_back({t.id, t.logprob});
    event.full_logprobs.clear();
    if (wants_full(config, i)) full_log_softmax(logits, event.full_logprobs);
    event.seconds_since_start = seconds_between(start, Clock::now());
    const bool keep_going = on_token ? on_token(event) : true;

    if (text.stopped()) {
      result.finish_reason = FinishReason::kStopString;
      break;
    }
    if (end_of_sequence) {
      result.finish_reason = FinishReason::kEndOfSequence;
      break;
    }
    if (!keep_going) {
      result.finish_reason = FinishReason::kCallback;
      break;
    }
    if (last_by_length) break;
    if (context_full) {
      result.finish_reason = FinishReason::kContextFull;
      break;
    }
    const Clock::time_point decode_start = Clock::now();
    logits = session.forward({&token, 1});
    result.timings.decode_seconds += seconds_between(decode_start, Clock::now());
  }
  if (result.finish_reason == FinishReason::kCallback) result.text += text.push(utf8.flush()) + text.flush();
  result.timings.generated_tokens = static_cast<std::int64_t>(result.tokens.size());
  result.timings.total_seconds = seconds_between(start, Clock::now());
  return result;
}

}  // namespace sitsrt
