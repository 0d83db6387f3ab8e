// sitsrt._sitsrt.Request: one generation running on its own C++ thread. Tokens go through a
// queue to whichever Python thread iterates the handle; result() waits for the end. Waiting
// releases the GIL, so any number of Python threads can submit and wait concurrently (the
// engine serialises model steps; see docs/architecture.md).
#include "convert.hpp"

#include <sitsrt/engine.hpp>

#include <pybind11/stl.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <variant>

namespace py = pybind11;

namespace sitsrt::python {
namespace {

struct State {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<TokenEvent> queue;  // produced, not yet taken by the iterator
  bool done = false;
  std::exception_ptr error;
  Result result;
  std::atomic<bool> cancelled{false};
};

class Request {
 public:
  Request(std::shared_ptr<const Engine> engine, Prompt prompt, GenerationConfig config)
      : state_(std::make_shared<State>()) {
    // The worker owns copies of everything it touches, so the handle may go away first.
    worker_ = std::thread([engine = std::move(engine), prompt = std::move(prompt), config = std::move(config),
                           state = state_]() {
      std::vector<TokenEvent> events;
      TokenCallback on_token = [&](const TokenEvent& e) {
        events.push_back(e);
        {
          std::lock_guard lock(state->mutex);
          state->queue.push_back(e);
        }
        state->changed.notify_all();
        return !state->cancelled.load(std::memory_order_relaxed);
      };
      GenerationResult result;
      std::exception_ptr error;
      try {
        result = run_prompt(*engine, prompt, config, on_token);
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard lock(state->mutex);
        state->result.result = std::move(result);
        state->result.events = std::move(events);
        state->result.finish_reason =
            state->cancelled && state->result.result.finish_reason == FinishReason::kCallback
                ? "cancelled" : to_string(state->result.result.finish_reason);
        state->error = error;
        state->done = true;
      }
      state->changed.notify_all();
    });
  }

  ~Request() {
    state_->cancelled = true;
    if (!worker_.joinable()) return;
    // The worker may need the GIL (a Python audit sink) to finish.
    if (PyGILState_Check()) {
      py::gil_scoped_release release;
      worker_.join();
    } else {
      worker_.join();
    }
  }
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  void cancel() { state_->cancelled = true; }
  bool done() {
    std::lock_guard lock(state_->mutex);
    return state_->done;
  }

  // Next token event; throws StopIteration at the end (or the request's error).
  TokenEvent next() {
    std::unique_lock lock(state_->mutex, std::defer_lock);
    {
      py::gil_scoped_release release;
      lock.lock();
      state_->changed.wait(lock, [&] { return !state_->queue.empty() || state_->done; });
    }
    if (!state_->queue.empty()) {
      TokenEvent e = std::move(state_->queue.front());
      state_->queue.pop_front();
      return e;
    }
    if (state_->error) {
      auto error = state_->error;
      lock.unlock();
      std::rethrow_exception(error);
    }
    throw py::stop_iteration();
  }

  Result result(std::optional<double> timeout) {
    std::unique_lock lock(state_->mutex, std::defer_lock);
    bool finished = false;
    {
      py::gil_scoped_release release;
      lock.lock();
      auto ready = [&] { return state_->done; };
      if (timeout) {
        finished = state_->changed.wait_for(lock, std::chrono::duration<double>(*timeout), ready);
      } else {
        state_->changed.wait(lock, ready);
        finished = true;
      }
    }
    if (!finished) {
      PyErr_SetString(PyExc_TimeoutError, "sitsrt: the request did not finish within the timeout");
      throw py::error_already_set();
    }
    if (state_->error) std::rethrow_exception(state_->error);
    return state_->result;
  }

 private:
  std::shared_ptr<State> state_;
  std::thread worker_;
};

}  // namespace

void bind_request(py::module_& m) {
  py::class_<Request>(m, "Request")
      .def(py::init([](std::shared_ptr<Engine> engine, Prompt prompt, GenerationConfig config) {
        return std::make_unique<Request>(std::move(engine), std::move(prompt), std::move(config));
      }))
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &Request::next)
      .def("cancel", &Request::cancel)
      .def("done", &Request::done)
      .def("result", &Request::result, py::arg("timeout") = py::none());
}

}  // namespace sitsrt::python
