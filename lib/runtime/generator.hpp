// The generation loop of one request: prefill, then sample -> report -> decode until a stop
// condition. Produces TokenEvents with UTF-8-safe text pieces and holds back text that may be
// the start of a stop string, so a stop string never reaches the caller.
#pragma once

#include "runtime/executor.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/utf8_stream.hpp"

#include <sitsrt/generation.hpp>
#include <sitsrt/token_event.hpp>

#include <cstdint>
#include <span>

namespace sitsrt {

// Runs one request on a fresh (reset) session. Throws sitsrt::Error(kInvalidArgument) naming
// the parameter for an invalid config, or when the prompt does not fit the context;
// kInvalidModel when a step's logits hold no finite value (NaN or infinite weights/activations).
GenerationResult generate_tokens(Session& session, const Tokenizer& tokenizer,
                                 std::span<const std::int32_t> prompt, const GenerationConfig& config,
                                 const TokenCallback& on_token);

}  // namespace sitsrt
