// Reusable per-request sessions (KV cache + activation arena) with admission control: when the
// memory budget cannot hold one more session, a request waits, in arrival order, until another
// request hands its session back, instead of failing. A request fails with kOutOfMemory only when
// waiting could never help: no session is out, or the waiting thread itself holds one of this
// pool's sessions (a nested request from a token callback would otherwise wait on itself).
// The paged-KV scheduler of the serving core replaces this per-request granularity with blocks.
#pragma once

#include "core/check.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace sitsrt {

struct SessionPoolStats {
  std::uint64_t leases = 0;     // sessions handed out
  std::uint64_t created = 0;    // sessions allocated (the rest were reused)
  std::uint64_t queued = 0;     // leases that had to wait for memory
  double waited_seconds = 0.0;  // total time those leases waited
  std::size_t in_use = 0;
  std::size_t idle = 0;
  std::size_t peak_in_use = 0;
};

template <typename SessionT>
class SessionPool {
 public:
  // `make` allocates a session; it throws Error(kOutOfMemory) when the budget cannot hold one.
  explicit SessionPool(std::function<std::unique_ptr<SessionT>()> make) : make_(std::move(make)) {}
  SessionPool(const SessionPool&) = delete;
  SessionPool& operator=(const SessionPool&) = delete;

  class Lease {
   public:
    Lease(SessionPool& pool, std::unique_ptr<SessionT> session) : pool_(&pool), session_(std::move(session)) {
      held().push_back(pool_);
    }
    Lease(Lease&& other) noexcept : pool_(std::exchange(other.pool_, nullptr)), session_(std::move(other.session_)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (pool_ == nullptr) return;
      auto& h = held();
      h.erase(std::find(h.begin(), h.end(), pool_));
      pool_->give_back(std::move(session_));
    }
    SessionT& operator*() const noexcept { return *session_; }
    SessionT* operator->() const noexcept { return session_.get(); }

   private:
    SessionPool* pool_;
    std::unique_ptr<SessionT> session_;
  };

  // A session for one request: an idle one, a new one, or (memory being short) the next one
  // handed back, served first come first served.
  Lease acquire() {
    std::unique_lock lock(mutex_);
    const std::uint64_t ticket = next_ticket_++;
    const auto arrived = std::chrono::steady_clock::now();
    bool waited = false;
    for (;;) {
      if (ticket == serving_ticket_) {
        std::unique_ptr<SessionT> session = take_or_make(lock);
        if (session) {
          ++serving_ticket_;
          ++stats_.leases;
          if (waited) {
            ++stats_.queued;
            stats_.waited_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - arrived).count();
          }
          stats_.peak_in_use = std::max(stats_.peak_in_use, ++stats_.in_use);
          changed_.notify_all();  // the next ticket may now try
          return Lease(*this, std::move(session));
        }
        waited = true;
      }
      changed_.wait(lock);
    }
  }

  [[nodiscard]] SessionPoolStats stats() const {
    std::lock_guard lock(mutex_);
    SessionPoolStats s = stats_;
    s.idle = idle_.size();
    return s;
  }

 private:
  // Under the lock, for the ticket being served: an idle session, a new one, or null when the
  // budget is full but a session will come back. Rethrows when none can.
  std::unique_ptr<SessionT> take_or_make(std::unique_lock<std::mutex>& lock) {
    if (!idle_.empty()) {
      auto s = std::move(idle_.back());
      idle_.pop_back();
      return s;
    }
    const auto fail = [&] {
      ++serving_ticket_;  // the next request may try; this one fails
      lock.unlock();
      changed_.notify_all();
    };
    try {
      auto s = make_();
      ++stats_.created;
      return s;
    } catch (const Error& e) {
      const auto& h = held();
      const bool self_blocked = std::find(h.begin(), h.end(), this) != h.end();
      if (e.code() == ErrorCode::kOutOfMemory && stats_.in_use > 0 && !self_blocked) return nullptr;
      fail();
      throw;
    } catch (...) {
      fail();
      throw;
    }
  }

  void give_back(std::unique_ptr<SessionT> session) {
    {
      std::lock_guard lock(mutex_);
      idle_.push_back(std::move(session));
      --stats_.in_use;
    }
    changed_.notify_all();
  }

  // The pools whose sessions the current thread holds (nested requests are legal).
  static std::vector<const SessionPool*>& held() {
    thread_local std::vector<const SessionPool*> pools;
    return pools;
  }

  std::function<std::unique_ptr<SessionT>()> make_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::unique_ptr<SessionT>> idle_;
  std::uint64_t next_ticket_ = 0;
  std::uint64_t serving_ticket_ = 0;
  SessionPoolStats stats_;
};

}  // namespace sitsrt
