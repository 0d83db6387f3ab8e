#include "runtime/generator.hpp"

#include "core/check.hpp"
#include "cpu/logits/logit_kernels.hpp"
#include "runtime/sampler.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <random>

namespace sitsrt {

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

std::string TextStream::push(const std::string& piece) {
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
void require_finite_logits(const cpu::LogitMax& largest, std::int32_t step) {
  const auto [max, index] = largest;
  const bool all_nan = index < 0;
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
    case FinishReason::kCancelled: return "cancelled";
  }
  return "unknown";
}

TokenGenerator::TokenGenerator(const Tokenizer& tokenizer, std::span<const std::int32_t> prompt,
                               const GenerationConfig& config, std::int64_t capacity)
    : tokenizer_(tokenizer), config_(config), capacity_(capacity), text_(config_.stop) {
  validate(config_);
  if (prompt.empty()) raise(ErrorCode::kInvalidArgument, "prompt is empty (no tokens)");
  if (static_cast<std::int64_t>(prompt.size()) >= capacity) {
    raise(ErrorCode::kInvalidArgument, "prompt of {} tokens does not fit the context length {}", prompt.size(),
          capacity);
  }
  result_.prompt_tokens.assign(prompt.begin(), prompt.end());
  result_.seed = config_.seed ? *config_.seed : (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^
                                                    std::random_device{}();
  SamplingParams params;
  params.temperature = config_.temperature;
  params.top_k = config_.top_k;
  params.top_p = config_.top_p;
  params.min_p = config_.min_p;
  params.repeat_penalty = config_.repeat_penalty;
  params.repeat_last_n = config_.repeat_last_n;
  params.seed = result_.seed;
  sampler_ = std::make_unique<Sampler>(params, tokenizer.vocab().size());
  history_.assign(prompt.begin(), prompt.end());
  history_.reserve(prompt.size() + static_cast<std::size_t>(config_.max_new_tokens));
  result_.tokens.reserve(static_cast<std::size_t>(config_.max_new_tokens));
  result_.timings.prompt_tokens = static_cast<std::int64_t>(prompt.size());
  result_.finish_reason = FinishReason::kLength;
  done_ = config_.max_new_tokens == 0;
}

TokenGenerator::~TokenGenerator() = default;

std::int64_t TokenGenerator::summary_k(std::int64_t limit) const noexcept {
  const std::int64_t sampler_k = sampler_->summary_k();
  if (sampler_k == 0 || wants_full(config_, generated())) return 0;
  const std::int64_t k = std::max<std::int64_t>(sampler_k, config_.top_logprobs);
  return k <= limit ? k : 0;
}

const TokenEvent& TokenGenerator::sample(std::span<const float> logits, std::int64_t position) {
  const auto i = static_cast<std::int32_t>(result_.tokens.size());
  const cpu::LogitMax largest = cpu::max_logit(logits);  // one pass for the check and the statistics
  require_finite_logits(largest, i);
  const std::int32_t token = sampler_->sample(logits, history_);
  compute_token_stats(logits, largest.value, token, config_.top_logprobs, stats_);
  record(token, position);
  if (wants_full(config_, i)) full_log_softmax(logits, event_.full_logprobs);
  return event_;
}

const TokenEvent& TokenGenerator::sample(const LogitSummary& summary, std::int64_t position) {
  const auto i = static_cast<std::int32_t>(result_.tokens.size());
  if (wants_full(config_, i)) raise(ErrorCode::kInternal, "token {} wants the full distribution, not a summary", i);
  require_finite_logits({summary.max, summary.argmax}, i);
  const std::int32_t token = sampler_->sample(summary);
  token_stats_from_summary(summary, token, config_.top_logprobs, stats_);
  record(token, position);
  return event_;
}

void TokenGenerator::record(std::int32_t token, std::int64_t position) {
  const auto i = static_cast<std::int32_t>(result_.tokens.size());
  history_.push_back(token);
  result_.tokens.push_back(token);

  end_of_sequence_ = config_.stop_at_end_of_sequence && tokenizer_.is_end_of_generation(token);
  last_by_length_ = i + 1 == config_.max_new_tokens;
  context_full_ = position >= capacity_;
  std::string piece = text_.push(utf8_.push(tokenizer_.token_bytes(token)));
  if (!text_.stopped() && (end_of_sequence_ || last_by_length_ || context_full_)) {
    piece += text_.push(utf8_.flush());
    if (!text_.stopped()) piece += text_.flush();
  }
  result_.text += piece;

  event_.index = i;
  event_.token_id = token;
  event_.text = std::move(piece);
  event_.logprob = stats_.logprob;
  event_.entropy = stats_.entropy;
  event_.top.clear();
  for (const auto& t : stats_.top) event_.top.push_back({t.id, t.logprob});
  event_.full_logprobs.clear();
  event_.seconds_since_start = seconds_between(start_, Clock::now());
}

bool TokenGenerator::advance(bool keep_going) {
  if (text_.stopped()) {
    result_.finish_reason = FinishReason::kStopString;
  } else if (end_of_sequence_) {
    result_.finish_reason = FinishReason::kEndOfSequence;
  } else if (!keep_going) {
    result_.finish_reason = FinishReason::kCallback;
  } else if (last_by_length_) {
    result_.finish_reason = FinishReason::kLength;
  } else if (context_full_) {
    result_.finish_reason = FinishReason::kContextFull;
  } else {
    return true;
  }
  done_ = true;
  return false;
}

void TokenGenerator::stop(FinishReason reason) {
  result_.finish_reason = reason;
  done_ = true;
}

GenerationResult TokenGenerator::finish() {
  // A stop from outside (callback, cancel) releases the text held back for stop strings.
  if (result_.finish_reason == FinishReason::kCallback || result_.finish_reason == FinishReason::kCancelled) {
    result_.text += text_.push(utf8_.flush()) + text_.flush();
  }
  result_.timings.generated_tokens = static_cast<std::int64_t>(result_.tokens.size());
  result_.timings.total_seconds = seconds_between(start_, Clock::now());
  return std::move(result_);
}

GenerationResult generate_tokens(Session& session, const Tokenizer& tokenizer,
                                 std::span<const std::int32_t> prompt, const GenerationConfig& config,
                                 const TokenCallback& on_token) {
  TokenGenerator gen(tokenizer, prompt, config, session.capacity());
  const Clock::time_point start = gen.start_time();
  session.reset();
  std::span<const float> logits = session.forward(prompt);
  gen.timings().prefill_seconds = seconds_between(start, Clock::now());
  if (gen.done()) return gen.finish();
  for (;;) {
    const TokenEvent& event = gen.sample(logits, session.position());
    const bool keep_going = on_token ? on_token(event) : true;
    if (!gen.advance(keep_going)) break;
    const std::int32_t token = gen.next_token();
    const Clock::time_point decode_start = Clock::now();
    logits = session.forward({&token, 1});
    gen.timings().decode_seconds += seconds_between(decode_start, Clock::now());
  }
  return gen.finish();
}

}  // namespace sitsrt
