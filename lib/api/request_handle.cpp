#include <sitsrt/request.hpp>

#include "core/check.hpp"
#include "runtime/request_state.hpp"

namespace sitsrt {

const char* to_string(RequestStatus status) noexcept {
  switch (status) {
    case RequestStatus::kQueued: return "queued";
    case RequestStatus::kRunning: return "running";
    case RequestStatus::kPreempted: return "preempted";
    case RequestStatus::kFinished: return "finished";
    case RequestStatus::kFailed: return "failed";
  }
  return "unknown";
}

namespace {
detail::RequestState& checked(const std::shared_ptr<detail::RequestState>& s) {
  if (!s) raise(ErrorCode::kInvalidArgument, "RequestHandle: empty handle (moved from, or default-made)");
  return *s;
}
}  // namespace

RequestHandle::RequestHandle(std::shared_ptr<detail::RequestState> state) : state_(std::move(state)) {}

RequestHandle::~RequestHandle() {
  if (state_ && !detached_) cancel();
}

RequestHandle& RequestHandle::operator=(RequestHandle&& other) noexcept {
  if (this != &other) {
    if (state_ && !detached_) cancel();
    state_ = std::move(other.state_);
    detached_ = other.detached_;
  }
  return *this;
}

const std::string& RequestHandle::request_id() const { return checked(state_).id; }

RequestStatus RequestHandle::status() const {
  const detail::RequestState& s = checked(state_);
  std::lock_guard lock(s.mutex);
  return s.status;
}

bool RequestHandle::done() const {
  const detail::RequestState& s = checked(state_);
  std::lock_guard lock(s.mutex);
  return s.done_locked();
}

std::optional<TokenEvent> RequestHandle::next_event(std::chrono::milliseconds timeout) {
  detail::RequestState& s = checked(state_);
  std::unique_lock lock(s.mutex);
  const auto ready = [&] { return !s.events.empty() || s.done_locked(); };
  if (timeout == std::chrono::milliseconds::max()) {
    s.changed.wait(lock, ready);
  } else if (!s.changed.wait_for(lock, timeout, ready)) {
    return std::nullopt;
  }
  if (s.events.empty()) return std::nullopt;
  TokenEvent e = std::move(s.events.front());
  s.events.pop_front();
  return e;
}

void RequestHandle::cancel() {
  if (!state_) return;
  detail::RequestState& s = *state_;
  s.cancel_requested.store(true);
  std::lock_guard lock(s.mutex);
  if (s.wake) s.wake();
}

bool RequestHandle::wait_for(std::chrono::milliseconds timeout) const {
  const detail::RequestState& s = checked(state_);
  std::unique_lock lock(s.mutex);
  return s.changed.wait_for(lock, timeout, [&] { return s.done_locked(); });
}

GenerationResult RequestHandle::wait() {
  detail::RequestState& s = checked(state_);
  std::unique_lock lock(s.mutex);
  s.changed.wait(lock, [&] { return s.done_locked(); });
  if (s.error) std::rethrow_exception(s.error);
  if (s.result_taken || !s.result) raise(ErrorCode::kInvalidArgument, "RequestHandle::wait: the result was taken already");
  s.result_taken = true;
  return std::move(*s.result);
}

}  // namespace sitsrt
