#include "api/serving_core.hpp"

#include "core/check.hpp"
#include "runtime/request_state.hpp"

namespace sitsrt {
namespace {

// The scheduler keeps the request's config until the request retires, on its own thread and
// possibly after the caller has its result. Audit sinks and rules run through the caller's
// RequestAudit (hooks or the consumer), never from this copy: it holds no references to them, so
// a sink (a Python object, say) is never released on the scheduler thread.
GenerationConfig scheduled_config(const GenerationConfig& config) {
  GenerationConfig c = config;
  c.audit.sinks.clear();
  c.audit.rules.clear();
  return c;
}

}  // namespace

std::uint64_t ServingCore::pool_bytes(const KvGeometry& geometry, const ServingOptions& options) {
  const std::int64_t blocks = (options.kv_pool_tokens + geometry.block_size - 1) / geometry.block_size;
  return static_cast<std::uint64_t>(blocks) * geometry.block_bytes();
}

ServingCore::ServingCore(const ExecutionPlan& plan, const Tokenizer& tokenizer, Backend& backend,
                         const KvGeometry& geometry, const ServingOptions& options)
    : options_(options) {
  const std::int64_t blocks = (options.kv_pool_tokens + geometry.block_size - 1) / geometry.block_size;
  pool_ = std::make_unique<KvBlockPool>(backend, geometry, blocks);
  SchedulerOptions s;
  s.max_num_seqs = options.max_num_seqs;
  s.max_num_batched_tokens = options.max_num_batched_tokens;
  s.preemption = options.preempt_by_swap ? PreemptionPolicy::kSwap : PreemptionPolicy::kRecompute;
  s.prefix_caching = options.prefix_caching;
  s.tenant_max_kv_blocks = options.tenant_max_kv_blocks;
  s.tenant_max_seqs = options.tenant_max_seqs;
  s.reject_over_quota = options.reject_over_quota;
  scheduler_ = std::make_unique<Scheduler>(plan, tokenizer, *pool_, s);
}

GenerationResult ServingCore::generate(std::span<const std::int32_t> prompt, const GenerationConfig& config,
                                       const TokenCallback& on_token, const std::string& request_id) const {
  if (scheduler_->on_scheduler_thread()) {
    raise(ErrorCode::kInvalidArgument,
          "generate() called from a SubmitOptions::on_token callback (the scheduler thread would wait on itself)");
  }
  auto state = std::make_shared<detail::RequestState>();
  state->id = request_id;
  state->consumer_answers = true;
  ScheduledRequest request;
  request.prompt.assign(prompt.begin(), prompt.end());
  request.config = scheduled_config(config);
  request.tenant = config.audit.metadata.tenant;
  scheduler_->submit(std::move(request), state);
  RequestHandle handle(state);  // cancels the request if this thread leaves by an exception
  std::unique_lock lock(state->mutex);
  for (;;) {
    state->changed.wait(lock, [&] { return !state->events.empty() || state->done_locked(); });
    if (state->events.empty()) break;
    TokenEvent event = std::move(state->events.front());
    state->events.pop_front();
    lock.unlock();
    const bool keep = on_token ? on_token(event) : true;
    lock.lock();
    state->answer = keep;
    if (state->wake) state->wake();
  }
  lock.unlock();
  return handle.wait();
}

RequestHandle ServingCore::submit(std::span<const std::int32_t> prompt, const GenerationConfig& config,
                                  SubmitOptions options, RequestHooks hooks, const std::string& request_id) const {
  auto state = std::make_shared<detail::RequestState>();
  state->id = request_id;
  ScheduledRequest request;
  request.prompt.assign(prompt.begin(), prompt.end());
  request.config = scheduled_config(config);
  request.tenant = options.tenant.empty() ? config.audit.metadata.tenant : std::move(options.tenant);
  request.priority = options.priority;
  request.on_token = std::move(options.on_token);
  request.observe = std::move(hooks.observe);
  request.on_end = std::move(hooks.on_end);
  request.on_error = std::move(hooks.on_error);
  scheduler_->submit(std::move(request), state);
  return RequestHandle(state);
}

void ServingCore::fill(RequestQueueStats& out) const {
  const SchedulerStats s = scheduler_->stats();
  out.waiting = s.waiting;
  out.running = s.running;
  out.preempted = s.preempted;
  out.submitted = s.submitted;
  out.finished = s.finished;
  out.rejected = s.rejected;
  out.preemptions = s.preemptions;
  out.admission_waits = s.admission_waits;
  out.steps = s.steps;
  out.step_tokens = s.step_tokens;
  out.max_step_sequences = s.max_step_sequences;
  out.kv_blocks = s.kv.blocks;
  out.kv_blocks_free = s.kv.free_blocks;
  out.kv_blocks_cached = s.kv.cached_blocks;
  out.prefix_cache_hits = s.kv.prefix_hits;
  out.prefix_cache_misses = s.kv.prefix_misses;
  out.kv_copies = s.kv.copies;
  out.limits = options_;
  out.kv_block_bytes = static_cast<std::int64_t>(pool_->geometry().block_bytes());
}

}  // namespace sitsrt
