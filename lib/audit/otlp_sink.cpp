// OTLP/JSON trace file sink: one span per request, events per token (GenAI semantic conventions).
#include "core/check.hpp"
#include "core/file_io.hpp"

#include <sitsrt/audit.hpp>
#include <sitsrt/version.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <map>
#include <mutex>
#include <random>

namespace sitsrt {
namespace {

using nlohmann::json;

// OTLP/JSON encodes attribute values as {"stringValue"}, {"intValue": "<decimal>"}, {"doubleValue"}.
json attr(const std::string& key, const std::string& v) { return {{"key", key}, {"value", {{"stringValue", v}}}}; }
json attr(const std::string& key, std::int64_t v) {
  return {{"key", key}, {"value", {{"intValue", std::to_string(v)}}}};
}
json attr(const std::string& key, double v) { return {{"key", key}, {"value", {{"doubleValue", v}}}}; }
json attr_strings(const std::string& key, const std::vector<std::string>& v) {
  json values = json::array();
  for (const auto& s : v) values.push_back({{"stringValue", s}});
  return {{"key", key}, {"value", {{"arrayValue", {{"values", values}}}}}};
}

class OtlpSink final : public AuditSink {
 public:
  explicit OtlpSink(OtlpTraceOptions options) : options_(std::move(options)), rng_(std::random_device{}()) {
    // O_NONBLOCK: a FIFO nobody reads fails at once (ENXIO) instead of blocking the open.
    fd_.reset(::open(options_.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK | O_CLOEXEC, 0644));
    if (!fd_) {
      raise(ErrorCode::kIo, "{}: cannot open trace file ({}{})", options_.path, std::strerror(errno),
            errno == ENXIO ? ": a FIFO with no reader" : "");
    }
    const int flags = ::fcntl(fd_.get(), F_GETFL);
    if (flags >= 0) ::fcntl(fd_.get(), F_SETFL, flags & ~O_NONBLOCK);
    struct stat st {};
    regular_ = ::fstat(fd_.get(), &st) == 0 && S_ISREG(st.st_mode);
  }

  void on_request_begin(const RequestRecord& r) override {
    std::lock_guard lock(mutex_);
    Span& s = spans_[r.request_id];
    s.record = r;
    s.trace_id = random_hex(16);
    s.span_id = random_hex(8);
    s.events = json::array();
  }

  void on_token(const std::string& request_id, const TokenEvent& e) override {
    std::lock_guard lock(mutex_);
    const auto it = spans_.find(request_id);
    if (it == spans_.end() || it->second.record.level == TraceLevel::kOff) return;
    json attributes = json::array({attr("sitsrt.token.index", e.index), attr("sitsrt.token.id", std::int64_t{e.token_id}),
                                   attr("sitsrt.token.text", e.text), attr("sitsrt.token.logprob", double{e.logprob})});
    if (it->second.record.level != TraceLevel::kTokens) {
      attributes.push_back(attr("sitsrt.token.entropy", double{e.entropy}));
      std::vector<std::string> top;
      for (const auto& t : e.top) top.push_back(fmt::format("{}:{}", t.id, t.logprob));
      attributes.push_back(attr_strings("sitsrt.token.top_logprobs", top));
    }
    const auto t = it->second.record.unix_time_ns + static_cast<std::int64_t>(e.seconds_since_start * 1e9);
    it->second.events.push_back(
        {{"timeUnixNano", std::to_string(t)}, {"name", "sitsrt.token"}, {"attributes", std::move(attributes)}});
  }

  void on_anomaly(const AnomalyEvent& a) override {
    std::lock_guard lock(mutex_);
    const auto it = spans_.find(a.request_id);
    if (it == spans_.end()) return;
    it->second.events.push_back({{"timeUnixNano", std::to_string(it->second.record.unix_time_ns)},
                                 {"name", "sitsrt.anomaly"},
                                 {"attributes", json::array({attr("sitsrt.anomaly.rule", a.rule),
                                                             attr("sitsrt.anomaly.action", to_string(a.action)),
                                                             attr("sitsrt.token.index", a.token_index),
                                                             attr("sitsrt.anomaly.detail", a.detail)})}});
  }

  void on_request_end(const RequestSummary& s) override {
    std::lock_guard lock(mutex_);
    const auto it = spans_.find(s.request_id);
    if (it == spans_.end()) return;
    const std::string line =
        export_request(it->second, s).dump(-1, ' ', false, json::error_handler_t::replace) + '\n';
    spans_.erase(it);
    write_line(line);
  }

  void flush() override {
    std::lock_guard lock(mutex_);
    if (!error_.empty()) raise(ErrorCode::kIo, "{}: writing the trace failed ({})", options_.path, error_);
  }

 private:
  // One whole line per request, or none: a failed write (disk full, "File too large") is cut back
  // off a regular file, fails this request and every later one, and flush() reports it.
  void write_line(const std::string& line) {
    if (!error_.empty()) raise(ErrorCode::kIo, "{}: writing the trace failed ({})", options_.path, error_);
    struct stat st {};
    const bool sized = regular_ && ::fstat(fd_.get(), &st) == 0;
    std::size_t off = 0;
    while (off < line.size()) {
      const ssize_t n = ::write(fd_.get(), line.data() + off, line.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error_ = n < 0 ? std::strerror(errno) : "nothing written";
        if (sized && off > 0 && ::ftruncate(fd_.get(), st.st_size) != 0) error_ += "; a partial line remains";
        raise(ErrorCode::kIo, "{}: writing the trace failed ({})", options_.path, error_);
      }
      off += static_cast<std::size_t>(n);
    }
  }

  struct Span {
    RequestRecord record;
    std::string trace_id, span_id;
    json events;
  };

  std::string random_hex(int bytes) {
    std::string out;
    do {
      out.clear();
      for (int i = 0; i < bytes; ++i) out += fmt::format("{:02x}", static_cast<unsigned>(rng_() & 0xff));
    } while (out.find_first_not_of('0') == std::string::npos);  // all-zero ids are invalid
    return out;
  }

  json export_request(const Span& span, const RequestSummary& s) const {
    const RequestRecord& r = span.record;
    const SamplingRecord& p = r.sampling;
    json attributes = json::array({
        attr("gen_ai.operation.name", "text_completion"), attr("gen_ai.provider.name", "sitsrt"),
        attr("gen_ai.request.model", r.model_path), attr("gen_ai.request.temperature", double{p.temperature}),
        attr("gen_ai.request.top_p", double{p.top_p}), attr("gen_ai.request.top_k", double{static_cast<float>(p.top_k)}),
        attr("gen_ai.request.max_tokens", std::int64_t{p.max_new_tokens}),
        attr("gen_ai.request.seed", static_cast<std::int64_t>(p.seed)),
        attr_strings("gen_ai.request.stop_sequences", p.stop), attr("gen_ai.response.id", r.request_id),
        attr("gen_ai.response.model", r.model_path), attr_strings("gen_ai.response.finish_reasons", {s.finish_reason}),
        attr("gen_ai.usage.input_tokens", s.prompt_tokens), attr("gen_ai.usage.output_tokens", s.generated_tokens),
        attr("sitsrt.model.sha256", r.model_sha256), attr("sitsrt.input.sha256", r.input_sha256),
        attr("sitsrt.engine.deterministic", std::int64_t{r.engine.deterministic}),
        attr("sitsrt.engine.cpu_isa", r.engine.cpu_isa), attr("sitsrt.audit.level", to_string(r.level)),
        attr("sitsrt.tenant", r.metadata.tenant), attr("sitsrt.user", r.metadata.user),
        attr_strings("sitsrt.tags", r.metadata.tags)});
    json status = s.finish_reason == "error" ? json{{"code", 2}, {"message", s.error}} : json{{"code", 1}};
    const std::int64_t end = r.unix_time_ns + std::max<std::int64_t>(s.total_ns, 0);
    json spanj = {{"traceId", span.trace_id},
                  {"spanId", span.span_id},
                  {"name", fmt::format("text_completion {}", r.model_path)},
                  {"kind", 1},  // SPAN_KIND_INTERNAL: the model runs in-process
                  {"startTimeUnixNano", std::to_string(r.unix_time_ns)},
                  {"endTimeUnixNano", std::to_string(end)},
                  {"attributes", std::move(attributes)},
                  {"events", span.events},
                  {"status", std::move(status)}};
    return {{"resourceSpans",
             json::array({{{"resource", {{"attributes", json::array({attr("service.name", options_.service_name)})}}},
                           {"scopeSpans", json::array({{{"scope", {{"name", "sitsrt"}, {"version", kVersion}}},
                                                        {"spans", json::array({std::move(spanj)})}}})}}})}};
  }

  OtlpTraceOptions options_;
  UniqueFd fd_;
  bool regular_ = false;  // a regular file (a partial line can be cut back off it)
  std::string error_;     // the first write failure
  std::mutex mutex_;
  std::map<std::string, Span> spans_;
  std::mt19937_64 rng_;
};

}  // namespace

std::shared_ptr<AuditSink> make_otlp_trace_sink(const OtlpTraceOptions& options) {
  if (options.path.empty()) raise(ErrorCode::kInvalidArgument, "OTLP trace path is empty");
  return std::make_shared<OtlpSink>(options);
}

}  // namespace sitsrt
