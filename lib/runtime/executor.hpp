// Runs the graph: a StepRunner runs batched steps (several sequences' tokens in one pass over
// the weights, each sequence attending over its own KV cache) through Backend::compute and
// reads the logits back through the backend; a Session is one request's cache plus a runner,
// splitting long prompts into steps of at most plan.max_tokens tokens.
#pragma once

#include "backend/backend.hpp"
#include "backend/kv_cache.hpp"
#include "core/function_ref.hpp"
#include "core/logit_summary.hpp"
#include "graph/graph.hpp"
#include "graph/memory_plan.hpp"
#include "runtime/step_profile.hpp"

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace sitsrt {

// Shared, immutable description of how to run a graph on a backend.
struct ExecutionPlan {
  const graph::Graph* graph = nullptr;
  graph::MemoryPlan memory;
  Backend* backend = nullptr;
  std::int64_t n_layers = 0;
  std::int64_t kv_width = 0;
  KvCacheLayout kv_layout;  // of each Session's cache (logits, evaluate)
  std::int64_t context_length = 0;
  std::int64_t n_vocab = 0;
  std::mutex* step_mutex = nullptr;  // one step at a time on the backend (kernels share scratch)
  StepProfile* profile = nullptr;    // when set, every node and step is timed (under step_mutex)
};

// One sequence's part of a batched step: `tokens` go at positions kv->size() .. of its cache,
// and the logits of its last n_outputs tokens (0 .. tokens.size()) are wanted: as rows, or with
// summary_k > 0 (at most the backend's BackendInfo::logit_summary_k) as summaries with that many
// best ids, computed by the backend (core/logit_summary.hpp).
struct SequenceWork {
  KvCache* kv = nullptr;
  std::span<const std::int32_t> tokens;
  std::int64_t n_outputs = 0;
  std::int64_t summary_k = 0;
};

// Runs batched steps on one activation arena of its own. Not thread-safe (one runner per
// thread that steps); steps of all runners of a plan are serialised by plan.step_mutex.
class StepRunner {
 public:
  explicit StepRunner(const ExecutionPlan& plan);

  // Runs one step over `work` (at most plan.memory.max_tokens tokens and max_outputs outputs in
  // all; every token id inside the vocabulary; each cache prepared for its rows by
  // KvCache::prepare_write). Returns the wanted logits rows, [sum of n_outputs x n_vocab] in
  // the order of `work`, valid until the next step; advances each cache by its tokens. When all
  // of them are wanted as summaries, no row is read and the view is empty.
  std::span<const float> step(std::span<const SequenceWork> work);
  // After step(): one per output row in the same order, filled for the work asking summaries.
  [[nodiscard]] std::span<const LogitSummary> summaries() const noexcept { return summaries_; }
  // The backend's host threads for work between steps (Backend::run_host_tasks).
  void run_host_tasks(std::int64_t n, FunctionRef<void(std::int64_t)> task) { plan_.backend->run_host_tasks(n, task); }

 private:
  const ExecutionPlan& plan_;
  std::size_t head_begin_;  // first node of the head (the nodes computing output rows)
  std::unique_ptr<BackendBuffer> arena_;
  std::vector<std::int32_t> token_ids_;
  std::vector<std::int32_t> positions_;
  std::vector<std::int32_t> output_rows_;
  std::vector<StepSequence> sequences_;
  std::vector<float> staging_;
  std::vector<std::int64_t> summary_rows_;  // output rows wanted as summaries
  std::int64_t summary_k_ = 0;              // the most best ids they ask
  std::vector<LogitSummary> summaries_;     // per output row (their `best` vectors reused)
};

class Session {
 public:
  explicit Session(const ExecutionPlan& plan);

  // Feeds `tokens` at the next positions. Returns the logits after the last token, or after
  // every token when all_positions (then [tokens.size() x n_vocab]). The view stays valid
  // until the next call. Throws kInvalidArgument when the context would overflow.
  std::span<const float> forward(std::span<const std::int32_t> tokens, bool all_positions = false);

  // Feeds `tokens` at the next positions and hands over the logits after each token i >=
  // first_output as the steps produce them: on_rows(i0, rows) with rows = [k x n_vocab] for
  // tokens i0 .. i0 + k - 1, a view into the activation arena valid only during the call (no
  // [tokens x n_vocab] buffer exists). Steps as forward(): prompt steps of up to max_tokens from
  // the first token (first_output 0 gives forward(tokens, true)'s rows bit for bit), outputs
  // computed only for the scored rows; decode_outputs instead runs the rows before first_output
  // in prompt steps and every scored token as its own one-token (decode) step.
  using RowsCallback = FunctionRef<void(std::int64_t first, std::span<const float> rows)>;
  void score(std::span<const std::int32_t> tokens, std::int64_t first_output, bool decode_outputs,
             RowsCallback on_rows);

  [[nodiscard]] std::int64_t position() const noexcept { return kv_->size(); }
  [[nodiscard]] std::int64_t capacity() const noexcept { return kv_->capacity(); }
  void reset() noexcept { kv_->set_size(0); }

 private:
  void check_tokens(std::span<const std::int32_t> tokens) const;
  // Runs one step; returns the n_outputs logits rows, read through the backend: the arena in
  // place when it is host memory, else a copy in staging_ (empty for 0).
  std::span<const float> step(std::span<const std::int32_t> tokens, std::int64_t n_outputs);

  const ExecutionPlan& plan_;
  StepRunner runner_;
  std::unique_ptr<KvCache> kv_;
  std::vector<float> logits_;
};

}  // namespace sitsrt
