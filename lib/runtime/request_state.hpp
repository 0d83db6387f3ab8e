// What a RequestHandle and the scheduler share about one request: status, the token events not
// yet taken, the consumer's answers, the cancel flag and the outcome. Guarded by its own mutex;
// the scheduler is woken through `wake` when a handle changes something it must act on.
#pragma once

#include <sitsrt/generation.hpp>
#include <sitsrt/request.hpp>
#include <sitsrt/token_event.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

namespace sitsrt::detail {

struct RequestState {
  std::string id;
  mutable std::mutex mutex;
  mutable std::condition_variable changed;  // status, events, outcome
  RequestStatus status = RequestStatus::kQueued;
  std::deque<TokenEvent> events;  // kept for next_event() (and for an answering consumer)
  bool keep_events = true;
  // generate(): the consumer (the calling thread) answers each event; the request takes no
  // step until the answer is in, so a callback returning false stops it before the next token.
  bool consumer_answers = false;
  std::optional<bool> answer;
  std::atomic<bool> cancel_requested{false};
  std::optional<GenerationResult> result;
  std::exception_ptr error;
  bool result_taken = false;
  std::function<void()> wake;  // set by the scheduler before the state is shared

  [[nodiscard]] bool done_locked() const noexcept {
    return status == RequestStatus::kFinished || status == RequestStatus::kFailed;
  }
};

}  // namespace sitsrt::detail
