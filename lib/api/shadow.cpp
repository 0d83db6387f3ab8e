// Shadow evaluation sink: collects each request's tokens, then a worker thread re-scores them
// teacher-forced on the shadow engine and reports the divergence.
#include "core/check.hpp"

#include <sitsrt/shadow.hpp>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>

namespace sitsrt {
namespace {

struct Collected {
  std::vector<std::int32_t> input;
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenAlternative>> top;
  bool has_top = false;
};

// log(sum(exp(row))), accumulated in double.
double log_sum_exp(std::span<const float> row) {
  const float max = *std::max_element(row.begin(), row.end());
  double sum = 0.0;
  for (const float x : row) sum += std::exp(static_cast<double>(x - max));
  return static_cast<double>(max) + std::log(sum);
}

class ShadowSink final : public AuditSink {
 public:
  explicit ShadowSink(ShadowEvalOptions options) : options_(std::move(options)), rng_(options_.seed) {
    if (!options_.shadow) raise(ErrorCode::kInvalidArgument, "shadow evaluation needs a shadow engine");
    if (!(options_.fraction >= 0.0 && options_.fraction <= 1.0)) {
      raise(ErrorCode::kInvalidArgument, "shadow fraction {} is outside [0, 1]", options_.fraction);
    }
    worker_ = std::thread([this] { run(); });
  }
  ~ShadowSink() override {
    {
      std::lock_guard lock(mutex_);
      closing_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }

  void on_request_begin(const RequestRecord& r) override {
    std::lock_guard lock(mutex_);
    if (std::uniform_real_distribution<double>(0.0, 1.0)(rng_) >= options_.fraction) return;
    active_[r.request_id].input = r.input_tokens;
  }
  void on_token(const std::string& id, const TokenEvent& e) override {
    std::lock_guard lock(mutex_);
    const auto it = active_.find(id);
    if (it == active_.end()) return;
    it->second.tokens.push_back(e.token_id);
    it->second.logprobs.push_back(e.logprob);
    it->second.top.push_back(e.top);
    it->second.has_top = it->second.has_top || !e.top.empty();
  }
  void on_request_end(const RequestSummary& s) override {
    {
      std::lock_guard lock(mutex_);
      const auto it = active_.find(s.request_id);
      if (it == active_.end()) return;
      if (!it->second.tokens.empty()) {
        queue_.emplace_back(s.request_id, std::move(it->second));
        ++queued_;
      }
      active_.erase(it);
    }
    wake_.notify_all();
  }
  void flush() override {
    std::unique_lock lock(mutex_);
    const std::uint64_t target = queued_;
    done_cv_.wait(lock, [&] { return done_ >= target; });
  }

 private:
  ShadowDivergence evaluate(const std::string& id, const Collected& c) const {
    const Engine& shadow = *options_.shadow;
    ShadowDivergence d;
    d.request_id = id;
    d.shadow_model_sha256 = shadow.model_sha256();
    std::vector<std::int32_t> sequence = c.input;
    sequence.insert(sequence.end(), c.tokens.begin(), c.tokens.end() - 1);  // the last token predicts nothing we keep
    const std::vector<float> logits = shadow.logits(sequence, /*all_positions=*/true);
    const auto vocab = static_cast<std::size_t>(shadow.model_info().n_vocab);
    double kl_sum = 0.0;
    for (std::size_t i = 0; i < c.tokens.size(); ++i) {
      const std::span<const float> row(logits.data() + (c.input.size() - 1 + i) * vocab, vocab);
      const double lse = log_sum_exp(row);
      const auto tok = static_cast<std::size_t>(c.tokens[i]);
      const float lp = tok < vocab ? static_cast<float>(row[tok] - lse) : -INFINITY;
      d.logprob_diff.push_back(lp - c.logprobs[i]);
      d.max_abs_logprob_diff = std::max(d.max_abs_logprob_diff, std::fabs(lp - c.logprobs[i]));
      if (!c.has_top || c.top[i].empty()) continue;
      // KL(p || q) over the main engine's top-k ids, both renormalised over that set.
      double p_sum = 0.0, q_sum = 0.0;
      for (const auto& t : c.top[i]) {
        p_sum += std::exp(static_cast<double>(t.logprob));
        q_sum += static_cast<std::size_t>(t.id) < vocab ? std::exp(row[static_cast<std::size_t>(t.id)] - lse) : 0.0;
      }
      double kl = 0.0;
      for (const auto& t : c.top[i]) {
        const double p = std::exp(static_cast<double>(t.logprob)) / p_sum;
        const double q = (static_cast<std::size_t>(t.id) < vocab ? std::exp(row[static_cast<std::size_t>(t.id)] - lse) : 0.0) / q_sum;
        kl += p > 0.0 ? p * std::log(p / q) : 0.0;
      }
      d.topk_kl.push_back(static_cast<float>(kl));
      kl_sum += kl;
    }
    d.mean_topk_kl = d.topk_kl.empty() ? 0.0f : static_cast<float>(kl_sum / static_cast<double>(d.topk_kl.size()));
    d.tripped = d.mean_topk_kl > options_.max_mean_topk_kl || d.max_abs_logprob_diff > options_.max_abs_logprob_diff;
    return d;
  }

  void run() {
    for (;;) {
      std::pair<std::string, Collected> job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return closing_ || !queue_.empty(); });
        if (queue_.empty()) {
          if (closing_) return;
          continue;
        }
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        const ShadowDivergence d = evaluate(job.first, job.second);
        if (d.tripped && options_.guarded) options_.guarded->open_circuit_breaker();
        for (const auto& s : options_.report_to) s->on_shadow(d);
        if (options_.on_divergence) options_.on_divergence(d);
      } catch (const std::exception&) {
        // A request the shadow cannot score (e.g. longer than its context) is left unevaluated.
      }
      {
        std::lock_guard lock(mutex_);
        ++done_;
      }
      done_cv_.notify_all();
    }
  }

  ShadowEvalOptions options_;
  std::mt19937_64 rng_;
  std::mutex mutex_;
  std::condition_variable wake_, done_cv_;
  std::map<std::string, Collected> active_;
  std::deque<std::pair<std::string, Collected>> queue_;
  std::uint64_t queued_ = 0, done_ = 0;
  bool closing_ = false;
  std::thread worker_;
};

}  // namespace

std::shared_ptr<AuditSink> make_shadow_eval_sink(ShadowEvalOptions options) {
  return std::make_shared<ShadowSink>(std::move(options));
}

}  // namespace sitsrt
