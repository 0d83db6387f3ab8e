#include "server.hpp"

#include "connection_watch.hpp"
#include "metrics.hpp"
#include "openai_protocol.hpp"
#include "tokenizer_endpoints.hpp"
#include "viewer_assets.hpp"

#include <sitsrt/error.hpp>
#include <sitsrt/model_info.hpp>
#include <sitsrt/request.hpp>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace sitsrt::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr auto kPoll = std::chrono::milliseconds(20);

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ProtocolError& e) {
  send_json(res, e.status, error_body(e.what(), e.type, e.param));
}

// An engine error as an HTTP status and OpenAI error type.
ProtocolError from_engine_error(const Error& e) {
  switch (e.code()) {
    case ErrorCode::kInvalidArgument:
      return {400, "invalid_request_error", e.what()};
    case ErrorCode::kUnsupported:
      return {400, "invalid_request_error", e.what()};
    case ErrorCode::kRejected:
      return {429, "rate_limit_exceeded", e.what()};
    case ErrorCode::kOutOfMemory:
      return {503, "server_error", e.what()};
    default:
      return {500, "server_error", e.what()};
  }
}

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_hex(std::size_t n) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(n, '0');
  for (char& c : s) c = kHex[rng() % 16];
  return s;
}

std::string sse(const json& value) {
  return "data: " + value.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

// The records of request `id` in an audit log and its rotations (FILE, FILE.1, FILE.2, ...), in
// file order, as written (canonical lines, so a client can check each record's hash) and
// parsed; `header` gets the log's first line (its file header: the chain's algorithm). A line
// still being written (torn) is skipped.
struct AuditExcerpt {
  std::string header;
  std::vector<std::string> lines;
  std::vector<json> records;
};
AuditExcerpt audit_records(const std::string& path, const std::string& id) {
  AuditExcerpt excerpt;
  const std::string needle = "\"req\":\"" + id + "\"";
  for (int n = 0;; ++n) {
    std::ifstream in(n == 0 ? path : path + "." + std::to_string(n));
    if (!in) {
      if (n == 0) continue;  // the first file may have been rotated away
      break;
    }
    std::string line;
    for (bool first = true; std::getline(in, line); first = false) {
      if (first && n == 0) excerpt.header = line;
      if (in.eof() || line.find(needle) == std::string::npos) continue;  // eof: no newline, torn
      json record = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (record.is_object() && record.value("req", std::string()) == id) {
        excerpt.records.push_back(std::move(record));
        excerpt.lines.push_back(std::move(line));
      }
    }
  }
  return excerpt;
}

// Headers for the viewer's static files: its script runs with the page's origin (it fetches
// /v1/audit), so nothing else may run in it.
void set_asset_headers(httplib::Response& res) {
  res.set_header("Content-Security-Policy",
                 "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                 "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Cache-Control", "no-cache");
}

}  // namespace

bool constant_time_equal(const std::string& a, const std::string& b) noexcept {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::map<std::string, std::string> read_api_keys(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read the API key file");
  std::map<std::string, std::string> keys;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream fields(line);
    std::string key, tenant, extra;
    if (!(fields >> key)) continue;
    if (!(fields >> tenant)) tenant = "key-" + std::to_string(number);
    if (fields >> extra) throw std::runtime_error(path + ":" + std::to_string(number) + ": expected KEY [TENANT]");
    if (key.size() < 8)
      throw std::runtime_error(path + ":" + std::to_string(number) + ": a key needs 8 characters or more");
    keys[key] = tenant;
  }
  if (keys.empty()) throw std::runtime_error(path + ": no API key in the file");
  return keys;
}

struct Server::Impl {
  const Engine& engine;
  ServerOptions options;
  ProtocolLimits limits;
  httplib::Server http;
  std::atomic<std::int64_t> in_flight{0};
  std::atomic<bool> stopping{false};
  std::atomic<Clock::rep> cancel_after{Clock::time_point::max().time_since_epoch().count()};
  int port = 0;
  ServerMetrics metrics;

  Impl(const Engine& e, ServerOptions o) : engine(e), options(std::move(o)), metrics(e, options.price_per_hour) {
    const ModelInfo& info = engine.model_info();
    limits.vocab_size = static_cast<std::int32_t>(info.n_vocab);
    limits.max_tokens_limit = static_cast<std::int32_t>(info.context_length);
    if (options.model_id.empty()) {  // the file's name without .gguf (a directory's name), as llama.cpp's server
      std::string stem = info.path;
      while (!stem.empty() && stem.back() == '/') stem.pop_back();
      stem = stem.substr(stem.find_last_of('/') + 1);
      if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".gguf") == 0) stem.resize(stem.size() - 5);
      options.model_id = stem.empty() ? "sitsrt" : stem;
    }
    routes();
  }

  [[nodiscard]] bool cancel_now() const { return Clock::now().time_since_epoch().count() >= cancel_after.load(); }

  // The tenant of an authorised request; throws 401 otherwise. Every key is compared (in
  // constant time each), so the time taken does not tell which key came close.
  [[nodiscard]] std::string authorise(const httplib::Request& req) const {
    if (options.api_keys.empty()) return {};
    const std::string header = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (header.compare(0, prefix.size(), prefix) != 0) {
      throw ProtocolError(401, "authentication_error", "missing 'Authorization: Bearer <key>' header");
    }
    const std::string key = header.substr(prefix.size());
    const std::string* tenant = nullptr;
    for (const auto& [k, t] : options.api_keys) {
      if (constant_time_equal(k, key)) tenant = &t;
    }
    if (tenant == nullptr) throw ProtocolError(401, "authentication_error", "invalid API key");
    return *tenant;
  }

  // Counts a request in flight for its life (429 past the limit).
  struct Slot {
    explicit Slot(Impl& impl) : impl(&impl) {
      if (impl.in_flight.fetch_add(1) >= impl.options.max_concurrent_requests) {
        impl.in_flight.fetch_sub(1);
        this->impl = nullptr;
        throw ProtocolError(
            429, "rate_limit_exceeded",
            "too many concurrent requests (the limit is " + std::to_string(impl.options.max_concurrent_requests) + ")");
      }
    }
    ~Slot() {
      if (impl != nullptr) impl->in_flight.fetch_sub(1);
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    Impl* impl;
  };

  // One request being answered: its handle, what it has produced so far.
  struct Exchange {
    CompletionRequest request;
    ResponseMeta meta;
    RequestHandle handle;
    std::unique_ptr<Slot> slot;
    Clock::time_point deadline;
    Clock::time_point arrived = Clock::now();
    Clock::time_point last_token;
    std::string tenant;
    std::size_t text_offset = 0;
    bool first_chunk = true;
    bool any_token = false;
  };

  // Latency metrics of a token event that just arrived.
  void note_token(Exchange& ex) {
    const Clock::time_point now = Clock::now();
    if (!ex.any_token) {
      metrics.time_to_first_token(std::chrono::duration<double>(now - ex.arrived).count());
    } else {
      metrics.inter_token_latency(std::chrono::duration<double>(now - ex.last_token).count());
    }
    ex.any_token = true;
    ex.last_token = now;
  }

  static const char* endpoint(bool chat) { return chat ? "chat" : "completions"; }

  std::shared_ptr<Exchange> start(const httplib::Request& req, bool chat) {
    if (stopping) throw ProtocolError(503, "server_error", "the server is shutting down");
    const std::string tenant = authorise(req);
    auto ex = std::make_shared<Exchange>();
    ex->tenant = tenant;
    ex->slot = std::make_unique<Slot>(*this);
    ex->request = parse_completion_request(parse_request_body(req.body), chat, limits);
    if (ex->request.model != options.model_id) {
      throw ProtocolError(
          404, "not_found_error",
          "the model '" + ex->request.model + "' does not exist (this server has '" + options.model_id + "')", "model");
    }
    GenerationConfig& config = ex->request.config;
    config.audit.metadata.tenant = tenant;
    config.audit.metadata.user = ex->request.user;
    config.audit.level = options.audit_level;
    config.audit.full_distribution_steps = options.audit_full_distribution_steps;
    // The response still carries only the alternatives asked for (token_piece cuts them).
    if (options.audit_level >= TraceLevel::kTopK)
      config.top_logprobs = std::max(config.top_logprobs, options.trace_top_logprobs);
    SubmitOptions submit;
    submit.tenant = tenant;
    try {
      if (chat) {
        ex->handle = engine.submit_chat(ex->request.messages, config, std::move(submit));
      } else if (ex->request.prompt_is_tokens) {
        ex->handle = engine.submit_tokens(ex->request.prompt_tokens, config, std::move(submit));
      } else {
        ex->handle = engine.submit(ex->request.prompt, config, std::move(submit));
      }
    } catch (const Error& e) {
      throw from_engine_error(e);
    }
    ex->meta.id = (chat ? "chatcmpl-" : "cmpl-") + random_hex(24);
    ex->meta.created = unix_now();
    ex->meta.model = options.model_id;
    ex->meta.audit_id = ex->handle.request_id();
    ex->deadline = Clock::now() + options.request_timeout;
    return ex;
  }

  // Cancels when the server stops past its drain time or the request past its timeout.
  void enforce_limits(Exchange& ex) const {
    if (!ex.handle.done() && (cancel_now() || Clock::now() > ex.deadline)) ex.handle.cancel();
  }

  TokenPiece piece(const Exchange& ex, const TokenEvent& event) const {
    const TokenBytes bytes = [this](std::int32_t id) { return engine.token_bytes(id); };
    return token_piece(event, ex.request.want_logprobs ? bytes : TokenBytes{}, ex.request.top_logprobs);
  }

  void answer_whole(const httplib::Request& req, Exchange& ex, httplib::Response& res) {
    const ConnectionWatch connection(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    std::vector<TokenPiece> pieces;
    bool client_gone = false;
    for (;;) {
      if (!client_gone && connection.peer_gone()) {  // nobody to answer: free the request's blocks now
        client_gone = true;
        ex.handle.cancel();
      }
      if (std::optional<TokenEvent> event = ex.handle.next_event(kPoll)) {
        note_token(ex);
        pieces.push_back(piece(ex, *event));
        continue;
      }
      if (ex.handle.done()) break;
      enforce_limits(ex);
    }
    GenerationResult result;
    try {
      result = ex.handle.wait();
    } catch (const Error& e) {
      const ProtocolError p = from_engine_error(e);
      metrics.request_done(endpoint(ex.request.chat), p.status, ex.tenant, 0, 0);
      send_error(res, p);
      return;
    }
    if (result.finish_reason == FinishReason::kCancelled) {
      const int status = client_gone ? 499 : stopping ? 503 : 504;  // 499: nginx's "client closed request"
      metrics.request_done(endpoint(ex.request.chat), status, ex.tenant, result.timings.prompt_tokens,
                           result.timings.generated_tokens);
      send_error(res, ProtocolError(status, "timeout",
                                    stopping ? "the server shut down before the request finished"
                                             : "the request ran past the server's request timeout"));
      return;
    }
    metrics.request_done(endpoint(ex.request.chat), 200, ex.tenant, result.timings.prompt_tokens,
                         result.timings.generated_tokens);
    if (!ex.meta.audit_id.empty()) res.set_header("x-sitsrt-audit-id", ex.meta.audit_id);
    send_json(res, 200,
              completion_response(ex.request, ex.meta, result.text, pieces, finish_reason_name(result.finish_reason),
                                  result.timings.prompt_tokens, result.timings.generated_tokens));
  }

  void answer_stream(const std::shared_ptr<Exchange>& ex, httplib::Response& res) {
    if (!ex->meta.audit_id.empty()) res.set_header("x-sitsrt-audit-id", ex->meta.audit_id);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, ex](std::size_t, httplib::DataSink& sink) {
          const auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          Exchange& x = *ex;
          for (;;) {
            if (!sink.is_writable()) {  // the client went away: free the request's blocks now
              x.handle.cancel();
              return false;
            }
            if (std::optional<TokenEvent> event = x.handle.next_event(kPoll)) {
              note_token(x);
              std::vector<TokenPiece> pieces{piece(x, *event)};
              const json chunk =
                  stream_chunk(x.request, x.meta, event->text, pieces, x.text_offset, nullptr, x.first_chunk);
              x.first_chunk = false;
              x.text_offset += event->text.size();
              if (!write(sse(chunk))) {
                x.handle.cancel();
                return false;
              }
              continue;
            }
            if (x.handle.done()) break;
            enforce_limits(x);
          }
          try {
            const GenerationResult result = x.handle.wait();
            metrics.request_done(endpoint(x.request.chat), 200, x.tenant, result.timings.prompt_tokens,
                                 result.timings.generated_tokens);
            const json last = stream_chunk(x.request, x.meta, "", {}, x.text_offset,
                                           finish_reason_name(result.finish_reason), x.first_chunk);
            bool ok = write(sse(last));
            if (ok && x.request.include_usage) {
              ok = write(
                  sse(usage_chunk(x.request, x.meta, result.timings.prompt_tokens, result.timings.generated_tokens)));
            }
            if (ok) write("data: [DONE]\n\n");
          } catch (const Error& e) {
            const ProtocolError p = from_engine_error(e);
            metrics.request_done(endpoint(x.request.chat), p.status, x.tenant, 0, 0);
            if (write(sse(error_body(p.what(), p.type)))) write("data: [DONE]\n\n");
          }
          sink.done();
          return true;
        },
        [ex](bool) { ex->slot.reset(); });
  }

  void completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    std::shared_ptr<Exchange> ex;
    try {
      ex = start(req, chat);
    } catch (const ProtocolError& e) {
      metrics.request_done(endpoint(chat), e.status, "", 0, 0);
      send_error(res, e);
      return;
    }
    if (ex->request.stream) {
      answer_stream(ex, res);
    } else {
      answer_whole(req, *ex, res);
    }
  }

  void routes() {
    http.Post("/v1/completions",
              [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, false); });
    http.Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, true); });
    const auto tokenizer_route = [this](auto respond) {
      return [this, respond](const httplib::Request& req, httplib::Response& res) {
        try {
          static_cast<void>(authorise(req));
          send_json(res, 200, respond(engine, parse_request_body(req.body)));
        } catch (const ProtocolError& e) {
          send_error(res, e);
        } catch (const Error& e) {
          send_error(res, from_engine_error(e));
        }
      };
    };
    http.Post("/tokenize", tokenizer_route(tokenize_response));
    http.Post("/detokenize", tokenizer_route(detokenize_response));
    const auto models = [this](const httplib::Request& req, httplib::Response& res) {
      try {
        static_cast<void>(authorise(req));
      } catch (const ProtocolError& e) {
        send_error(res, e);
        return;
      }
      const json model = {
          {"id", options.model_id}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "sitsrt"}};
      if (req.matches.size() > 1) {
        if (req.matches[1] != options.model_id) {
          send_error(res, ProtocolError(404, "not_found_error",
                                        "the model '" + std::string(req.matches[1]) + "' does not exist", "model"));
          return;
        }
        send_json(res, 200, model);
        return;
      }
      send_json(res, 200, {{"object", "list"}, {"data", json::array({model})}});
    };
    http.Get("/v1/models", models);
    http.Get(R"(/v1/models/([^/]+))", models);
    http.Get(R"(/v1/audit/([A-Za-z0-9_.-]+))", [this](const httplib::Request& req, httplib::Response& res) {
      std::string tenant;
      try {
        tenant = authorise(req);
      } catch (const ProtocolError& e) {
        send_error(res, e);
        return;
      }
      const std::string id = req.matches[1];
      if (options.audit_log.empty()) {
        send_error(res,
                   ProtocolError(404, "not_found_error", "this server keeps no audit log (start it with --audit-log)"));
        return;
      }
      const AuditExcerpt excerpt = audit_records(options.audit_log, id);
      const std::vector<json>& records = excerpt.records;
      const auto begin = std::find_if(records.begin(), records.end(),
                                      [](const json& r) { return r.value("type", std::string()) == "request"; });
      // Another tenant's request is reported as absent, not as forbidden: ids are not to be probed.
      if (begin == records.end() || begin->value("/meta/tenant"_json_pointer, std::string()) != tenant) {
        send_error(res, ProtocolError(404, "not_found_error", "no audit records for request '" + id + "'"));
        return;
      }
      if (req.get_param_value("format") == "jsonl") {  // the log's own lines, after its header
        std::string body = excerpt.header + "\n";
        for (const std::string& line : excerpt.lines) body += line + "\n";
        res.set_content(body, "application/x-ndjson");
        return;
      }
      send_json(res, 200, {{"object", "list"}, {"request_id", id}, {"data", records}});
    });
    // The trace viewer (examples/trace-viewer/): static files, no authentication (they hold no
    // data; the page sends the user's key when it fetches /v1/audit).
    http.Get("/viewer", [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/viewer/", 301); });
    http.Get(R"(/viewer/([A-Za-z0-9_.-]*))", [](const httplib::Request& req, httplib::Response& res) {
      const std::string name = req.matches[1].length() == 0 ? std::string("index.html") : std::string(req.matches[1]);
      for (const StaticAsset& asset : viewer_assets()) {
        if (asset.name != name) continue;
        set_asset_headers(res);
        res.set_content(std::string(asset.bytes), std::string(asset.content_type));
        return;
      }
      send_json(res, 404, error_body("the viewer has no file '" + name + "'", "not_found_error"));
    });
    http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      try {
        static_cast<void>(authorise(req));
      } catch (const ProtocolError& e) {
        send_error(res, e);
        return;
      }
      res.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const bool open = engine.circuit_breaker_open();
      send_json(res, open || stopping ? 503 : 200,
                {{"status", stopping ? "stopping"
                            : open   ? "circuit_breaker_open"
                                     : "ok"},
                 {"requests_in_flight", in_flight.load()}});
    });
    // The other methods on the API paths: 405 with an error object.
    for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
      http.Get(path, [](const httplib::Request&, httplib::Response& res) {
        send_error(res, ProtocolError(405, "invalid_request_error", "use POST"));
      });
    }
    http.set_payload_max_length(options.max_body_bytes);
    http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 413) {
        send_json(res, 413,
                  error_body("the request body is over the " + std::to_string(options.max_body_bytes) + "-byte limit",
                             "invalid_request_error"));
      } else if (res.status == 404) {
        send_json(res, 404, error_body("no route for " + req.method + " " + req.path, "not_found_error"));
      } else {
        send_json(res, res.status, error_body("HTTP " + std::to_string(res.status), "invalid_request_error"));
      }
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_json(res, 500, error_body(what, "server_error"));
    });
    const int threads = options.http_threads > 0 ? options.http_threads : options.max_concurrent_requests + 8;
    http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
    http.set_read_timeout(std::chrono::seconds(30));
    http.set_write_timeout(std::chrono::seconds(30));
  }
};

Server::Server(const Engine& engine, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(options))) {}

Server::~Server() = default;

int Server::bind() {
  const auto& o = impl_->options;
  impl_->port =
      o.port == 0 ? impl_->http.bind_to_any_port(o.host) : (impl_->http.bind_to_port(o.host, o.port) ? o.port : -1);
  if (impl_->port <= 0) {
    throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(o.port) +
                             " (in use, or not an address here)");
  }
  return impl_->port;
}

void Server::listen() {
  impl_->http.listen_after_bind();
}

void Server::stop(std::chrono::milliseconds drain) {
  impl_->stopping = true;
  impl_->cancel_after = (Clock::now() + drain).time_since_epoch().count();
  impl_->http.stop();
}

int Server::port() const noexcept {
  return impl_->port;
}
const std::string& Server::model_id() const noexcept {
  return impl_->options.model_id;
}
std::int64_t Server::requests_in_flight() const noexcept {
  return impl_->in_flight.load();
}

}  // namespace sitsrt::server
