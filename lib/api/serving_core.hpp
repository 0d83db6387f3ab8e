// The engine's serving core: the KV block pool and the scheduler that every generation goes
// through. generate() submits and then consumes the request's events on the calling thread
// (each answered before the request takes its next step, so a callback's false stops it at
// once); submit() hands the request's handle to the caller.
#pragma once

#include "backend/kv_block_pool.hpp"
#include "runtime/executor.hpp"
#include "runtime/scheduler.hpp"
#include "tokenizer/tokenizer.hpp"

#include <sitsrt/engine.hpp>
#include <sitsrt/request.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace sitsrt {

struct RequestHooks {
  TokenCallback observe;  // scheduler thread (audit)
  std::function<void(GenerationResult&)> on_end;
  std::function<void(const std::exception_ptr&)> on_error;
};

class ServingCore {
 public:
  // geometry: the KV layout; options: as resolved (max_num_batched_tokens set, pool tokens set).
  ServingCore(const ExecutionPlan& plan, const Tokenizer& tokenizer, Backend& backend, const KvGeometry& geometry,
              const ServingOptions& options);

  // The bytes a pool of `options.kv_pool_tokens` positions takes (whole blocks).
  static std::uint64_t pool_bytes(const KvGeometry& geometry, const ServingOptions& options);

  GenerationResult generate(std::span<const std::int32_t> prompt, const GenerationConfig& config,
                            const TokenCallback& on_token, const std::string& request_id) const;
  RequestHandle submit(std::span<const std::int32_t> prompt, const GenerationConfig& config, SubmitOptions options,
                       RequestHooks hooks, const std::string& request_id) const;
  void fill(RequestQueueStats& stats) const;
  [[nodiscard]] const ServingOptions& options() const noexcept { return options_; }

 private:
  ServingOptions options_;
  std::unique_ptr<KvBlockPool> pool_;
  std::unique_ptr<Scheduler> scheduler_;
};

}  // namespace sitsrt
