#include "runtime/executor.hpp"

#include "core/check.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace sitsrt {

Session::Session(const ExecutionPlan& plan)
    : plan_(plan),
      arena_(plan.backend->allocate(plan.memory.arena_bytes, "activation arena")),
      kv_(*plan.backend, plan.n_layers, plan.context_length, plan.kv_width, plan.kv_type) {
  positions_.resize(static_cast<std::size_t>(plan.memory.max_tokens));
  logits_.resize(static_cast<std::size_t>(plan.n_vocab));
}

void Session::check_tokens(std::span<const std::int32_t> tokens) const {
  const auto n = static_cast<std::int64_t>(tokens.size());
  if (n == 0) raise(ErrorCode::kInvalidArgument, "forward: no tokens");
  if (kv_.size() + n > kv_.capacity()) {
    raise(ErrorCode::kInvalidArgument, "forward: {} tokens at position {} exceed the context length {}", n,
          kv_.size(), kv_.capacity());
  }
  for (std::int32_t t : tokens) {
    if (t < 0 || t >= plan_.n_vocab) {
      raise(ErrorCode::kInvalidArgument, "forward: token id {} is outside the vocabulary [0, {})", t, plan_.n_vocab);
    }
  }
}

std::span<const float> Session::forward(std::span<const std::int32_t> tokens, bool all_positions) {
  check_tokens(tokens);
  const auto n = static_cast<std::int64_t>(tokens.size());
  const std::size_t vocab = static_cast<std::size_t>(plan_.n_vocab);
  const std::size_t needed = all_positions ? static_cast<std::size_t>(n) * vocab : vocab;
  if (logits_.size() < needed) logits_.resize(needed);  // only for scoring whole sequences
  const std::int64_t chunk = plan_.memory.max_tokens;
  for (std::int64_t begin = 0; begin < n; begin += chunk) {
    const std::int64_t count = std::min(chunk, n - begin);
    const bool last = begin + count == n;
    const std::int64_t outputs = all_positions ? count : last ? 1 : 0;
    const auto rows = step(tokens.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(count)), outputs);
    float* dst = all_positions ? logits_.data() + static_cast<std::size_t>(begin) * vocab : logits_.data();
    if (!rows.empty()) std::memcpy(dst, rows.data(), rows.size_bytes());
  }
  return {logits_.data(), needed};
}

void Session::score(std::span<const std::int32_t> tokens, std::int64_t first_output, bool decode_outputs,
                    RowsCallback on_rows) {
  check_tokens(tokens);
  const auto n = static_cast<std::int64_t>(tokens.size());
  if (first_output < 0 || first_output >= n) {
    raise(ErrorCode::kInvalidArgument, "score: first scored position {} is outside the {} tokens", first_output, n);
  }
  const std::int64_t chunk = plan_.memory.max_tokens;
  std::int64_t begin = 0;
  while (begin < n) {
    std::int64_t count = std::min(chunk, n - begin);
    if (decode_outputs) count = begin < first_output ? std::min(count, first_output - begin) : 1;
    // The scored rows of a step are its last ones (the head takes the last n_outputs rows).
    const std::int64_t outputs = std::max<std::int64_t>(0, begin + count - std::max(begin, first_output));
    const auto rows = step(tokens.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(count)), outputs);
    if (outputs > 0) on_rows(begin + count - outputs, rows);
    begin += count;
  }
}

std::span<const float> Session::step(std::span<const std::int32_t> tokens, std::int64_t n_outputs) {
  const auto n = static_cast<std::int64_t>(tokens.size());
  const std::int64_t pos0 = kv_.size();
  for (std::int64_t i = 0; i < n; ++i) positions_[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(pos0 + i);
  StepContext ctx;
  ctx.n_tokens = n;
  // Intermediate chunks of a prompt still run the head on one row; its logits are dropped.
  ctx.n_outputs = std::max<std::int64_t>(n_outputs, 1);
  ctx.pos0 = pos0;
  ctx.token_ids = tokens;
  ctx.positions = {positions_.data(), static_cast<std::size_t>(n)};
  ctx.arena = arena_->data();
  ctx.plan = &plan_.memory;
  ctx.kv = &kv_;
  const graph::Graph& graph = *plan_.graph;
  {
    std::lock_guard lock(*plan_.step_mutex);
    const bool skip_head = n_outputs == 0;
    StepProfile* profile = plan_.profile;
    using Clock = std::chrono::steady_clock;
    const auto step_start = profile ? Clock::now() : Clock::time_point{};
    for (std::size_t i = 0; i < graph.nodes().size(); ++i) {
      // Without requested outputs the head (the nodes producing output rows) has nothing to compute.
      if (skip_head && graph.values()[static_cast<std::size_t>(graph.nodes()[i].output)].rows == graph::RowSpace::kOutputs) {
        continue;
      }
      if (profile == nullptr) {
        plan_.backend->run(graph, i, ctx);
        continue;
      }
      const auto start = Clock::now();
      plan_.backend->run(graph, i, ctx);
      plan_.backend->synchronize();
      profile->add_node(i, n == 1, std::chrono::duration<double>(Clock::now() - start).count());
    }
    plan_.backend->synchronize();
    if (profile) profile->add_step(n == 1, n, std::chrono::duration<double>(Clock::now() - step_start).count());
  }
  kv_.set_size(pos0 + n);
  if (n_outputs == 0) return {};
  // The arena is this session's: the rows stay put until its next step.
  const auto* rows =
      reinterpret_cast<const float*>(ctx.arena + plan_.memory.offsets[static_cast<std::size_t>(graph.output())]);
  return {rows, static_cast<std::size_t>(n_outputs * plan_.n_vocab)};
}

}  // namespace sitsrt
