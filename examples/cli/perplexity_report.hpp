// How sitsrt perplexity prints its results: llama-perplexity's text layout, and the --json summary.
#pragma once

#include "eval/kld_base_file.hpp"
#include "eval/perplexity_stats.hpp"

#include <sitsrt/model_info.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sitsrt::cli {

struct RunFacts {
  const ModelInfo& info;
  std::int64_t n_ctx = 0;
  std::int64_t first_scored = 0;
  std::int64_t chunks = 0;
  std::int64_t scored = 0;     // positions scored
  std::int64_t evaluated = 0;  // tokens run through the model
  double seconds = 0.0;        // wall time of the evaluation (the model load excluded)
  bool decode_scored = false;
  bool add_bos = false;
};

nlohmann::json run_json(const RunFacts& facts, const std::string& model_sha256, const eval::Estimate& ppl,
                        const std::vector<double>& running_ppl);
nlohmann::json base_json(const eval::KldBaseHeader& header, const std::string& path, const std::string& mode);
nlohmann::json kld_json(const eval::KldSummary& s);

void print_kld_chunk_header();
void print_kld_chunk_line(std::int64_t chunk, const eval::KldSummary& running);
void print_kld_summary(const eval::KldSummary& s);

}  // namespace sitsrt::cli
