// The serving core through the public API: submit/wait, many concurrent requests in shared
// batches, preemption (recompute and swap), prefix caching, cancellation, tenant quotas and
// priorities. In deterministic mode a request's tokens and logprobs are bit-identical to running
// it alone, whatever shares its batches.
#include <sitsrt/engine.hpp>
#include <sitsrt/error.hpp>

#include "support/model_files.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

using namespace sitsrt;

namespace {

std::string model_path(DType type = DType::kQ8_0) {
  RandomModelOptions o;
  o.dim = 128;
  o.layers = 2;
  o.heads = 4;
  o.kv_heads = 2;
  o.ffn = 256;
  o.vocab = 512;
  o.context = 512;
  o.type = type;
  return test::random_model(o, type == DType::kQ8_0 ? std::string("serving") : "serving-" + std::string(name(type)));
}

EngineOptions engine_options(bool deterministic = true) {
  EngineOptions o;
  o.model_path = model_path();
  o.threads = 2;
  o.context_length = 256;
  o.max_batch_tokens = 64;
  o.deterministic = deterministic;
  return o;
}

GenerationConfig config(std::uint64_t seed, int tokens = 24, float temperature = 0.8f) {
  GenerationConfig c;
  c.max_new_tokens = tokens;
  c.temperature = temperature;
  c.seed = seed;
  c.stop_at_end_of_sequence = false;
  return c;
}

std::string prompt(int i) {
  static const char* const kWords[] = {"alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"};
  std::string p;
  for (int k = 0; k <= i % 11; ++k) p += std::string(kWords[(i + k) % 8]) + " ";
  return p;
}

struct Trace {
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;
  bool operator==(const Trace&) const = default;
};

Trace trace_of(const GenerationResult& r, const std::vector<float>& logprobs) { return {r.tokens, logprobs}; }

Trace alone(const Engine& engine, int i, const GenerationConfig& c) {
  std::vector<float> lp;
  const GenerationResult r = engine.generate(prompt(i), c, [&](const TokenEvent& e) {
    lp.push_back(e.logprob);
    return true;
  });
  return trace_of(r, lp);
}

// Requests 0..n-1 (config_of(i)) submitted at once, then each one's trace and the one alone.
template <typename ConfigOf>
void require_batched_equal_alone(const Engine& engine, int n, ConfigOf config_of) {
  std::vector<Trace> expected;
  for (int i = 0; i < n; ++i) expected.push_back(alone(engine, i, config_of(i)));
  std::vector<RequestHandle> handles;
  std::vector<std::vector<float>> lps(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    SubmitOptions so;
    so.on_token = [&lps, i](const TokenEvent& e) {
      lps[static_cast<std::size_t>(i)].push_back(e.logprob);
      return true;
    };
    handles.push_back(engine.submit(prompt(i), config_of(i), std::move(so)));
  }
  for (int i = 0; i < n; ++i) {
    CAPTURE(i);
    const GenerationResult r = handles[static_cast<std::size_t>(i)].wait();
    CHECK(trace_of(r, lps[static_cast<std::size_t>(i)]) == expected[static_cast<std::size_t>(i)]);
  }
}

}  // namespace

TEST_CASE("submit() then wait() gives generate()'s tokens; events arrive in order", "[serving]") {
  const Engine engine(engine_options());
  const GenerationConfig c = config(7);
  const GenerationResult direct = engine.generate(prompt(3), c);
  RequestHandle h = engine.submit(prompt(3), c);
  std::vector<std::int32_t> polled;
  while (auto e = h.next_event()) {
    CHECK(e->index == static_cast<std::int64_t>(polled.size()));
    polled.push_back(e->token_id);
  }
  const GenerationResult r = h.wait();
  CHECK(r.tokens == direct.tokens);
  CHECK(polled == direct.tokens);
  CHECK(r.text == direct.text);
  CHECK(h.status() == RequestStatus::kFinished);
  CHECK_THROWS_WITH(h.wait(), Catch::Contains("taken"));
}

TEST_CASE("64 requests from 8 threads, batched together, equal each run alone (deterministic)", "[serving]") {
  const Engine engine(engine_options());
  std::vector<Trace> expected;
  for (int i = 0; i < 64; ++i) expected.push_back(alone(engine, i, config(100 + i, 12 + i % 9)));
  std::vector<Trace> got(64);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::vector<RequestHandle> handles;
      std::vector<std::vector<float>> lps(8);
      for (int k = 0; k < 8; ++k) {
        const int i = t * 8 + k;
        SubmitOptions so;
        so.on_token = [&lps, k](const TokenEvent& e) {
          lps[static_cast<std::size_t>(k)].push_back(e.logprob);
          return true;
        };
        handles.push_back(engine.submit(prompt(i), config(100 + i, 12 + i % 9), std::move(so)));
      }
      for (int k = 0; k < 8; ++k) {
        const GenerationResult r = handles[static_cast<std::size_t>(k)].wait();
        got[static_cast<std::size_t>(t * 8 + k)] = trace_of(r, lps[static_cast<std::size_t>(k)]);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < 64; ++i) {
    CAPTURE(i);
    CHECK(got[static_cast<std::size_t>(i)] == expected[static_cast<std::size_t>(i)]);
  }
  const RequestQueueStats s = engine.queue_stats();
  INFO("steps " << s.steps << ", most sequences in a step " << s.max_step_sequences);
  CHECK(s.max_step_sequences > 1);  // they did share steps
  CHECK(s.running == 0);
  CHECK(s.kv_blocks_free == s.kv_blocks);
}

// Decode steps of one row run fused matmul groups where batch invariance allows them (int8 decode
// kernels; float weights run each product through the GEMM): every weight type, each request
// batched with the others equals it alone.
TEST_CASE("deterministic mode: batched requests equal each alone for every weight type", "[serving]") {
  const DType type = GENERATE(DType::kF32, DType::kF16, DType::kQ4_0, DType::kQ8_0);
  CAPTURE(name(type));
  EngineOptions o = engine_options();
  o.model_path = model_path(type);
  const Engine engine(o);
  require_batched_equal_alone(engine, 6, [](int i) { return config(300 + i, 10 + i); });
  CHECK(engine.queue_stats().max_step_sequences > 1);
}

TEST_CASE("preempted requests resume with identical tokens, by recompute and by swap", "[serving]") {
  const bool swap = GENERATE(false, true);
  CAPTURE(swap);
  EngineOptions o = engine_options();
  o.serving.kv_pool_tokens = 256;  // one context: 8 requests of ~110 positions cannot all fit
  o.serving.preempt_by_swap = swap;
  const Engine engine(o);
  require_batched_equal_alone(engine, 8, [](int i) { return config(300 + i, 100); });
  const RequestQueueStats s = engine.queue_stats();
  INFO(s.preemptions << " preemptions");
  CHECK(s.preemptions > 0);
  CHECK(s.kv_blocks_free == s.kv_blocks);
}

// int8/int4 caches keep exact f16 copies of each request's latest positions (a ring per
// request, staged per step): batching, preemption by recompute and by swap (the ring goes to
// host memory and back) must not change a deterministic request's bits. Prefix-cache hits would
// (adopted positions have no copies), so deterministic mode turns prefix caching off there; in
// the default mode hits are taken and read those positions quantized.
TEST_CASE("int8/int4 KV with an exact recent window: batched, preempted and swapped requests equal each alone",
          "[serving]") {
  const KvCacheType k = GENERATE(KvCacheType::kInt4, KvCacheType::kInt8);
  const bool swap = GENERATE(false, true);
  CAPTURE(static_cast<int>(k), swap);
  EngineOptions o = engine_options();
  o.k_cache_type = k;
  o.v_cache_type = KvCacheType::kInt4;
  o.kv_recent_window = 8;
  o.serving.kv_pool_tokens = 256;  // preemptions, as above
  o.serving.preempt_by_swap = swap;
  const Engine engine(o);
  require_batched_equal_alone(engine, 8, [](int i) { return config(700 + i, 60 + i); });
  const RequestQueueStats s = engine.queue_stats();
  CHECK(s.preemptions > 0);
  CHECK(s.kv_blocks_free == s.kv_blocks);
  CHECK(s.prefix_cache_hits == 0);  // off in deterministic mode with a window

  EngineOptions d = o;
  d.deterministic = false;
  d.serving.kv_pool_tokens = 512;
  const Engine fast(d);
  std::string shared;
  for (int i = 0; i < 40; ++i) shared += prompt(i).substr(0, 6);
  const GenerationResult first = fast.generate(shared + " one", config(5, 16));
  const GenerationResult second = fast.generate(shared + " one", config(5, 16));
  CHECK(fast.queue_stats().prefix_cache_hits > 0);
  CHECK(second.tokens.size() == first.tokens.size());
}

TEST_CASE("a prompt sharing a cached prefix reuses its blocks and gives identical tokens", "[serving]") {
  const Engine engine(engine_options());
  std::string shared;
  for (int i = 0; i < 40; ++i) shared += prompt(i).substr(0, 6);
  const GenerationConfig c = config(5, 16);
  const GenerationResult first = engine.generate(shared + " one", c);
  const std::uint64_t hits_before = engine.queue_stats().prefix_cache_hits;
  const GenerationResult second = engine.generate(shared + " one", c);
  CHECK(engine.queue_stats().prefix_cache_hits > hits_before);
  CHECK(second.tokens == first.tokens);
  // Off: no hits, same tokens.
  EngineOptions o = engine_options();
  o.serving.prefix_caching = false;
  const Engine plain(o);
  CHECK(plain.generate(shared + " one", c).tokens == first.tokens);
  CHECK(plain.queue_stats().prefix_cache_hits == 0);
}

TEST_CASE("cancel() ends a request at once and frees its blocks", "[serving]") {
  const Engine engine(engine_options());
  RequestHandle h = engine.submit(prompt(1), config(1, 200));
  for (int i = 0; i < 3; ++i) REQUIRE(h.next_event(std::chrono::seconds(30)));
  h.cancel();
  const GenerationResult r = h.wait();
  CHECK(r.finish_reason == FinishReason::kCancelled);
  CHECK(r.tokens.size() < 200);
  const RequestQueueStats s = engine.queue_stats();
  CHECK(s.kv_blocks_free == s.kv_blocks);
  // Dropping a handle cancels too.
  {
    RequestHandle dropped = engine.submit(prompt(2), config(2, 200));
    REQUIRE(dropped.next_event(std::chrono::seconds(30)));
  }
  for (int i = 0; i < 100 && engine.queue_stats().running > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(engine.queue_stats().running == 0);
}

TEST_CASE("tenant quotas: a tenant's requests wait for its own slots, others go ahead", "[serving]") {
  EngineOptions o = engine_options(false);
  o.serving.tenant_max_seqs = 1;
  const Engine engine(o);
  std::mutex m;
  std::vector<std::pair<std::string, int>> order;  // (tenant, request) per token, in time order
  std::atomic<bool> queued{false};
  const auto submit = [&](const std::string& tenant, int i, int tokens) {
    SubmitOptions so;
    so.tenant = tenant;
    so.on_token = [&, tenant, i](const TokenEvent&) {
      {
        std::lock_guard lock(m);
        order.emplace_back(tenant, i);
      }
      // a's first request holds the scheduler until all four are queued (on a loaded host it
      // could otherwise finish before b's is submitted).
      while (tenant == "a" && i == 0 && !queued.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return true;
    };
    return engine.submit(prompt(i), config(i, tokens), std::move(so));
  };
  std::vector<RequestHandle> hs;
  hs.push_back(submit("a", 0, 30));
  hs.push_back(submit("a", 1, 30));
  hs.push_back(submit("a", 2, 30));
  hs.push_back(submit("b", 3, 30));
  queued.store(true);
  for (auto& h : hs) (void)h.wait();
  // Tenant a's requests never interleave (one at a time); b's run beside a's first.
  int current = -1;
  std::set<int> done_a;
  bool b_overlapped_a = false;
  for (const auto& [tenant, i] : order) {
    if (tenant == "b") {
      b_overlapped_a = b_overlapped_a || (current == 0 && done_a.empty());
      continue;
    }
    if (i != current) {
      CHECK(done_a.count(i) == 0);
      if (current >= 0) done_a.insert(current);
      current = i;
    }
  }
  CHECK(b_overlapped_a);

  EngineOptions strict = engine_options(false);
  strict.serving.tenant_max_kv_blocks = 2;  // 32 positions
  const Engine limited(strict);
  std::string long_prompt;
  for (int i = 0; i < 30; ++i) long_prompt += "theta ";
  SubmitOptions so;
  so.tenant = "t";
  try {
    (void)limited.submit(long_prompt, config(1, 4), so);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kRejected);
    CHECK_THAT(e.what(), Catch::Contains("tenant 't'") && Catch::Contains("quota"));
  }
}

TEST_CASE("priorities: a higher-priority request is admitted before earlier lower ones", "[serving]") {
  EngineOptions o = engine_options(false);
  o.serving.max_num_seqs = 1;
  const Engine engine(o);
  std::mutex m;
  std::vector<int> first_tokens;
  std::atomic<bool> queued{false};
  const auto submit = [&](int i, int priority) {
    SubmitOptions so;
    so.priority = priority;
    so.on_token = [&, i](const TokenEvent& e) {
      if (e.index == 0) {
        std::lock_guard lock(m);
        first_tokens.push_back(i);
      }
      // The first request holds the scheduler until the other two are queued behind it.
      while (i == 0 && !queued.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return true;
    };
    return engine.submit(prompt(i), config(i, 40), std::move(so));
  };
  RequestHandle running = submit(0, 0);
  while (true) {
    std::lock_guard lock(m);
    if (!first_tokens.empty()) break;
  }
  RequestHandle low = submit(1, 0);
  RequestHandle high = submit(2, 5);
  queued.store(true);
  (void)running.wait();
  (void)low.wait();
  (void)high.wait();
  REQUIRE(first_tokens.size() == 3);
  CHECK(first_tokens[0] == 0);
  CHECK(first_tokens[1] == 2);
  CHECK(first_tokens[2] == 1);
}
