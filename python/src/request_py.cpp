// sitsrt._sitsrt.Request: one generation running on its own C++ thread. Tokens go through a
// queue; every change (a token, the end) is signalled on an eventfd, so the Python side waits
// with its own poll()/asyncio machinery: waiting needs no GIL hand-off from this thread, stays
// interruptible by Ctrl-C, and an asyncio task costs no executor thread. Nothing here blocks
// while holding the GIL except for the short queue lock (sitsrt/_request.py wraps this).
#include "convert.hpp"

#include <sitsrt/engine.hpp>

#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <cxxabi.h>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <sys/eventfd.h>
#include <thread>
#include <unistd.h>
#include <variant>
#include <vector>

namespace py = pybind11;

namespace sitsrt::python {
namespace {

struct State {
  State() : event_fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (event_fd < 0) throw Error(ErrorCode::kIo, std::string("Request: eventfd failed: ") + std::strerror(errno));
  }
  ~State() { ::close(event_fd); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  // Wakes whoever waits on event_fd (the counter only needs to be non-zero).
  void signal() const noexcept {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(event_fd, &one, sizeof one);
  }

  std::mutex mutex;
  std::deque<TokenEvent> queue;  // produced, not yet taken by the iterator
  std::exception_ptr error;
  Result result;
  std::atomic<bool> done{false};  // set after result/error, under the mutex
  std::atomic<bool> cancelled{false};
  const int event_fd;
};

// Workers whose handle went away before their request ended (cancelled, finishing after the
// token in flight). A destructor must not wait for them: it would have to give up the GIL and
// take it back, and a thread that takes the GIL back while the interpreter finalizes is ended
// by pthread_exit, whose unwinding cannot pass a destructor (std::terminate). They are joined
// once done, by later destructors and by the atexit hook (finish()), which waits for them with
// the GIL released.
class AbandonedWorkers {
 public:
  void add(std::thread worker, std::shared_ptr<State> state) {
    std::lock_guard lock(mutex_);
    workers_.push_back({std::move(worker), std::move(state)});
  }

  // Joins those that are done (quick: past `done` a worker only returns); true when none is left.
  bool join_done() {
    std::lock_guard lock(mutex_);
    std::erase_if(workers_, [](Entry& e) {
      if (!e.state->done.load()) return false;
      e.worker.join();
      return true;
    });
    return workers_.empty();
  }

  // Waits up to `seconds` for every worker to be done (cancelled requests end after the token in
  // flight) and joins it; detaches the rest, so that no joinable thread is left when the process
  // exits. Call without the GIL: a worker may need it to finish a sink call.
  void finish(double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!join_done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::lock_guard lock(mutex_);
    for (Entry& e : workers_) e.worker.detach();
    workers_.clear();
  }

 private:
  struct Entry {
    std::thread worker;
    std::shared_ptr<State> state;
  };
  std::mutex mutex_;
  std::vector<Entry> workers_;
};

// Never destroyed: a static's destructor would run at exit with threads possibly still joinable.
AbandonedWorkers& abandoned_workers() {
  static auto* workers = new AbandonedWorkers;
  return *workers;
}

class Request {
 public:
  Request(std::shared_ptr<const Engine> engine, Prompt prompt, GenerationConfig config, int priority)
      : state_(std::make_shared<State>()) {
    // The worker owns copies of everything it touches, so the handle may go away first.
    worker_ = std::thread([engine = std::move(engine), prompt = std::move(prompt), config = std::move(config),
                           priority, state = state_]() mutable {
      std::vector<TokenEvent> events;
      TokenCallback on_token = [&](const TokenEvent& e) {
        events.push_back(e);
        {
          std::lock_guard lock(state->mutex);
          state->queue.push_back(e);
        }
        state->signal();
        return !state->cancelled.load(std::memory_order_relaxed);
      };
      GenerationResult result;
      std::exception_ptr error;
      try {
        result = run_prompt(*engine, prompt, config, on_token, priority);
      } catch (abi::__forced_unwind&) {  // thread cancellation (interpreter exit) must unwind on
        throw;
      } catch (...) {
        error = std::current_exception();
      }
      // Python objects this thread holds (sinks in the config and prompt, and the engine when
      // its Python handle is gone) are released before `done`: the atexit hook waits for done,
      // so no release takes the GIL once the interpreter finalizes (a thread taking it then is
      // ended by pthread_exit, which cannot unwind through a destructor: std::terminate).
      config = {};
      prompt = {};
      engine.reset();
      {
        std::lock_guard lock(state->mutex);
        state->result.result = std::move(result);
        state->result.events = std::move(events);
        state->result.finish_reason =
            state->cancelled && state->result.result.finish_reason == FinishReason::kCallback
                ? "cancelled" : to_string(state->result.result.finish_reason);
        state->error = std::move(error);
        state->done = true;
      }
      state->signal();
    });
  }

  ~Request() {
    state_->cancelled = true;
    if (!worker_.joinable()) return;
    // The last reference to the handle can go away on the worker itself (a Python sink that
    // keeps its own request's handle, released when the worker drops the sink): never join
    // oneself.
    if (worker_.get_id() == std::this_thread::get_id()) {
      worker_.detach();
      return;
    }
    if (state_->done.load()) {
      worker_.join();  // past `done` the worker only signals and returns: it needs no GIL
    } else {
      abandoned_workers().add(std::move(worker_), state_);
    }
    abandoned_workers().join_done();
  }
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  void cancel() { state_->cancelled = true; }
  [[nodiscard]] bool done() const { return state_->done.load(); }
  [[nodiscard]] int fileno() const { return state_->event_fd; }

  // Clears the pending signal (call before checking the state again, so no wake-up is lost).
  void drain() const {
    std::uint64_t count = 0;
    [[maybe_unused]] const ssize_t n = ::read(state_->event_fd, &count, sizeof count);
  }

  // The next token event without waiting: None when none is ready yet; StopIteration at the
  // end; the request's error when it failed.
  py::object take() {
    std::optional<TokenEvent> event;
    std::exception_ptr error;
    bool finished = false;
    {
      std::lock_guard lock(state_->mutex);
      if (!state_->queue.empty()) {
        event = std::move(state_->queue.front());
        state_->queue.pop_front();
      } else if (state_->done) {
        finished = true;
        error = state_->error;
      }
    }
    if (event) return py::cast(std::move(*event));
    if (!finished) return py::none();
    if (error) std::rethrow_exception(error);
    throw py::stop_iteration();
  }

  // The result once done (None before), or the request's error.
  py::object result_now() {
    if (!state_->done) return py::none();
    std::lock_guard lock(state_->mutex);
    if (state_->error) std::rethrow_exception(state_->error);
    return py::cast(state_->result);
  }

 private:
  std::shared_ptr<State> state_;
  std::thread worker_;
};

}  // namespace

void bind_request(py::module_& m) {
  py::class_<Request>(m, "Request")
      .def(py::init([](std::shared_ptr<Engine> engine, Prompt prompt, GenerationConfig config, int priority) {
             return std::make_unique<Request>(std::move(engine), std::move(prompt), std::move(config), priority);
           }),
           py::arg("engine"), py::arg("prompt"), py::arg("config"), py::arg("priority") = 0)
      .def("cancel", &Request::cancel)
      .def("done", &Request::done)
      .def("fileno", &Request::fileno)
      .def("drain", &Request::drain)
      .def("take", &Request::take)
      .def("result_now", &Request::result_now);
  m.def("_finish_abandoned_workers", [](double seconds) { abandoned_workers().finish(seconds); },
        py::arg("seconds"), py::call_guard<py::gil_scoped_release>(),
        "Waits (at most `seconds`) for the generation threads of dropped, cancelled requests and "
        "joins them (the atexit hook of sitsrt._request).");
}

}  // namespace sitsrt::python
