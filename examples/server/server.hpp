// `sitsrt serve`: an OpenAI-compatible HTTP server over one Engine, built on the public API only.
// Requests from every connection are submitted to the engine's scheduler (Engine::submit /
// submit_chat), which batches them; a streamed response forwards each token event as an SSE
// chunk, and a client that goes away, streamed or not, cancels its request (its KV blocks are
// freed at once; connection_watch.hpp).
//   POST /v1/completions, POST /v1/chat/completions (stream or not, logprobs), GET /v1/models,
//   GET /health, GET /metrics (Prometheus, metrics.hpp), GET /v1/audit/{id} (a request's records;
//   ?format=jsonl: the log's header and the request's lines as written), GET /viewer/ (the trace
//   viewer, examples/trace-viewer/), POST /tokenize and /detokenize (llama.cpp's; tokenizer_endpoints.hpp)
// Errors are OpenAI error objects with 4xx/5xx statuses; no request input can crash the server.
#pragma once

#include <sitsrt/engine.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sitsrt::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;       // 0: any free port (port() tells which)
  std::string model_id;  // the name /v1/models lists and requests must use
  // Bearer API keys -> tenant ids (the serving core's quotas); empty: no authentication.
  std::map<std::string, std::string> api_keys;
  std::size_t max_body_bytes = 4u << 20;
  int max_concurrent_requests = 64;           // more get 429 at once
  std::chrono::seconds request_timeout{600};  // a request still running then is cancelled
  int http_threads = 0;                       // 0: max_concurrent_requests + 8
  // The audit log the engine writes (EngineOptions' JSONL sink), for GET /v1/audit/{id}: that
  // request's records, to its own tenant only. Empty: the endpoint answers 404.
  std::string audit_log;
  // What the audit sinks get of each request (`--enable-trace`: kTopK); from kTopK on, at least
  // `trace_top_logprobs` alternatives per token are recorded whatever the client asked for.
  TraceLevel audit_level = TraceLevel::kOff;
  int trace_top_logprobs = 5;
  std::vector<std::int64_t> audit_full_distribution_steps;  // at kFull
  double price_per_hour = 0.0;                              // device cost for the /metrics cost board (0: not shown)
};

class Server {
 public:
  Server(const Engine& engine, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the socket (throws std::runtime_error naming host:port when it cannot) and returns
  // the port bound; then listen() serves until stop().
  int bind();
  void listen();
  // Stops accepting; requests in flight are cancelled after `drain` (their streams end with a
  // finish reason), then listen() returns.
  void stop(std::chrono::milliseconds drain = std::chrono::milliseconds(0));

  [[nodiscard]] int port() const noexcept;
  [[nodiscard]] const std::string& model_id() const noexcept;
  [[nodiscard]] std::int64_t requests_in_flight() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads an API key file: one key per line, optionally followed by whitespace and a tenant id
// (default: the key's line number, "key-N"); '#' starts a comment. Throws std::runtime_error.
[[nodiscard]] std::map<std::string, std::string> read_api_keys(const std::string& path);

// Constant-time equality of two byte strings (time depends only on the lengths).
[[nodiscard]] bool constant_time_equal(const std::string& a, const std::string& b) noexcept;

}  // namespace sitsrt::server
