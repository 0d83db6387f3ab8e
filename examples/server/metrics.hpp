// Prometheus metrics of `sitsrt serve` (GET /metrics, text format 0.0.4, through prometheus-cpp):
// requests by endpoint, status and tenant; prompt and generated tokens; time to first token and
// inter-token latency histograms; from the engine at each scrape: requests waiting and running,
// KV blocks used and free, preemptions, prefix-cache hits, the circuit breaker, resident memory;
// and the cost board: with --price-per-hour, the device cost accrued since start, amortised per
// request and per 1000 tokens (prompt + generated).
#pragma once

#include <sitsrt/engine.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace sitsrt::server {

class ServerMetrics {
 public:
  ServerMetrics(const Engine& engine, double price_per_hour);
  ~ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // A request answered (any status); tokens are 0 for refused ones.
  void request_done(const std::string& endpoint, int status, const std::string& tenant, std::int64_t prompt_tokens,
                    std::int64_t generated_tokens);
  void time_to_first_token(double seconds);
  void inter_token_latency(double seconds);
  // The text exposition, the engine's gauges read now.
  [[nodiscard]] std::string render();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sitsrt::server
