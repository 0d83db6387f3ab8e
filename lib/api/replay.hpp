// Replay of an audit log: re-runs every recorded request on a model with its recorded engine
// settings, sampling parameters and seed, and compares token ids and logprobs bit for bit.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt {

struct ReplayOutcome {
  std::string request_id;
  bool match = false;
  bool deterministic = false;  // recorded in deterministic mode (then a mismatch is a defect)
  std::int64_t tokens = 0;     // tokens compared
  std::string message;         // the first difference, or "bit-exact"
};

struct ReplayOptions {
  std::string model_path;
  int threads = 0;  // the result must not depend on it
  std::function<void(std::string_view, double)> on_progress;
};

// Throws sitsrt::Error(kRejected) when the model file's SHA-256 differs from the recorded one,
// kInvalidArgument when the log cannot be read, kUnsupported when this machine cannot use the
// recorded ISA level.
std::vector<ReplayOutcome> replay_log(const std::vector<std::string>& files, const ReplayOptions& options);

}  // namespace sitsrt
