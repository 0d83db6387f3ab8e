#include <sitsrt/audit_log.hpp>

#include "audit/log_reader.hpp"
#include "core/check.hpp"

#include <sitsrt/engine.hpp>

#include <charconv>
#include <cstring>
#include <memory>
#include <optional>

namespace sitsrt {
namespace {

EngineOptions engine_options_for(const EngineDigest& d, const ReplayOptions& o) {
  EngineOptions e;
  e.model_path = o.model_path;
  e.threads = o.threads;
  e.context_length = d.context_length;
  e.max_batch_tokens = d.max_batch_tokens;
  e.cpu_isa = d.cpu_isa;
  e.weights = d.weights_conversion;  // the engine refuses a conversion it does not know
  if (d.weights_placement != "resident" && d.weights_placement != "mmap") {
    raise(ErrorCode::kInvalidArgument, "recorded weight placement '{}' is unknown", d.weights_placement);
  }
  e.mmap_weights = d.weights_placement == "mmap";
  if (d.activations != "int8" && d.activations != "f32") {
    raise(ErrorCode::kInvalidArgument, "recorded activations '{}' are unknown", d.activations);
  }
  e.int8_activations = d.activations == "int8";
  e.deterministic = d.deterministic;
  e.deterministic_batching = d.batch_invariant;
  // "f16", or "k=int8+hadamard+centered,v=int4+hadamard" (engine.cpp's kv_layout_label).
  const auto type_of = [&](std::string_view t) {
    if (t == "f32") return KvCacheType::kF32;
    if (t == "f16") return KvCacheType::kF16;
    if (t == "int8") return KvCacheType::kInt8;
    if (t == "int4") return KvCacheType::kInt4;
    raise(ErrorCode::kInvalidArgument, "recorded KV cache type '{}' is unknown", d.kv_cache_type);
  };
  std::string_view label = d.kv_cache_type;
  e.kv_recent_window = 0;  // recorded only when on
  if (const std::size_t at = label.find(",recent="); at != std::string_view::npos) {
    const std::string_view n = label.substr(at + std::string_view(",recent=").size());
    std::int64_t window = 0;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), window);
    if (ec != std::errc{} || end != n.data() + n.size() || window < 1) {
      raise(ErrorCode::kInvalidArgument, "recorded KV cache type '{}' has a bad recent window", d.kv_cache_type);
    }
    e.kv_recent_window = window;
    label = label.substr(0, at);
  }
  e.kv_hadamard = false;
  e.kv_k_centering = false;  // recorded only when on
  if (label.starts_with("k=")) {
    const std::size_t comma = label.find(",v=");
    if (comma == std::string_view::npos) raise(ErrorCode::kInvalidArgument, "recorded KV cache type '{}' is unknown", label);
    const auto side = [&](std::string_view s) {
      if (s.ends_with("+centered")) {
        s.remove_suffix(std::string_view("+centered").size());
        e.kv_k_centering = true;
      }
      const bool rotated = s.ends_with("+hadamard");
      if (rotated) s.remove_suffix(std::string_view("+hadamard").size());
      e.kv_hadamard = e.kv_hadamard || rotated;
      return type_of(s);
    };
    e.k_cache_type = side(label.substr(2, comma - 2));
    e.v_cache_type = side(label.substr(comma + 3));
    e.kv_cache_type = *e.k_cache_type;
  } else {
    e.kv_cache_type = type_of(label);
  }
  e.on_progress = o.on_progress;
  return e;
}

bool same_settings(const EngineDigest& a, const EngineDigest& b) {
  return a.cpu_isa == b.cpu_isa && a.activations == b.activations && a.max_batch_tokens == b.max_batch_tokens &&
         a.context_length == b.context_length && a.kv_cache_type == b.kv_cache_type &&
         a.weights_conversion == b.weights_conversion && a.weights_placement == b.weights_placement &&
         a.deterministic == b.deterministic && a.batch_invariant == b.batch_invariant;
}

GenerationConfig config_for(const SamplingRecord& s) {
  GenerationConfig c;
  c.max_new_tokens = s.max_new_tokens;
  c.temperature = s.temperature;
  c.top_k = s.top_k;
  c.top_p = s.top_p;
  c.min_p = s.min_p;
  c.repeat_penalty = s.repeat_penalty;
  c.repeat_last_n = s.repeat_last_n;
  c.seed = s.seed;
  c.stop = s.stop;
  c.stop_at_end_of_sequence = s.stop_at_end_of_sequence;
  c.top_logprobs = s.top_logprobs;
  return c;
}

}  // namespace

std::vector<ReplayOutcome> replay_log(const std::vector<std::string>& files, const ReplayOptions& options) {
  const std::vector<audit::RecordedRequest> requests = audit::read_recorded_requests(files);
  std::vector<ReplayOutcome> out;
  std::unique_ptr<Engine> engine;
  EngineDigest loaded;
  for (const audit::RecordedRequest& req : requests) {
    const RequestRecord& rec = req.record;
    if (!engine || !same_settings(loaded, rec.engine)) {
      engine = std::make_unique<Engine>(engine_options_for(rec.engine, options));
      loaded = rec.engine;
      if (engine->model_info().cpu_isa != rec.engine.cpu_isa) {
        raise(ErrorCode::kUnsupported, "request {} ran with ISA level {}, this machine gives {}", rec.request_id,
              rec.engine.cpu_isa, engine->model_info().cpu_isa);
      }
    }
    if (engine->model_sha256() != rec.model_sha256) {
      raise(ErrorCode::kRejected, "{}: SHA-256 {} differs from the recorded model {} (request {}); refusing to replay",
            options.model_path, engine->model_sha256(), rec.model_sha256, rec.request_id);
    }
    ReplayOutcome o;
    o.request_id = rec.request_id;
    o.deterministic = rec.engine.deterministic;
    std::vector<float> logprobs;
    const GenerationResult result = engine->generate_from_tokens(rec.input_tokens, config_for(rec.sampling),
                                                                 [&](const TokenEvent& e) {
                                                                   logprobs.push_back(e.logprob);
                                                                   return true;
                                                                 });
    o.tokens = static_cast<std::int64_t>(std::min(result.tokens.size(), req.tokens.size()));
    o.match = true;
    o.message = "bit-exact";
    const std::size_t n = std::min(result.tokens.size(), req.tokens.size());
    for (std::size_t i = 0; i < n && o.match; ++i) {
      if (result.tokens[i] != req.tokens[i]) {
        o.match = false;
        o.message = fmt::format("token {}: recorded id {}, replayed id {}", i, req.tokens[i], result.tokens[i]);
      } else if (i < req.logprobs.size() && std::memcmp(&logprobs[i], &req.logprobs[i], sizeof(float)) != 0) {
        o.match = false;
        o.message = fmt::format("token {}: recorded logprob {}, replayed {}", i, req.logprobs[i], logprobs[i]);
      }
    }
    if (o.match && req.finish_reason.empty()) {
      o.message = fmt::format("bit-exact over the {} recorded tokens (the request has no end record)", n);
    } else if (o.match && result.tokens.size() != req.tokens.size()) {
      o.match = false;
      o.message = fmt::format("recorded {} tokens, replay produced {}", req.tokens.size(), result.tokens.size());
    } else if (o.match && req.finish_reason != to_string(result.finish_reason)) {
      o.match = false;
      o.message = fmt::format("recorded finish '{}', replay '{}'", req.finish_reason, to_string(result.finish_reason));
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace sitsrt
