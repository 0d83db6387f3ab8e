// Shadow evaluation: a second engine (the same model at higher precision, or a candidate model)
// re-scores the main engine's generated tokens teacher-forced, for a sampled fraction of
// requests, on its own thread after each request ends (off the request's critical path).
#pragma once

#include <sitsrt/audit.hpp>
#include <sitsrt/engine.hpp>
#include <sitsrt/export.hpp>

#include <functional>
#include <limits>
#include <memory>
#include <vector>

namespace sitsrt {

struct ShadowEvalOptions {
  std::shared_ptr<const Engine> shadow;  // must share the main model's vocabulary
  double fraction = 1.0;                 // of requests evaluated, drawn per request
  std::uint64_t seed = 0;                // of the sampling draw
  // Divergence rule: trips when the mean top-k KL or the largest |logprob difference| exceeds
  // its limit; then `guarded` (if set) opens its circuit breaker.
  float max_mean_topk_kl = std::numeric_limits<float>::infinity();
  float max_abs_logprob_diff = std::numeric_limits<float>::infinity();
  const Engine* guarded = nullptr;  // must outlive the sink
  std::vector<std::shared_ptr<AuditSink>> report_to;  // receive on_shadow (e.g. the JSONL log)
  std::function<void(const ShadowDivergence&)> on_divergence;  // every evaluated request; worker thread
};

// An AuditSink to attach to the main engine (EngineOptions::audit_sinks or per request). The
// request's level must be tokens or higher (topk for the KL). flush() waits for queued
// evaluations; the destructor finishes them. Throws sitsrt::Error(kInvalidArgument) without a
// shadow engine or with fraction outside [0, 1].
SITSRT_API std::shared_ptr<AuditSink> make_shadow_eval_sink(ShadowEvalOptions options);

}  // namespace sitsrt
