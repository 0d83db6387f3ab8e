// The serving scheduler: one thread that runs every admitted request in shared batched steps
// (iteration-level, "continuous" batching). Each iteration it
//   1. ends cancelled requests and applies consumers' answers,
//   2. admits waiting requests by priority then arrival, while sequence slots, free KV blocks
//      and the tenant's quotas allow (a request over its tenant's quota waits without holding
//      back other tenants; one that could never fit is refused at submit),
//   3. builds a step of at most max_num_batched_tokens tokens: one token for each decoding
//      request first (so running streams keep their inter-token latency), then prompt chunks
//      (chunked prefill) in the remaining budget,
//   4. gives each sequence its KV blocks, preempting the lowest-priority, latest-arrived running
//      request when the pool runs dry (recompute: its blocks are dropped, published to the
//      prefix cache first, and its prompt + generated tokens are fed again on resumption; swap:
//      its blocks are copied to host memory and back),
//   5. runs the step (StepRunner) and hands each sequence's logits to its TokenGenerator.
// Requests finishing publish their full blocks to the prefix cache (kv_block_pool.hpp).
#pragma once

#include "backend/kv_block_pool.hpp"
#include "backend/paged_kv_cache.hpp"
#include "runtime/executor.hpp"
#include "runtime/generator.hpp"
#include "runtime/request_state.hpp"
#include "tokenizer/tokenizer.hpp"

#include <sitsrt/generation.hpp>

#include <condition_variable>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace sitsrt {

enum class PreemptionPolicy { kRecompute, kSwap };

struct SchedulerOptions {
  std::int64_t max_num_seqs = 16;
  std::int64_t max_num_batched_tokens = 256;  // <= the plan's max_tokens
  PreemptionPolicy preemption = PreemptionPolicy::kRecompute;
  bool prefix_caching = true;
  std::int64_t tenant_max_kv_blocks = 0;  // 0: no limit
  std::int64_t tenant_max_seqs = 0;       // 0: no limit
  bool reject_over_quota = false;         // true: a request that would wait for its tenant's quota fails at once
};

struct SchedulerStats {
  std::int64_t waiting = 0;
  std::int64_t running = 0;
  std::int64_t preempted = 0;        // waiting now after a preemption
  std::uint64_t submitted = 0;
  std::uint64_t finished = 0;
  std::uint64_t rejected = 0;
  std::uint64_t preemptions = 0;
  std::uint64_t admission_waits = 0;  // requests that waited for KV blocks before admission
  std::uint64_t steps = 0;
  std::uint64_t step_tokens = 0;     // token rows over all steps
  std::int64_t max_step_sequences = 0;
  KvPoolStats kv;
};

// What the scheduler needs of a request besides its state.
struct ScheduledRequest {
  std::vector<std::int32_t> prompt;
  GenerationConfig config;  // validated; seed resolved or not
  std::string tenant;
  int priority = 0;
  TokenCallback on_token;   // on the scheduler thread; empty: events kept or answered
  // On the scheduler thread too: each event before it is delivered (false stops the request
  // after this token, as a callback's false does), and the outcome (audit records).
  TokenCallback observe;
  std::function<void(GenerationResult&)> on_end;
  std::function<void(const std::exception_ptr&)> on_error;
};

class Scheduler {
 public:
  Scheduler(const ExecutionPlan& plan, const Tokenizer& tokenizer, KvBlockPool& pool, const SchedulerOptions& options);
  ~Scheduler();  // cancels what is left and joins the thread
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request; `state` is shared with its handle (id, consumer mode set by the caller).
  // Throws kInvalidArgument for a prompt that does not fit, kRejected when its tenant's quota
  // could never hold it or reject_over_quota applies; nothing is queued then.
  void submit(ScheduledRequest request, const std::shared_ptr<detail::RequestState>& state);
  [[nodiscard]] SchedulerStats stats() const;
  [[nodiscard]] const SchedulerOptions& options() const noexcept { return options_; }
  [[nodiscard]] bool on_scheduler_thread() const noexcept { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  struct Entry;
  void loop();
  void wake();
  bool iterate(std::vector<std::unique_ptr<Entry>>& fresh);  // false: nothing could progress
  void admit();
  // The running request to give its blocks to `for_whom`, or null (scheduler thread).
  [[nodiscard]] Entry* pick_victim(const Entry& for_whom, const std::vector<Entry*>& in_step) const;
  void preempt(Entry& entry);
  void finish(Entry& entry, std::exception_ptr error = nullptr);
  void deliver(Entry& entry, const TokenEvent& event);
  [[nodiscard]] std::int64_t tenant_blocks(const std::string& tenant) const;
  [[nodiscard]] std::int64_t tenant_running(const std::string& tenant) const;

  const ExecutionPlan& plan_;
  const Tokenizer& tokenizer_;
  KvBlockPool& pool_;
  SchedulerOptions options_;
  StepRunner runner_;

  mutable std::mutex mutex_;  // incoming_, wake_count_, stopping_, counters_
  std::condition_variable wake_cv_;
  std::vector<std::unique_ptr<Entry>> incoming_;
  std::uint64_t wake_count_ = 0;
  bool stopping_ = false;
  SchedulerStats counters_;

  // Scheduler thread only.
  std::vector<std::unique_ptr<Entry>> waiting_;
  std::vector<std::unique_ptr<Entry>> running_;
  std::uint64_t arrivals_ = 0;
  std::thread thread_;
};

}  // namespace sitsrt
