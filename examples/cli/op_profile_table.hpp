// Printing Engine::op_profile() (EngineOptions::profile_ops) for `sitsrt bench --profile`: the
// single-stream measurement and each --concurrency level share these.
#pragma once

#include <sitsrt/engine.hpp>

#include <nlohmann/json.hpp>

#include <string_view>

namespace sitsrt::cli {

// {"steps", "tokens", "seconds", "ops": [{"op", "calls", "seconds"}, ...]}
nlohmann::json op_profile_json(const StepTimes& t);

// A table of t's ops: calls and microseconds per `unit` (per step, or per token when
// per_token), share of the steps' time, and the time between ops. Prints nothing for no steps.
void print_op_profile(std::string_view title, const StepTimes& t, bool per_token, std::string_view unit);

}  // namespace sitsrt::cli
