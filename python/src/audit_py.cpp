// Audit from Python: sinks given as a path (the JSONL hash-chained log) or as any object with
// on_request_begin / on_token / on_request_end (optionally on_anomaly); log verify and replay.
#include "convert.hpp"

#include <sitsrt/audit_log.hpp>
#include <sitsrt/error.hpp>

#include <pybind11/stl.h>

namespace py = pybind11;

namespace sitsrt::python {
namespace {

// Calls the Python object with the GIL held. An exception raised by the object fails the
// request (the AuditSink contract): it becomes sitsrt::Error(kRejected) naming the method and
// the Python error, and generate() raises sitsrt.RejectedError.
class PythonSink final : public AuditSink {
 public:
  explicit PythonSink(py::object target) : target_(std::move(target)) {
    has_anomaly_ = py::hasattr(target_, "on_anomaly");
  }
  ~PythonSink() override {
    if (interpreter_finalizing()) {  // interpreter exiting or gone: leak the reference
      target_.release();
      return;
    }
    py::gil_scoped_acquire acquire;
    target_ = py::object();
  }

  void on_request_begin(const RequestRecord& record) override {
    call("on_request_begin", [&] { return py::make_tuple(to_dict(record)); });
  }
  void on_token(const std::string& request_id, const TokenEvent& event) override {
    call("on_token", [&] { return py::make_tuple(request_id, py::cast(event)); });
  }
  void on_anomaly(const AnomalyEvent& event) override {
    if (has_anomaly_) call("on_anomaly", [&] { return py::make_tuple(to_dict(event)); });
  }
  void on_request_end(const RequestSummary& summary) override {
    call("on_request_end", [&] { return py::make_tuple(to_dict(summary)); });
  }

 private:
  template <class MakeArgs>
  void call(const char* method, MakeArgs make_args) {
    if (interpreter_finalizing()) {
      throw Error(ErrorCode::kRejected, std::string("audit sink ") + method + ": the Python interpreter is exiting");
    }
    py::gil_scoped_acquire acquire;
    try {
      target_.attr(method)(*make_args());
    } catch (py::error_already_set& e) {
      // Type and message only: a traceback would put the caller's file paths into audit logs.
      const std::string type = py::str(e.type().attr("__name__"));
      const std::string text = py::str(e.value());
      throw PythonSinkError(std::string("audit sink ") + method + " raised " + type + (text.empty() ? "" : ": " + text),
                            e.value());
    }
  }

  py::object target_;
  bool has_anomaly_ = false;
};

}  // namespace

std::shared_ptr<AuditSink> make_sink(py::handle spec, const std::string& key, bool append) {
  const py::module_ os = py::module_::import("os");
  if (py::isinstance<py::str>(spec) || py::isinstance(spec, os.attr("PathLike"))) {
    JsonlAuditLogOptions options;
    options.path = os.attr("fspath")(spec).cast<std::string>();
    options.hmac_key = key;
    options.append = append;
    return make_jsonl_audit_sink(options);
  }
  for (const char* method : {"on_request_begin", "on_token", "on_request_end"}) {
    if (!py::hasattr(spec, method)) {
      throw py::type_error(std::string("audit sink: expected a path or an object with on_request_begin, "
                                       "on_token and on_request_end; ") +
                           py::repr(spec).cast<std::string>() + " has no " + method);
    }
  }
  return std::make_shared<PythonSink>(py::reinterpret_borrow<py::object>(spec));
}

py::dict to_dict(const RequestRecord& r) {
  py::dict sampling;
  sampling["temperature"] = r.sampling.temperature;
  sampling["top_k"] = r.sampling.top_k;
  sampling["top_p"] = r.sampling.top_p;
  sampling["min_p"] = r.sampling.min_p;
  sampling["repeat_penalty"] = r.sampling.repeat_penalty;
  sampling["seed"] = r.sampling.seed;
  sampling["max_new_tokens"] = r.sampling.max_new_tokens;
  sampling["top_logprobs"] = r.sampling.top_logprobs;
  sampling["stop"] = r.sampling.stop;
  py::dict engine;
  engine["library_version"] = r.engine.library_version;
  engine["weights_format"] = r.engine.weights_format;
  engine["weights_conversion"] = r.engine.weights_conversion;
  engine["weights_placement"] = r.engine.weights_placement;
  engine["kv_cache_type"] = r.engine.kv_cache_type;
  engine["cpu_isa"] = r.engine.cpu_isa;
  engine["threads"] = r.engine.threads;
  engine["deterministic"] = r.engine.deterministic;
  py::dict d;
  d["request_id"] = r.request_id;
  d["unix_time_ns"] = r.unix_time_ns;
  d["model_path"] = r.model_path;
  d["model_sha256"] = r.model_sha256;
  d["engine"] = engine;
  d["sampling"] = sampling;
  d["level"] = to_string(r.level);
  d["input_sha256"] = r.input_sha256;
  d["input_tokens"] = r.input_tokens;
  d["tenant"] = r.metadata.tenant;
  d["user"] = r.metadata.user;
  d["tags"] = r.metadata.tags;
  return d;
}

py::dict to_dict(const RequestSummary& s) {
  py::dict d;
  d["request_id"] = s.request_id;
  d["finish_reason"] = s.finish_reason;
  d["error"] = s.error;
  d["prompt_tokens"] = s.prompt_tokens;
  d["generated_tokens"] = s.generated_tokens;
  d["tokens"] = s.tokens;
  d["prefill_ns"] = s.prefill_ns;
  d["decode_ns"] = s.decode_ns;
  d["total_ns"] = s.total_ns;
  return d;
}

py::dict to_dict(const AnomalyEvent& a) {
  py::dict d;
  d["request_id"] = a.request_id;
  d["rule"] = a.rule;
  d["action"] = to_string(a.action);
  d["token_index"] = a.token_index;
  d["detail"] = a.detail;
  return d;
}

void bind_audit(py::module_& m) {
  m.def("verify_log", [](const std::string& path, const std::string& key) {
    AuditLogReport report;
    {
      py::gil_scoped_release release;
      report = verify_audit_log(audit_log_series(path), key);
    }
    py::dict d;
    d["clean"] = report.clean();
    d["problem"] = to_string(report.problem);
    d["file"] = report.file;
    d["line"] = report.line;
    d["message"] = report.message;
    d["records"] = report.records;
    d["files"] = report.files;
    d["open_requests"] = report.open_requests;
    d["last_hash"] = report.last_hash;
    return d;
  }, py::arg("path"), py::arg("key") = "");
  m.def("replay_log", [](const std::string& path, const std::string& model, int threads) {
    std::vector<ReplayOutcome> outcomes;
    {
      py::gil_scoped_release release;
      ReplayOptions options;
      options.model_path = model;
      options.threads = threads;
      outcomes = replay_log(audit_log_series(path), options);
    }
    py::list out;
    for (const ReplayOutcome& o : outcomes) {
      py::dict d;
      d["request_id"] = o.request_id;
      d["match"] = o.match;
      d["deterministic"] = o.deterministic;
      d["tokens"] = o.tokens;
      d["message"] = o.message;
      out.append(d);
    }
    return out;
  }, py::arg("path"), py::arg("model"), py::arg("threads") = 0);
}

}  // namespace sitsrt::python
