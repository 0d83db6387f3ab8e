// Conversions shared by the bound classes: records to Python objects, the per-call result type.
#pragma once

#include <sitsrt/audit.hpp>
#include <sitsrt/error.hpp>
#include <sitsrt/chat.hpp>
#include <sitsrt/engine.hpp>
#include <sitsrt/generation.hpp>
#include <sitsrt/token_event.hpp>

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace sitsrt::python {

// What generate()/submit() return: the C++ result plus every token event, in order.
struct Result {
  GenerationResult result;
  std::vector<TokenEvent> events;
  std::string finish_reason;  // to_string(FinishReason), "cancelled" when cancel() stopped it
};

// A chat conversation to render and generate from (Engine::chat), built by the Python layer.
struct ChatPrompt {
  std::vector<ChatMessage> messages;
  ChatTemplateOptions options;
};

// What a request runs on: prompt text, prompt token ids, or a chat.
using Prompt = std::variant<std::string, std::vector<std::int32_t>, ChatPrompt>;

// Runs `prompt` on `engine` through the scheduler (submit, submit_tokens or submit_chat) at
// `priority` and waits for it; on_token runs on the scheduler thread (keep it short).
GenerationResult run_prompt(const Engine& engine, const Prompt& prompt, const GenerationConfig& config,
                            const TokenCallback& on_token, int priority = 0);

void bind_types(pybind11::module_& m);  // TokenEvent, Timings, Result, GenerationConfig (engine_py.cpp)
void bind_engine(pybind11::module_& m);
void bind_request(pybind11::module_& m);
void bind_audit(pybind11::module_& m);

// A Python audit sink spec -> a C++ sink: str/os.PathLike -> JSONL log (key: HMAC key, may be
// empty); an object with on_request_begin/on_token/on_request_end -> an adapter that calls it
// with the GIL held. Needs the GIL.
std::shared_ptr<AuditSink> make_sink(pybind11::handle spec, const std::string& key, bool append);

// True while the interpreter shuts down: threads of ours must not take the GIL then.
inline bool interpreter_finalizing() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsInitialized() || Py_IsFinalizing();
#else
  return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

// An exception a Python audit sink raised, carried through the engine as sitsrt::Error
// (kRejected, the AuditSink contract) with the Python exception object, so that the caller sees
// KeyboardInterrupt / SystemExit as they are and anything else as RejectedError whose
// __cause__ is the original (errors.cpp). The object is released with the GIL held, or leaked
// when the interpreter is already gone.
class PythonSinkError : public Error {
 public:
  PythonSinkError(const std::string& message, pybind11::object exception)
      : Error(ErrorCode::kRejected, message),
        exception_(new pybind11::object(std::move(exception)), [](pybind11::object* o) {
          if (!interpreter_finalizing()) {
            pybind11::gil_scoped_acquire acquire;
            delete o;
          } else {
            o->release();
            delete o;
          }
        }) {}
  [[nodiscard]] const pybind11::object& exception() const noexcept { return *exception_; }

 private:
  std::shared_ptr<pybind11::object> exception_;
};

// UTF-8 bytes -> str; invalid sequences (a token may end mid-character) become U+FFFD.
inline pybind11::str utf8(const std::string& bytes) {
  PyObject* s = PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "replace");
  if (s == nullptr) throw pybind11::error_already_set();
  return pybind11::reinterpret_steal<pybind11::str>(s);
}

pybind11::dict to_dict(const RequestRecord& record);
pybind11::dict to_dict(const RequestSummary& summary);
pybind11::dict to_dict(const AnomalyEvent& event);

}  // namespace sitsrt::python
