#include "metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <unistd.h>

#include <fstream>
#include <mutex>

namespace sitsrt::server {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

// Resident set size of this process (/proc/self/statm's second field, in pages).
double resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  double size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

struct ServerMetrics::Impl {
  const Engine& engine;
  double price_per_hour;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::mutex mutex;  // the engine-derived counters' last values

  Family<Counter>& requests = prometheus::BuildCounter()
                                  .Name("sitsrt_requests_total")
                                  .Help("Requests answered, by endpoint, HTTP status and tenant")
                                  .Register(*registry);
  Counter& prompt_tokens = prometheus::BuildCounter()
                               .Name("sitsrt_prompt_tokens_total")
                               .Help("Prompt tokens of answered requests")
                               .Register(*registry)
                               .Add({});
  Counter& generated_tokens = prometheus::BuildCounter()
                                  .Name("sitsrt_generation_tokens_total")
                                  .Help("Tokens generated for answered requests")
                                  .Register(*registry)
                                  .Add({});
  Histogram& ttft = prometheus::BuildHistogram()
                        .Name("sitsrt_time_to_first_token_seconds")
                        .Help("Time from a request's arrival to its first token")
                        .Register(*registry)
                        .Add({}, Histogram::BucketBoundaries{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30});
  Histogram& itl =
      prometheus::BuildHistogram()
          .Name("sitsrt_inter_token_latency_seconds")
          .Help("Time between a request's consecutive tokens")
          .Register(*registry)
          .Add({}, Histogram::BucketBoundaries{0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56});
  Gauge& waiting = prometheus::BuildGauge()
                       .Name("sitsrt_requests_waiting")
                       .Help("Requests queued for admission (preempted ones included)")
                       .Register(*registry)
                       .Add({});
  Gauge& running = prometheus::BuildGauge()
                       .Name("sitsrt_requests_running")
                       .Help("Requests admitted to the batched steps")
                       .Register(*registry)
                       .Add({});
  Gauge& kv_used =
      prometheus::BuildGauge().Name("sitsrt_kv_blocks_used").Help("KV cache blocks in use").Register(*registry).Add({});
  Gauge& kv_free = prometheus::BuildGauge()
                       .Name("sitsrt_kv_blocks_free")
                       .Help("KV cache blocks free (cached prefix blocks included)")
                       .Register(*registry)
                       .Add({});
  Counter& preemptions = prometheus::BuildCounter()
                             .Name("sitsrt_preemptions_total")
                             .Help("Requests preempted when KV blocks ran out")
                             .Register(*registry)
                             .Add({});
  Counter& prefix_hits = prometheus::BuildCounter()
                             .Name("sitsrt_prefix_cache_hits_total")
                             .Help("KV blocks reused from the prefix cache")
                             .Register(*registry)
                             .Add({});
  Gauge& breaker = prometheus::BuildGauge()
                       .Name("sitsrt_circuit_breaker_open")
                       .Help("1 while the engine's circuit breaker is open")
                       .Register(*registry)
                       .Add({});
  Gauge& resident = prometheus::BuildGauge()
                        .Name("process_resident_memory_bytes")
                        .Help("Resident memory size in bytes")
                        .Register(*registry)
                        .Add({});
  Family<Gauge>& cost = prometheus::BuildGauge()
                            .Name("sitsrt_cost_dollars")
                            .Help(
                                "Device cost from --price-per-hour: accrued since start, and amortised per "
                                "answered request and per 1000 tokens (prompt + generated)")
                            .Register(*registry);
  std::uint64_t last_preemptions = 0, last_prefix_hits = 0;
  double answered = 0;

  Impl(const Engine& e, double price) : engine(e), price_per_hour(price) {}
};

ServerMetrics::ServerMetrics(const Engine& engine, double price_per_hour)
    : impl_(std::make_unique<Impl>(engine, price_per_hour)) {}

ServerMetrics::~ServerMetrics() = default;

void ServerMetrics::request_done(const std::string& endpoint, int status, const std::string& tenant,
                                 std::int64_t prompt_tokens, std::int64_t generated_tokens) {
  impl_->requests.Add({{"endpoint", endpoint}, {"status", std::to_string(status)}, {"tenant", tenant}}).Increment();
  impl_->prompt_tokens.Increment(static_cast<double>(prompt_tokens));
  impl_->generated_tokens.Increment(static_cast<double>(generated_tokens));
  std::lock_guard lock(impl_->mutex);
  impl_->answered += 1;
}

void ServerMetrics::time_to_first_token(double seconds) {
  impl_->ttft.Observe(seconds);
}
void ServerMetrics::inter_token_latency(double seconds) {
  impl_->itl.Observe(seconds);
}

std::string ServerMetrics::render() {
  Impl& m = *impl_;
  const RequestQueueStats stats = m.engine.queue_stats();
  m.waiting.Set(static_cast<double>(stats.waiting));
  m.running.Set(static_cast<double>(stats.running));
  m.kv_used.Set(static_cast<double>(stats.kv_blocks - stats.kv_blocks_free));
  m.kv_free.Set(static_cast<double>(stats.kv_blocks_free));
  m.breaker.Set(m.engine.circuit_breaker_open() ? 1.0 : 0.0);
  m.resident.Set(resident_bytes());
  {
    std::lock_guard lock(m.mutex);  // the engine's totals become counter increments
    if (stats.preemptions > m.last_preemptions)
      m.preemptions.Increment(static_cast<double>(stats.preemptions - m.last_preemptions));
    if (stats.prefix_cache_hits > m.last_prefix_hits) {
      m.prefix_hits.Increment(static_cast<double>(stats.prefix_cache_hits - m.last_prefix_hits));
    }
    m.last_preemptions = std::max(m.last_preemptions, stats.preemptions);
    m.last_prefix_hits = std::max(m.last_prefix_hits, stats.prefix_cache_hits);
    if (m.price_per_hour > 0) {
      const double hours = std::chrono::duration<double>(std::chrono::steady_clock::now() - m.start).count() / 3600.0;
      const double accrued = m.price_per_hour * hours;
      const double tokens = m.prompt_tokens.Value() + m.generated_tokens.Value();
      m.cost.Add({{"basis", "accrued"}}).Set(accrued);
      m.cost.Add({{"basis", "per_request"}}).Set(m.answered > 0 ? accrued / m.answered : 0.0);
      m.cost.Add({{"basis", "per_1k_tokens"}}).Set(tokens > 0 ? accrued / tokens * 1000.0 : 0.0);
    }
  }
  return prometheus::TextSerializer().Serialize(m.registry->Collect());
}

}  // namespace sitsrt::server
