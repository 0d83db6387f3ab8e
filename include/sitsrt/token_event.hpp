// The per-token record produced while generating: the seed of the audit trail.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace sitsrt {

struct TokenAlternative {
  std::int32_t id = 0;
  float logprob = 0.0f;  // natural log of the model's probability
};

// One generated token. Log-probabilities, alternatives and entropy describe the model's raw
// next-token distribution (before repetition penalty, temperature and truncation), so they are
// comparable across sampling settings.
struct TokenEvent {
  std::int64_t index = 0;         // 0 for the first generated token
  std::int32_t token_id = 0;
  std::string text;               // UTF-8 released at this step; a character split across tokens
                                  // arrives whole with the token that completes it
  float logprob = 0.0f;
  std::vector<TokenAlternative> top;  // the k most likely tokens, most likely first (k from the request)
  float entropy = 0.0f;           // nats
  double seconds_since_start = 0.0;  // since the request started (prefill included)
  // Log-probabilities of the whole vocabulary (index = token id); filled only at the steps a
  // request asks for with TraceLevel::kFull, empty otherwise.
  std::vector<float> full_logprobs;
};

// Called on the generating thread for every token; return false to stop generation.
using TokenCallback = std::function<bool(const TokenEvent&)>;

}  // namespace sitsrt
