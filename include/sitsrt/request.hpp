// Asynchronous requests: Engine::submit() queues a request with the engine's scheduler, which
// runs every admitted request in shared batched steps (continuous batching), and returns a
// RequestHandle to follow it: poll its token events, wait for the result, or cancel it.
#pragma once

#include <sitsrt/export.hpp>
#include <sitsrt/generation.hpp>
#include <sitsrt/token_event.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace sitsrt {

enum class RequestStatus {
  kQueued,     // waiting for admission (sequence slots, KV blocks, its tenant's quota)
  kRunning,    // admitted: its tokens are in the scheduler's steps
  kPreempted,  // its KV blocks were taken back (recomputed or swapped in when it resumes)
  kFinished,   // result ready (any finish reason, cancellation included)
  kFailed,     // ended with an error (wait() rethrows it)
};
SITSRT_API const char* to_string(RequestStatus status) noexcept;

struct SubmitOptions {
  // Quotas (ServingOptions::tenant_*) are per tenant id; "" is a tenant like any other. Empty
  // here: the config's audit.metadata.tenant (generate() and chat() always use that one).
  std::string tenant;
  // Higher first, for admission and against preemption; equal priorities run in arrival order.
  int priority = 0;
  // Optional: runs on the engine's scheduler thread for each token, in order; return false to
  // stop the request. Keep it short, it delays the batch. Without it, poll with next_event().
  TokenCallback on_token;
};

namespace detail {
struct RequestState;
}

class SITSRT_API RequestHandle {
 public:
  RequestHandle() = default;
  explicit RequestHandle(std::shared_ptr<detail::RequestState> state);
  // Dropping a handle whose request is still running cancels it (its KV blocks are freed at
  // once); call detach() first to let it run on.
  ~RequestHandle();
  RequestHandle(RequestHandle&&) noexcept = default;
  RequestHandle& operator=(RequestHandle&&) noexcept;
  RequestHandle(const RequestHandle&) = delete;
  RequestHandle& operator=(const RequestHandle&) = delete;

  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }
  [[nodiscard]] const std::string& request_id() const;
  [[nodiscard]] RequestStatus status() const;
  [[nodiscard]] bool done() const;  // kFinished or kFailed
  // The next token event in order, waiting up to `timeout`; nothing when none came in time or
  // when the request is done and every event was taken. Events are kept for next_event() only
  // when SubmitOptions::on_token is empty.
  std::optional<TokenEvent> next_event(std::chrono::milliseconds timeout = std::chrono::milliseconds::max());
  // Asks the scheduler to stop the request (finish reason kCancelled); returns at once.
  void cancel();
  // Waits for the end: the result, or the request's error rethrown. Call once.
  GenerationResult wait();
  // Waits up to `timeout` for the end; true when done.
  bool wait_for(std::chrono::milliseconds timeout) const;
  void detach() noexcept { detached_ = true; }

 private:
  std::shared_ptr<detail::RequestState> state_;
  bool detached_ = false;
};

}  // namespace sitsrt
