#include "perplexity_report.hpp"

#include <fmt/format.h>

namespace sitsrt::cli {
namespace {

nlohmann::json estimate(const eval::Estimate& e) {
  return {{"value", e.value}, {"error", e.error}};
}

nlohmann::json quantiles(const eval::Quantiles& q) {
  return {{"min", q.min}, {"p0.1", q.p0_1},     {"p1", q.p1},   {"p5", q.p5},   {"p10", q.p10},
          {"p25", q.p25}, {"median", q.median}, {"p75", q.p75}, {"p90", q.p90}, {"p95", q.p95},
          {"p99", q.p99}, {"p99.9", q.p99_9},   {"max", q.max}};
}

}  // namespace

nlohmann::json run_json(const RunFacts& f, const std::string& model_sha256, const eval::Estimate& ppl,
                        const std::vector<double>& running_ppl) {
  return {{"model", f.info.path},
          {"model_sha256", model_sha256},
          {"n_vocab", f.info.n_vocab},
          {"n_ctx", f.n_ctx},
          {"first_scored", f.first_scored},
          {"chunks", f.chunks},
          {"scored", f.scored},
          {"evaluated_tokens", f.evaluated},
          {"add_bos", f.add_bos},
          {"decode_scored", f.decode_scored},
          {"engine",
           {{"weights", f.info.weights},
            {"activations", f.info.int8_activations ? "int8" : "f32"},
            {"kv_cache_type", f.info.kv_cache_type},
            {"cpu_isa", f.info.cpu_isa},
            {"threads", f.info.threads}}},
          {"ppl", ppl.value},
          {"ppl_error", ppl.error},
          {"chunk_ppl", running_ppl},
          {"seconds", f.seconds},
          {"tokens_per_second", f.seconds > 0.0 ? static_cast<double>(f.evaluated) / f.seconds : 0.0}};
}

nlohmann::json base_json(const eval::KldBaseHeader& h, const std::string& path, const std::string& mode) {
  return {{"path", path},
          {"mode", mode},
          {"version", h.version},
          {"model_sha256", h.model_sha256},
          {"description", h.description},
          {"n_chunks", h.n_chunks},
          {"rows", h.rows()},
          {"bytes", h.file_bytes()},
          {"decode_scored", h.decode_scored}};
}

nlohmann::json kld_json(const eval::KldSummary& s) {
  return {{"count", s.count},
          {"ppl", estimate(s.ppl)},
          {"ppl_base", estimate(s.ppl_base)},
          {"ln_ppl_correlation", s.ln_ppl_correlation},
          {"ln_ppl_ratio", estimate(s.ln_ppl_ratio)},
          {"ppl_ratio", estimate(s.ppl_ratio)},
          {"ppl_diff", estimate(s.ppl_diff)},
          {"kld", estimate(s.kld)},
          {"kld_quantiles", quantiles(s.kld_quantiles)},
          {"p_diff", estimate(s.p_diff)},
          {"p_diff_quantiles", quantiles(s.p_diff_quantiles)},
          {"rms_p_diff", estimate(s.rms_p_diff)},
          {"same_top", estimate(s.same_top)}};
}

void print_kld_chunk_header() {
  fmt::print(
      "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS"
      "            Same top p\n");
}

void print_kld_chunk_line(std::int64_t chunk, const eval::KldSummary& r) {
  fmt::print(
      "{:4d}    {:9.4f} ± {:9.4f}    {:10.5f} ± {:10.5f}    {:10.5f} ± {:10.5f}    {:6.3f} ± {:6.3f} %    "
      "{:6.3f} ± {:6.3f} %\n",
      chunk, r.ppl.value, r.ppl.error, r.ln_ppl_ratio.value, r.ln_ppl_ratio.error, r.kld.value, r.kld.error,
      100.0 * r.rms_p_diff.value, 100.0 * r.rms_p_diff.error, 100.0 * r.same_top.value, 100.0 * r.same_top.error);
  std::fflush(stdout);
}

void print_kld_summary(const eval::KldSummary& s) {
  if (s.count < 100) fmt::print("\n(only {} positions: the statistics below are rough)\n", s.count);
  fmt::print("\n====== Perplexity statistics ======\n");
  fmt::print("Mean PPL(Q)                   : {:10.6f} ± {:10.6f}\n", s.ppl.value, s.ppl.error);
  fmt::print("Mean PPL(base)                : {:10.6f} ± {:10.6f}\n", s.ppl_base.value, s.ppl_base.error);
  fmt::print("Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2f}%\n", 100.0 * s.ln_ppl_correlation);
  fmt::print("Mean ln(PPL(Q)/PPL(base))     : {:10.6f} ± {:10.6f}\n", s.ln_ppl_ratio.value, s.ln_ppl_ratio.error);
  fmt::print("Mean PPL(Q)/PPL(base)         : {:10.6f} ± {:10.6f}\n", s.ppl_ratio.value, s.ppl_ratio.error);
  fmt::print("Mean PPL(Q)-PPL(base)         : {:10.6f} ± {:10.6f}\n", s.ppl_diff.value, s.ppl_diff.error);
  const eval::Quantiles& k = s.kld_quantiles;
  fmt::print("\n====== KL divergence statistics ======\n");
  fmt::print("Mean    KLD: {:10.6f} ± {:10.6f}\n", s.kld.value, s.kld.error);
  fmt::print("Maximum KLD: {:10.6f}\n99.9%   KLD: {:10.6f}\n99.0%   KLD: {:10.6f}\n95.0%   KLD: {:10.6f}\n", k.max,
             k.p99_9, k.p99, k.p95);
  fmt::print("90.0%   KLD: {:10.6f}\nMedian  KLD: {:10.6f}\n10.0%   KLD: {:10.6f}\n 5.0%   KLD: {:10.6f}\n", k.p90,
             k.median, k.p10, k.p5);
  fmt::print(" 1.0%   KLD: {:10.6f}\n 0.1%   KLD: {:10.6f}\nMinimum KLD: {:10.6f}\n", k.p1, k.p0_1, k.min);
  const eval::Quantiles& p = s.p_diff_quantiles;
  fmt::print("\n====== Token probability statistics ======\n");
  fmt::print("Mean    Δp: {:6.3f} ± {:5.3f} %\n", 100.0 * s.p_diff.value, 100.0 * s.p_diff.error);
  const std::pair<const char*, double> rows[] = {
      {"Maximum", p.max}, {"99.9%  ", p.p99_9},  {"99.0%  ", p.p99}, {"95.0%  ", p.p95}, {"90.0%  ", p.p90},
      {"75.0%  ", p.p75}, {"Median ", p.median}, {"25.0%  ", p.p25}, {"10.0%  ", p.p10}, {" 5.0%  ", p.p5},
      {" 1.0%  ", p.p1},  {" 0.1%  ", p.p0_1},   {"Minimum", p.min}};
  for (const auto& [label, value] : rows) fmt::print("{} Δp: {:6.3f}%\n", label, 100.0 * value);
  fmt::print("RMS Δp    : {:6.3f} ± {:5.3f} %\n", 100.0 * s.rms_p_diff.value, 100.0 * s.rms_p_diff.error);
  fmt::print("Same top p: {:6.3f} ± {:5.3f} %\n", 100.0 * s.same_top.value, 100.0 * s.same_top.error);
}

}  // namespace sitsrt::cli
