#include "runtime/scheduler.hpp"

#include "core/check.hpp"

#include <algorithm>
#include <chrono>
#include <exception>

namespace sitsrt {

using Clock = std::chrono::steady_clock;

struct Scheduler::Entry {
  ScheduledRequest request;
  std::shared_ptr<detail::RequestState> state;
  std::unique_ptr<TokenGenerator> gen;
  std::unique_ptr<PagedKvCache> kv;
  std::uint64_t arrival = 0;
  bool awaiting_answer = false;
  bool observer_keeps = true;  // the observer's answer to the event awaiting the consumer's
  bool sampled_once = false;
  bool preempted = false;
  bool counted_wait = false;  // in SchedulerStats::admission_waits
  bool running = false;       // in running_ (else waiting, or not yet taken in)
  Clock::time_point admitted;

  // Tokens not yet in the cache: the prompt (or, after a recompute preemption, the prompt and
  // the generated tokens), else the last sampled token.
  [[nodiscard]] std::span<const std::int32_t> pending() const {
    const auto h = gen->history();
    const auto in_cache = static_cast<std::size_t>(kv ? kv->size() : 0);
    return h.subspan(std::min(in_cache, h.size()));
  }
  [[nodiscard]] bool cancelled() const { return state->cancel_requested.load(); }
};

namespace {

void set_status(detail::RequestState& s, RequestStatus status) {
  {
    std::lock_guard lock(s.mutex);
    s.status = status;
  }
  s.changed.notify_all();
}

// Admission and preemption order: higher priority first, then earlier arrival.
bool runs_before(const auto& a, const auto& b) {
  if (a->request.priority != b->request.priority) return a->request.priority > b->request.priority;
  return a->arrival < b->arrival;
}

}  // namespace

Scheduler::Scheduler(const ExecutionPlan& plan, const Tokenizer& tokenizer, KvBlockPool& pool,
                     const SchedulerOptions& options)
    : plan_(plan), tokenizer_(tokenizer), pool_(pool), options_(options), runner_(plan) {
  if (options_.max_num_seqs < 1) raise(ErrorCode::kInvalidArgument, "max_num_seqs {} must be >= 1", options_.max_num_seqs);
  if (options_.max_num_batched_tokens < 1 || options_.max_num_batched_tokens > plan.memory.max_tokens) {
    raise(ErrorCode::kInvalidArgument, "max_num_batched_tokens {} must be in [1, {}] (max_batch_tokens)",
          options_.max_num_batched_tokens, plan.memory.max_tokens);
  }
  if (options_.tenant_max_kv_blocks < 0 || options_.tenant_max_seqs < 0) {
    raise(ErrorCode::kInvalidArgument, "tenant quotas must be >= 0 (0: no limit)");
  }
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_cv_.notify_all();
  thread_.join();
}

void Scheduler::wake() {
  {
    std::lock_guard lock(mutex_);
    ++wake_count_;
  }
  wake_cv_.notify_all();
}

void Scheduler::submit(ScheduledRequest request, const std::shared_ptr<detail::RequestState>& state) {
  auto entry = std::make_unique<Entry>();
  const std::int64_t prompt = static_cast<std::int64_t>(request.prompt.size());
  const std::int64_t bs = pool_.block_size();
  const std::int64_t prompt_blocks = (prompt + 1 + bs - 1) / bs;
  if (prompt_blocks > pool_.n_blocks()) {
    raise(ErrorCode::kInvalidArgument, "prompt of {} tokens needs {} KV blocks of {} but the pool holds {}", prompt,
          prompt_blocks, bs, pool_.n_blocks());
  }
  if (options_.tenant_max_kv_blocks > 0 && prompt_blocks > options_.tenant_max_kv_blocks) {
    std::lock_guard lock(mutex_);
    ++counters_.rejected;
    raise(ErrorCode::kRejected, "tenant '{}': the prompt needs {} KV blocks, over the tenant quota of {}",
          request.tenant, prompt_blocks, options_.tenant_max_kv_blocks);
  }
  entry->gen = std::make_unique<TokenGenerator>(tokenizer_, request.prompt, request.config, plan_.context_length);
  entry->request = std::move(request);
  entry->state = state;
  state->wake = [this] { wake(); };
  state->keep_events = !entry->request.on_token;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) raise(ErrorCode::kRejected, "the engine is shutting down");
    if (options_.reject_over_quota) {
      // Counted on the scheduler's last published figures: the quota's intent, not a race-free bound.
      std::int64_t same_tenant = 0;
      for (const auto& e : incoming_) same_tenant += e->request.tenant == entry->request.tenant ? 1 : 0;
      if (options_.tenant_max_seqs > 0 && same_tenant >= options_.tenant_max_seqs) {
        ++counters_.rejected;
        raise(ErrorCode::kRejected, "tenant '{}' has {} requests queued, its quota is {}", entry->request.tenant,
              same_tenant, options_.tenant_max_seqs);
      }
    }
    ++counters_.submitted;
    ++counters_.waiting;  // incoming requests count as waiting
    incoming_.push_back(std::move(entry));
    ++wake_count_;
  }
  wake_cv_.notify_all();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(mutex_);
  SchedulerStats s = counters_;
  s.kv = pool_.stats();
  return s;
}

std::int64_t Scheduler::tenant_blocks(const std::string& tenant) const {
  std::int64_t n = 0;
  for (const auto& e : running_) {
    if (e->request.tenant == tenant && e->kv) n += static_cast<std::int64_t>(e->kv->block_table().size());
  }
  return n;
}

std::int64_t Scheduler::tenant_running(const std::string& tenant) const {
  return std::count_if(running_.begin(), running_.end(), [&](const auto& e) { return e->request.tenant == tenant; });
}

void Scheduler::loop() {
  std::vector<std::unique_ptr<Entry>> fresh;
  for (;;) {
    std::uint64_t seen = 0;
    {
      std::unique_lock lock(mutex_);
      if (stopping_) break;
      fresh.swap(incoming_);
      seen = wake_count_;
    }
    const bool progressed = iterate(fresh);
    fresh.clear();
    std::unique_lock lock(mutex_);
    if (!progressed) wake_cv_.wait(lock, [&] { return stopping_ || wake_count_ != seen; });
  }
  // Shutdown: everything left ends as cancelled.
  std::vector<std::unique_ptr<Entry>> left;
  {
    std::lock_guard lock(mutex_);
    left.swap(incoming_);
  }
  for (auto* list : {&left, &waiting_, &running_}) {
    for (auto& e : *list) {
      e->gen->stop(FinishReason::kCancelled);
      finish(*e);
    }
    list->clear();
  }
}

void Scheduler::finish(Entry& entry, std::exception_ptr error) {
  if (entry.kv && !entry.kv->swapped()) {
    if (options_.prefix_caching && !error) {
      const auto h = entry.gen->history();
      entry.kv->publish_full_blocks(h.subspan(0, std::min<std::size_t>(h.size(), entry.kv->size())));
    }
  }
  entry.kv.reset();  // the blocks go back now
  detail::RequestState& s = *entry.state;
  // The outcome hooks run without any lock held (an audit sink may take its time, or a lock of
  // its own that a consumer holds while it waits on this request).
  std::optional<GenerationResult> result;
  if (!error) {
    result = entry.gen->finish();
    if (entry.request.on_end) {
      try {
        entry.request.on_end(*result);
      } catch (...) {
        error = std::current_exception();
        result.reset();
      }
    }
  } else if (entry.request.on_error) {
    try {
      entry.request.on_error(error);
    } catch (...) {  // the request's own error is the one reported
    }
  }
  {
    // Counted before the consumer can see the outcome, so a caller reading the stats after its
    // wait() returned sees its request finished.
    std::lock_guard lock(mutex_);
    ++counters_.finished;
    --(entry.running ? counters_.running : counters_.waiting);
    if (entry.preempted) --counters_.preempted;
  }
  {
    std::lock_guard lock(s.mutex);
    s.wake = nullptr;  // the handle may outlive the scheduler
    s.result = std::move(result);
    s.error = error;
    s.status = error ? RequestStatus::kFailed : RequestStatus::kFinished;
  }
  s.changed.notify_all();
}

void Scheduler::deliver(Entry& entry, const TokenEvent& event) {
  detail::RequestState& s = *entry.state;
  const bool observer_keeps = entry.request.observe ? entry.request.observe(event) : true;
  if (entry.request.on_token) {
    const bool caller_keeps = entry.request.on_token(event);
    entry.gen->advance(observer_keeps && caller_keeps);
    return;
  }
  {
    std::lock_guard lock(s.mutex);
    s.events.push_back(event);
  }
  s.changed.notify_all();
  if (s.consumer_answers) {
    entry.awaiting_answer = true;
    entry.observer_keeps = observer_keeps;
  } else {
    entry.gen->advance(observer_keeps);
  }
}

void Scheduler::preempt(Entry& entry) {
  if (options_.preemption == PreemptionPolicy::kSwap) {
    entry.kv->swap_out();
  } else {
    if (options_.prefix_caching) {
      const auto h = entry.gen->history();
      entry.kv->publish_full_blocks(h.subspan(0, std::min<std::size_t>(h.size(), entry.kv->size())));
    }
    entry.kv->truncate(0);
  }
  entry.preempted = true;
  entry.running = false;
  set_status(*entry.state, RequestStatus::kPreempted);
  std::lock_guard lock(mutex_);
  ++counters_.preemptions;
  ++counters_.preempted;
  --counters_.running;
  ++counters_.waiting;
}

Scheduler::Entry* Scheduler::pick_victim(const Entry& for_whom, const std::vector<Entry*>& in_step) const {
  // Paused requests (awaiting their consumer's answer) first: one of them may be the caller of
  // `for_whom` (a nested generate() from a token callback) and could never resume otherwise.
  // Then the lowest in run order, if it ranks below `for_whom`.
  Entry* victim = nullptr;
  for (const auto& r : running_) {
    if (r.get() == &for_whom || r->preempted || r->kv == nullptr || r->kv->swapped() ||
        r->kv->block_table().empty()) {
      continue;
    }
    if (std::find(in_step.begin(), in_step.end(), r.get()) != in_step.end()) continue;
    if (!r->awaiting_answer && !runs_before(&for_whom, r.get())) continue;
    const auto worse = [](const Entry* a, const Entry* b) {  // a gives its blocks before b
      if (a->awaiting_answer != b->awaiting_answer) return a->awaiting_answer;
      return runs_before(b, a);
    };
    if (victim == nullptr || worse(r.get(), victim)) victim = r.get();
  }
  return victim;
}

void Scheduler::admit() {
  std::stable_sort(waiting_.begin(), waiting_.end(), [](const auto& a, const auto& b) { return runs_before(a, b); });
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Entry& e = **it;
    if (static_cast<std::int64_t>(running_.size()) >= options_.max_num_seqs) break;
    const std::string& tenant = e.request.tenant;
    if (options_.tenant_max_seqs > 0 && tenant_running(tenant) >= options_.tenant_max_seqs) {
      ++it;  // over its tenant's quota: waits, without holding back other tenants
      continue;
    }
    if (!e.kv) e.kv = std::make_unique<PagedKvCache>(pool_, plan_.context_length);
    bool ok = true;
    std::int64_t needed = 0;
    if (e.kv->swapped()) {
      needed = static_cast<std::int64_t>((e.kv->swapped_bytes() + pool_.geometry().block_bytes() - 1) /
                                         pool_.geometry().block_bytes());
    } else {
      const auto h = e.gen->history();
      // Leave one token to feed: its logits are what the request needs next.
      if (options_.prefix_caching && e.kv->size() == 0 && h.size() > 1) (void)e.kv->adopt_prefix(h.subspan(0, h.size() - 1));
      needed = e.kv->blocks_needed(static_cast<std::int64_t>(h.size()) - e.kv->size());
    }
    if (options_.tenant_max_kv_blocks > 0 &&
        tenant_blocks(tenant) + static_cast<std::int64_t>(e.kv->block_table().size()) + needed >
            options_.tenant_max_kv_blocks) {
      ok = false;
      if (!e.kv->swapped()) e.kv->truncate(0);
      ++it;
      continue;
    }
    // Short of blocks: running requests of lower rank (or paused ones) give theirs back.
    while (pool_.free_blocks() < needed) {
      Entry* victim = pick_victim(e, {});
      if (victim == nullptr) break;
      preempt(*victim);
    }
    if (pool_.free_blocks() < needed) ok = false;
    if (ok && e.kv->swapped()) ok = e.kv->swap_in();
    if (!ok) {
      if (!e.kv->swapped()) e.kv->truncate(0);  // adopted blocks go back to the cache
      if (!e.counted_wait) {
        e.counted_wait = true;
        std::lock_guard lock(mutex_);
        ++counters_.admission_waits;
      }
      break;  // the first in order waits for memory; later ones must not overtake it
    }
    if (!e.preempted) e.admitted = Clock::now();
    {
      std::lock_guard lock(mutex_);
      if (e.preempted) --counters_.preempted;
      --counters_.waiting;
      ++counters_.running;
    }
    e.preempted = false;
    e.running = true;
    set_status(*e.state, RequestStatus::kRunning);
    running_.push_back(std::move(*it));
    it = waiting_.erase(it);
  }
}

bool Scheduler::iterate(std::vector<std::unique_ptr<Entry>>& fresh) {
  bool progressed = !fresh.empty();
  for (auto& e : fresh) {
    e->arrival = arrivals_++;
    waiting_.push_back(std::move(e));
  }
  // Cancellations and answers.
  for (auto* list : {&waiting_, &running_}) {
    for (auto it = list->begin(); it != list->end();) {
      Entry& e = **it;
      if (e.awaiting_answer) {
        std::optional<bool> answer;
        {
          std::lock_guard lock(e.state->mutex);
          answer = std::exchange(e.state->answer, std::nullopt);
        }
        if (answer) {
          e.awaiting_answer = false;
          e.gen->advance(*answer && e.observer_keeps);
          progressed = true;
        }
      }
      if (e.cancelled()) {
        if (!e.gen->done()) e.gen->stop(FinishReason::kCancelled);
        e.awaiting_answer = false;  // the consumer is gone or no longer answers
      }
      if (e.gen->done() && !e.awaiting_answer) {
        finish(e);
        it = list->erase(it);
        progressed = true;
      } else {
        ++it;
      }
    }
  }
  admit();

  // The step: decodes first, then prompt chunks, within the token budget.
  std::vector<Entry*> order;
  for (auto& e : running_) {
    if (!e->awaiting_answer && !e->gen->done()) order.push_back(e.get());
  }
  std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    const bool da = a->pending().size() == 1, db = b->pending().size() == 1;
    if (da != db) return da;
    return runs_before(a, b);
  });
  std::vector<Entry*> in_step;
  std::vector<SequenceWork> work;
  std::int64_t budget = options_.max_num_batched_tokens;
  for (Entry* e : order) {
    if (budget == 0) break;
    if (e->preempted) continue;  // gave its blocks to an earlier one in this loop
    const auto pending = e->pending();
    const std::int64_t n = std::min<std::int64_t>(budget, static_cast<std::int64_t>(pending.size()));
    bool placed = false;
    while (!(placed = e->kv->prepare_write(e->kv->size(), n))) {
      // Out of blocks: a request that is not in this step gives its blocks back.
      Entry* victim = pick_victim(*e, in_step);
      if (victim == nullptr) break;
      preempt(*victim);
    }
    if (!placed) {
      preempt(*e);
      continue;
    }
    const bool completes = n == static_cast<std::int64_t>(pending.size());
    // Where the request can sample from a summary of its row, the backend computes it (a GPU then
    // copies a few hundred bytes instead of the row, and the host skips its passes over it).
    const std::int64_t summary_k = completes ? e->gen->summary_k(plan_.backend->info().logit_summary_k) : 0;
    work.push_back({e->kv.get(), pending.subspan(0, static_cast<std::size_t>(n)), completes ? 1 : 0, summary_k});
    in_step.push_back(e);
    budget -= n;
  }
  // Preempted requests wait again (at their arrival rank).
  for (auto it = running_.begin(); it != running_.end();) {
    if ((*it)->preempted) {
      waiting_.push_back(std::move(*it));
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  if (work.empty()) return progressed;

  const Clock::time_point start = Clock::now();
  std::span<const float> logits;
  try {
    logits = runner_.step(work);
  } catch (...) {
    const std::exception_ptr error = std::current_exception();
    for (Entry* e : in_step) {
      e->gen->stop(FinishReason::kCancelled);
      e->kv->truncate(0);
      finish(*e, error);
    }
    std::erase_if(running_, [&](const auto& r) { return std::find(in_step.begin(), in_step.end(), r.get()) != in_step.end(); });
    return true;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  {
    std::lock_guard lock(mutex_);
    ++counters_.steps;
    for (const SequenceWork& w : work) counters_.step_tokens += w.tokens.size();
    counters_.max_step_sequences = std::max<std::int64_t>(counters_.max_step_sequences, static_cast<std::int64_t>(work.size()));
  }
  // Each sequence's token is sampled from its row on the backend's host threads (per-request
  // state only, so the same bits in any order), then delivered in order on this thread. Sampling
  // and the token statistics took ~0.4 ms a sequence over a 32k vocabulary in scalar code (16
  // sequences: 5.7-6.4 ms of one thread per step while the other waited, 2.8 ms on two); the
  // vector logit passes (cpu/logits) brought greedy decoding's share to ~0.04 ms.
  const std::size_t vocab = static_cast<std::size_t>(plan_.n_vocab);
  struct Sampled {
    Entry* entry;
    std::span<const float> logits;  // empty when sampled from its summary
    const LogitSummary* summary = nullptr;
    const TokenEvent* event = nullptr;
    std::exception_ptr error;
  };
  std::vector<Sampled> sampled;
  const std::span<const LogitSummary> summaries = runner_.summaries();
  for (std::size_t i = 0; i < work.size(); ++i) {
    if (work[i].n_outputs == 0) continue;
    Entry& e = *in_step[i];
    const std::size_t output = sampled.size();
    if (work[i].summary_k > 0) {
      sampled.push_back({&e, {}, &summaries[output]});
    } else {
      sampled.push_back({&e, logits.subspan(output * vocab, vocab)});
    }
    if (!e.sampled_once) {
      e.sampled_once = true;
      e.gen->timings().prefill_seconds = std::chrono::duration<double>(Clock::now() - e.admitted).count();
    } else {
      e.gen->timings().decode_seconds += seconds;
    }
  }
  runner_.run_host_tasks(static_cast<std::int64_t>(sampled.size()), [&](std::int64_t i) {
    Sampled& s = sampled[static_cast<std::size_t>(i)];
    try {
      s.event = s.summary != nullptr ? &s.entry->gen->sample(*s.summary, s.entry->kv->size())
                                     : &s.entry->gen->sample(s.logits, s.entry->kv->size());
    } catch (...) {
      s.error = std::current_exception();
    }
  });
  std::vector<Entry*> failed;
  for (Sampled& s : sampled) {
    Entry& e = *s.entry;
    try {
      if (s.error) std::rethrow_exception(s.error);
      deliver(e, *s.event);
    } catch (...) {
      e.gen->stop(FinishReason::kCancelled);
      finish(e, std::current_exception());
      failed.push_back(&e);
    }
  }
  std::erase_if(running_, [&](const auto& r) { return std::find(failed.begin(), failed.end(), r.get()) != failed.end(); });
  return true;
}

}  // namespace sitsrt
