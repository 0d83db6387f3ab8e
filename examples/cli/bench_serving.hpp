// The serving part of `sitsrt bench` (--concurrency): concurrent streams through Engine::submit.
#pragma once

#include "commands.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace sitsrt::cli {

// "1,4,16,64" -> {1, 4, 16, 64}; throws UsageError naming --concurrency.
std::vector<int> parse_concurrency(const std::string& text);
// Runs each level and prints the table (or one JSON object with a `levels` list). bandwidth:
// measured read bytes/s (0: no floor). profile: the engine times its ops (profile_ops); each
// level's are printed after the table (JSON: a `profile` object per level). rounds: how many
// times every level runs, in turn; figures are medians over the rounds, the ratio to one stream
// the median of each round's own ratio.
int run_serving_bench(const Engine& engine, const std::vector<int>& levels, std::int64_t n_prompt, std::int64_t n_gen,
                      double bandwidth, bool json, bool profile, int rounds);

}  // namespace sitsrt::cli
