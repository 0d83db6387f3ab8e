#include "runtime/executor.hpp"

#include "core/check.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace sitsrt {

namespace {

// The head (the nodes whose outputs have kOutputs rows: the last row taken, the final norm, the
// output matmul) must be the graph's last nodes, so that a step without outputs is one range.
std::size_t head_begin(const graph::Graph& graph) {
  const auto is_head = [&](const graph::Node& node) {
    return graph.values()[static_cast<std::size_t>(node.output)].rows == graph::RowSpace::kOutputs;
  };
  const auto& nodes = graph.nodes();
  std::size_t first = nodes.size();
  while (first > 0 && is_head(nodes[first - 1])) --first;
  for (std::size_t i = 0; i < first; ++i) {
    if (is_head(nodes[i])) raise(ErrorCode::kInternal, "graph: node {} computes output rows before the head", i);
  }
  return first;
}

}  // namespace

StepRunner::StepRunner(const ExecutionPlan& plan)
    : plan_(plan),
      head_begin_(head_begin(*plan.graph)),
      arena_(plan.backend->allocate(plan.memory.arena_bytes, "activation arena")) {
  const auto rows = static_cast<std::size_t>(plan.memory.max_tokens);
  token_ids_.reserve(rows);
  positions_.reserve(rows);
  output_rows_.reserve(rows);
}

std::span<const float> StepRunner::step(std::span<const SequenceWork> work) {
  token_ids_.clear();
  positions_.clear();
  output_rows_.clear();
  sequences_.clear();
  summary_rows_.clear();
  summary_k_ = 0;
  for (const SequenceWork& w : work) {
    const auto n = static_cast<std::int64_t>(w.tokens.size());
    if (w.kv == nullptr || n == 0 || w.n_outputs < 0 || w.n_outputs > n) {
      raise(ErrorCode::kInternal, "step: a sequence of {} tokens with {} outputs", n, w.n_outputs);
    }
    const std::int64_t pos0 = w.kv->size();
    if (pos0 + n > w.kv->capacity()) {
      raise(ErrorCode::kInternal, "step: {} tokens at position {} exceed the sequence's capacity {}", n, pos0,
            w.kv->capacity());
    }
    const auto row_begin = static_cast<std::int64_t>(token_ids_.size());
    sequences_.push_back({row_begin, n, pos0, w.kv});
    token_ids_.insert(token_ids_.end(), w.tokens.begin(), w.tokens.end());
    for (std::int64_t i = 0; i < n; ++i) positions_.push_back(static_cast<std::int32_t>(pos0 + i));
    if (w.summary_k > 0 && w.n_outputs > 0) {
      if (w.summary_k > plan_.backend->info().logit_summary_k) {
        raise(ErrorCode::kInternal, "step: summaries with {} best ids asked of a backend that gives {}", w.summary_k,
              plan_.backend->info().logit_summary_k);
      }
      summary_k_ = std::max(summary_k_, w.summary_k);
      for (std::int64_t i = 0; i < w.n_outputs; ++i) {
        summary_rows_.push_back(static_cast<std::int64_t>(output_rows_.size()) + i);
      }
    }
    for (std::int64_t i = n - w.n_outputs; i < n; ++i) output_rows_.push_back(static_cast<std::int32_t>(row_begin + i));
  }
  const auto n = static_cast<std::int64_t>(token_ids_.size());
  const auto n_outputs = static_cast<std::int64_t>(output_rows_.size());
  if (n == 0 || n > plan_.memory.max_tokens || n_outputs > plan_.memory.max_outputs) {
    raise(ErrorCode::kInternal, "step: {} tokens / {} outputs for an arena of {} / {}", n, n_outputs,
          plan_.memory.max_tokens, plan_.memory.max_outputs);
  }
  StepContext ctx;
  ctx.n_tokens = n;
  ctx.n_outputs = n_outputs;
  ctx.token_ids = token_ids_;
  ctx.positions = positions_;
  ctx.sequences = sequences_;
  ctx.output_rows = output_rows_;
  ctx.arena = arena_.get();
  ctx.plan = &plan_.memory;
  const graph::Graph& graph = *plan_.graph;
  Backend& backend = *plan_.backend;
  // Without requested outputs the head has nothing to compute.
  const std::size_t last = n_outputs == 0 ? head_begin_ : graph.nodes().size();
  std::span<const float> rows;
  {
    std::lock_guard lock(*plan_.step_mutex);
    StepProfile* profile = plan_.profile;
    using Clock = std::chrono::steady_clock;
    if (profile == nullptr) {
      backend.compute(graph, 0, last, ctx);
    } else {
      // A decode step: every sequence in it feeds one token (one row alone, or a decode batch).
      const bool decode = n == static_cast<std::int64_t>(sequences_.size());
      const auto step_start = Clock::now();
      for (std::size_t i = 0; i < last; ++i) {
        const auto start = Clock::now();
        backend.compute(graph, i, i + 1, ctx);
        backend.synchronize();
        profile->add_node(i, decode, std::chrono::duration<double>(Clock::now() - start).count());
      }
      profile->add_step(decode, n, std::chrono::duration<double>(Clock::now() - step_start).count());
    }
    const std::size_t offset = plan_.memory.offsets[static_cast<std::size_t>(graph.output())];
    if (!summary_rows_.empty()) {
      if (summaries_.size() < static_cast<std::size_t>(n_outputs))
        summaries_.resize(static_cast<std::size_t>(n_outputs));
      backend.summarize_logits(*arena_, offset, n_outputs, plan_.n_vocab, summary_rows_, summary_k_,
                               std::span(summaries_).first(static_cast<std::size_t>(n_outputs)));
    }
    if (n_outputs > static_cast<std::int64_t>(summary_rows_.size())) {
      const std::size_t count = static_cast<std::size_t>(n_outputs * plan_.n_vocab);
      const std::span<const std::byte> in_place = backend.host_view(*arena_, offset, count * sizeof(float));
      if (!in_place.empty()) {
        // The arena is this runner's: the rows stay put until its next step.
        rows = {reinterpret_cast<const float*>(in_place.data()), count};
      } else {
        staging_.resize(count);
        backend.read(*arena_, offset, std::as_writable_bytes(std::span(staging_)));
        rows = staging_;
      }
    }
    backend.synchronize();
  }
  for (const StepSequence& s : sequences_) s.kv->set_size(s.pos0 + s.n_rows);
  return rows;
}

Session::Session(const ExecutionPlan& plan)
    : plan_(plan),
      runner_(plan),
      kv_(std::make_unique<ContiguousKvCache>(*plan.backend, plan.n_layers, plan.context_length, plan.kv_layout)) {
  logits_.resize(static_cast<std::size_t>(plan.n_vocab));
}

void Session::check_tokens(std::span<const std::int32_t> tokens) const {
  const auto n = static_cast<std::int64_t>(tokens.size());
  if (n == 0) raise(ErrorCode::kInvalidArgument, "forward: no tokens");
  if (kv_->size() + n > kv_->capacity()) {
    raise(ErrorCode::kInvalidArgument, "forward: {} tokens at position {} exceed the context length {}", n,
          kv_->size(), kv_->capacity());
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
  const SequenceWork work{kv_.get(), tokens, n_outputs};
  return runner_.step({&work, 1});
}

}  // namespace sitsrt
