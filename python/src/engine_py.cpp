// sitsrt._sitsrt.Engine and the value types it returns. Every call that runs the model releases
// the GIL; Python audit sinks re-acquire it only for their own calls (audit_py.cpp).
#include "convert.hpp"

#include <sitsrt/engine.hpp>
#include <sitsrt/error.hpp>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <tuple>
#include <variant>

namespace py = pybind11;

namespace sitsrt::python {
namespace {

Result run(const Engine& engine, const Prompt& prompt, const GenerationConfig& config) {
  Result out;
  TokenCallback collect = [&out](const TokenEvent& e) {
    out.events.push_back(e);
    return true;
  };
  py::gil_scoped_release release;
  out.result = run_prompt(engine, prompt, config, collect);
  out.finish_reason = to_string(out.result.finish_reason);
  return out;
}

py::list top_list(const TokenEvent& e) {
  py::list top;
  for (const TokenAlternative& a : e.top) top.append(py::make_tuple(a.id, a.logprob));
  return top;
}

}  // namespace

GenerationResult run_prompt(const Engine& engine, const Prompt& prompt, const GenerationConfig& config,
                            const TokenCallback& on_token, int priority) {
  SubmitOptions options;
  options.priority = priority;
  options.on_token = on_token;
  RequestHandle request;
  if (const auto* text = std::get_if<std::string>(&prompt)) {
    request = engine.submit(*text, config, std::move(options));
  } else if (const auto* chat = std::get_if<ChatPrompt>(&prompt)) {
    request = engine.submit_chat(chat->messages, config, std::move(options), chat->options);
  } else {
    request = engine.submit_tokens(std::get<std::vector<std::int32_t>>(prompt), config, std::move(options));
  }
  return request.wait();
}

void bind_types(py::module_& m) {
  py::class_<ChatPrompt>(m, "ChatPrompt")
      .def(py::init([](const std::vector<std::tuple<std::string, std::string, std::string>>& messages,
                       bool add_generation_prompt, std::string tools_json, std::string extra_context_json,
                       std::optional<std::int64_t> now) {
             ChatPrompt p;
             for (const auto& [role, content, extra] : messages) p.messages.push_back({role, content, extra});
             p.options.add_generation_prompt = add_generation_prompt;
             p.options.tools_json = std::move(tools_json);
             p.options.extra_context_json = std::move(extra_context_json);
             p.options.now_unix_seconds = now;
             return p;
           }),
           py::arg("messages"), py::arg("add_generation_prompt") = true, py::arg("tools_json") = "",
           py::arg("extra_context_json") = "", py::arg("now") = py::none());

  py::class_<TokenEvent>(m, "TokenEvent")
      .def_readonly("index", &TokenEvent::index)
      .def_readonly("token_id", &TokenEvent::token_id)
      .def_property_readonly("text", [](const TokenEvent& e) { return utf8(e.text); })
      .def_readonly("logprob", &TokenEvent::logprob)
      .def_property_readonly("top", &top_list)
      .def_readonly("entropy", &TokenEvent::entropy)
      .def_readonly("seconds_since_start", &TokenEvent::seconds_since_start)
      .def("__repr__", [](const TokenEvent& e) {
        return "TokenEvent(index=" + std::to_string(e.index) + ", token_id=" + std::to_string(e.token_id) +
               ", text=" + py::repr(utf8(e.text)).cast<std::string>() + ")";
      });

  py::class_<GenerationTimings>(m, "Timings")
      .def_readonly("prompt_tokens", &GenerationTimings::prompt_tokens)
      .def_readonly("generated_tokens", &GenerationTimings::generated_tokens)
      .def_readonly("prefill_seconds", &GenerationTimings::prefill_seconds)
      .def_readonly("decode_seconds", &GenerationTimings::decode_seconds)
      .def_readonly("total_seconds", &GenerationTimings::total_seconds)
      .def_property_readonly("prefill_tokens_per_second", &GenerationTimings::prefill_tokens_per_second)
      .def_property_readonly("decode_tokens_per_second", &GenerationTimings::decode_tokens_per_second);

  py::class_<Result>(m, "Result")
      .def_property_readonly("text", [](const Result& r) { return utf8(r.result.text); })
      .def_property_readonly("tokens", [](const Result& r) { return r.result.tokens; })
      .def_property_readonly("prompt_tokens", [](const Result& r) { return r.result.prompt_tokens; })
      .def_readonly("finish_reason", &Result::finish_reason)
      .def_property_readonly("seed", [](const Result& r) { return r.result.seed; })
      .def_property_readonly("request_id", [](const Result& r) { return r.result.request_id; })
      .def_property_readonly("timings", [](const Result& r) { return r.result.timings; })
      .def_readonly("events", &Result::events)
      .def_property_readonly("logprobs", [](const Result& r) {
        py::list out;
        for (const TokenEvent& e : r.events) out.append(e.logprob);
        return out;
      })
      .def_property_readonly("top_logprobs", [](const Result& r) {
        py::list out;
        for (const TokenEvent& e : r.events) out.append(top_list(e));
        return out;
      })
      .def("__repr__", [](const Result& r) {
        return "Result(finish_reason='" + r.finish_reason + "', tokens=" + std::to_string(r.result.tokens.size()) + ")";
      });

  py::class_<AuditSink, std::shared_ptr<AuditSink>>(m, "_Sink")
      .def("flush", [](AuditSink& s) {
        py::gil_scoped_release release;
        s.flush();
      });
  m.def("make_sink", &make_sink, py::arg("spec"), py::arg("key") = "", py::arg("append") = false);

  py::class_<GenerationConfig>(m, "GenerationConfig")
      .def(py::init<>())
      .def_readwrite("max_new_tokens", &GenerationConfig::max_new_tokens)
      .def_readwrite("temperature", &GenerationConfig::temperature)
      .def_readwrite("top_k", &GenerationConfig::top_k)
      .def_readwrite("top_p", &GenerationConfig::top_p)
      .def_readwrite("min_p", &GenerationConfig::min_p)
      .def_readwrite("repeat_penalty", &GenerationConfig::repeat_penalty)
      .def_readwrite("repeat_last_n", &GenerationConfig::repeat_last_n)
      .def_readwrite("seed", &GenerationConfig::seed)
      .def_readwrite("stop", &GenerationConfig::stop)
      .def_readwrite("stop_at_end_of_sequence", &GenerationConfig::stop_at_end_of_sequence)
      .def_readwrite("top_logprobs", &GenerationConfig::top_logprobs)
      .def_readwrite("add_bos", &GenerationConfig::add_bos)
      .def_property("audit_level", [](const GenerationConfig& c) { return std::string(to_string(c.audit.level)); },
                    [](GenerationConfig& c, const std::string& level) { c.audit.level = parse_trace_level(level); })
      .def("add_audit_sink", [](GenerationConfig& c, std::shared_ptr<AuditSink> sink) { c.audit.sinks.push_back(std::move(sink)); })
      .def("set_metadata", [](GenerationConfig& c, std::string tenant, std::string user, std::vector<std::string> tags) {
        c.audit.metadata = {std::move(tenant), std::move(user), std::move(tags)};
      });
}

namespace {

KvCacheType kv_cache_type_from(const char* what, const std::string& name) {
  if (name == "f16") return KvCacheType::kF16;
  if (name == "f32") return KvCacheType::kF32;
  if (name == "int8") return KvCacheType::kInt8;
  if (name == "int4") return KvCacheType::kInt4;
  throw Error(ErrorCode::kInvalidArgument,
              std::string(what) + ": expected 'f32', 'f16', 'int8' or 'int4', got '" + name + "'");
}

// The scheduler's limits from a dict of ServingOptions field names (sitsrt/_engine.py checks the
// types and ranges; an unknown key here is a programming error of that layer).
ServingOptions serving_options_from(const py::dict& d) {
  ServingOptions s;
  for (const auto& [key, value] : d) {
    const std::string k = py::cast<std::string>(key);
    if (k == "max_num_seqs") s.max_num_seqs = py::cast<std::int64_t>(value);
    else if (k == "max_num_batched_tokens") s.max_num_batched_tokens = py::cast<std::int64_t>(value);
    else if (k == "kv_block_size") s.kv_block_size = py::cast<std::int64_t>(value);
    else if (k == "kv_pool_tokens") s.kv_pool_tokens = py::cast<std::int64_t>(value);
    else if (k == "preempt_by_swap") s.preempt_by_swap = py::cast<bool>(value);
    else if (k == "prefix_caching") s.prefix_caching = py::cast<bool>(value);
    else if (k == "tenant_max_kv_blocks") s.tenant_max_kv_blocks = py::cast<std::int64_t>(value);
    else if (k == "tenant_max_seqs") s.tenant_max_seqs = py::cast<std::int64_t>(value);
    else if (k == "reject_over_quota") s.reject_over_quota = py::cast<bool>(value);
    else throw Error(ErrorCode::kInvalidArgument, "serving: unknown option '" + k + "'");
  }
  return s;
}

}  // namespace

void bind_engine(py::module_& m) {
  m.def("available_backends", [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const BackendSummary& b : available_backends()) out.emplace_back(b.name, b.summary);
    return out;
  });
  py::class_<Engine, std::shared_ptr<Engine>>(m, "Engine")
      .def(py::init([](std::string model, int threads, std::int64_t ctx, const std::string& kv_dtype,
                       std::int64_t max_batch_tokens, std::string cpu_isa, std::uint64_t memory_budget_bytes,
                       bool deterministic, std::vector<std::shared_ptr<AuditSink>> sinks, std::string weights,
                       bool mmap_weights, std::string chat_template, bool int8_activations, std::string device,
                       const std::optional<std::string>& k_dtype, const std::optional<std::string>& v_dtype,
                       bool kv_hadamard, const py::dict& serving, bool kv_k_centering, std::int64_t kv_recent_window,
                       bool device_graphs) {
             EngineOptions o;
             o.model_path = std::move(model);
             o.threads = threads;
             o.context_length = ctx;
             o.kv_cache_type = kv_cache_type_from("kv_dtype", kv_dtype);
             if (k_dtype) o.k_cache_type = kv_cache_type_from("k_dtype", *k_dtype);
             if (v_dtype) o.v_cache_type = kv_cache_type_from("v_dtype", *v_dtype);
             o.kv_hadamard = kv_hadamard;
             o.kv_k_centering = kv_k_centering;
             o.kv_recent_window = kv_recent_window;
             o.serving = serving_options_from(serving);
             o.max_batch_tokens = max_batch_tokens;
             o.cpu_isa = std::move(cpu_isa);
             o.memory_budget_bytes = memory_budget_bytes;
             o.deterministic = deterministic;
             o.audit_sinks = std::move(sinks);
             o.weights = std::move(weights);
             o.mmap_weights = mmap_weights;
             o.chat_template = std::move(chat_template);
             o.int8_activations = int8_activations;
             o.device = std::move(device);
             o.device_graphs = device_graphs;
             py::gil_scoped_release release;
             // The engine's destructor joins its scheduler thread, which may be releasing a
             // finished request's Python objects (audit sinks in its config) and so need the GIL:
             // whoever drops the last reference with the GIL held lets go of it first.
             return std::shared_ptr<Engine>(new Engine(std::move(o)), [](Engine* engine) {
               if (PyGILState_Check() != 0) {
                 py::gil_scoped_release unlocked;
                 delete engine;
               } else {
                 delete engine;
               }
             });
           }),
           py::arg("model"), py::arg("threads"), py::arg("ctx"), py::arg("kv_dtype"), py::arg("max_batch_tokens"),
           py::arg("cpu_isa"), py::arg("memory_budget_bytes"), py::arg("deterministic"), py::arg("sinks"),
           py::arg("weights") = "as-stored", py::arg("mmap_weights") = false, py::arg("chat_template") = "",
           py::arg("int8_activations") = true, py::arg("device") = "cpu", py::arg("k_dtype") = py::none(),
           py::arg("v_dtype") = py::none(), py::arg("kv_hadamard") = true, py::arg("serving") = py::dict(),
           py::arg("kv_k_centering") = true, py::arg("kv_recent_window") = 32, py::arg("device_graphs") = true)
      .def("generate",
           [](const Engine& e, const Prompt& prompt, const GenerationConfig& c) { return run(e, prompt, c); })
      .def("apply_chat_template",
           [](const Engine& e, const ChatPrompt& chat) {
             std::string text;
             {
               py::gil_scoped_release release;
               text = e.apply_chat_template(chat.messages, chat.options);
             }
             return utf8(text);
           })
      .def(
          "chat_tokens",
          [](const Engine& e, const ChatPrompt& chat) { return e.chat_tokens(chat.messages, chat.options); },
          py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("has_chat_template", [](const Engine& e) { return e.chat_template() != nullptr; })
      .def("tokenize", &Engine::tokenize, py::arg("text"), py::arg("add_bos") = true,
           py::call_guard<py::gil_scoped_release>())
      .def("detokenize",
           [](const Engine& e, const std::vector<std::int32_t>& tokens) {
             std::string text;
             {
               py::gil_scoped_release release;
               text = e.detokenize(tokens);
             }
             return utf8(text);
           })
      .def("token_bytes", [](const Engine& e, std::int32_t token) { return py::bytes(e.token_bytes(token)); })
      .def(
          "logits",
          [](const Engine& e, const std::vector<std::int32_t>& tokens, bool all_positions) {
            auto values = std::make_unique<std::vector<float>>();
            {
              py::gil_scoped_release release;
              *values = e.logits(tokens, all_positions);
            }
            const auto vocab = static_cast<py::ssize_t>(e.model_info().n_vocab);
            const auto rows = static_cast<py::ssize_t>(values->size()) / vocab;
            float* data = values->data();
            // Zero-copy: the array owns the vector through a capsule.
            py::capsule owner(values.release(), [](void* p) { delete static_cast<std::vector<float>*>(p); });
            return py::array_t<float>(
                {rows, vocab},
                {vocab * static_cast<py::ssize_t>(sizeof(float)), static_cast<py::ssize_t>(sizeof(float))}, data,
                owner);
          },
          py::arg("tokens"), py::arg("all_positions") = true)
      .def("graph_json", &Engine::graph_json, py::call_guard<py::gil_scoped_release>())
      .def("plan_json", [](const Engine& e) { return e.plan().to_json(); })
      .def("queue_stats",
           [](const Engine& e) {
             const RequestQueueStats s = e.queue_stats();
             py::dict d;
             d["requests"] = s.requests;
             d["sessions"] = s.sessions;
             d["queued"] = s.queued;
             d["queued_seconds"] = s.queued_seconds;
             d["in_flight"] = s.in_flight;
             d["peak_in_flight"] = s.peak_in_flight;
             // The serving scheduler (generate, stream, chat) and its KV block pool.
             d["waiting"] = s.waiting;
             d["running"] = s.running;
             d["preempted"] = s.preempted;
             d["submitted"] = s.submitted;
             d["finished"] = s.finished;
             d["rejected"] = s.rejected;
             d["preemptions"] = s.preemptions;
             d["admission_waits"] = s.admission_waits;
             d["steps"] = s.steps;
             d["max_step_sequences"] = s.max_step_sequences;
             d["kv_blocks"] = s.kv_blocks;
             d["kv_blocks_free"] = s.kv_blocks_free;
             d["kv_blocks_cached"] = s.kv_blocks_cached;
             d["prefix_cache_hits"] = s.prefix_cache_hits;
             d["device_graph_captures"] = s.device_graph_captures;
             d["device_graph_replays"] = s.device_graph_replays;
             d["device_prefill_fp8_matmuls"] = s.device_prefill_fp8_matmuls;
             d["device_prefill_bf16_matmuls"] = s.device_prefill_bf16_matmuls;
             d["device_decode_tensor_core_matmuls"] = s.device_decode_tensor_core_matmuls;
             d["device_decode_cuda_core_matmuls"] = s.device_decode_cuda_core_matmuls;
             d["device_prefill_tiled_attentions"] = s.device_prefill_tiled_attentions;
             d["device_prefill_row_attentions"] = s.device_prefill_row_attentions;
             d["device_prefill_fp8_activation_reuses"] = s.device_prefill_fp8_activation_reuses;
             d["device_prefill_fp8_block_matmuls"] = s.device_prefill_fp8_block_matmuls;
             d["max_num_seqs"] = s.limits.max_num_seqs;
             d["max_num_batched_tokens"] = s.limits.max_num_batched_tokens;
             d["kv_block_size"] = s.limits.kv_block_size;
             d["kv_pool_tokens"] = s.limits.kv_pool_tokens;
             d["kv_block_bytes"] = s.kv_block_bytes;
             d["preemption"] = s.limits.preempt_by_swap ? "swap" : "recompute";
             d["prefix_caching"] = s.limits.prefix_caching;
             d["tenant_max_seqs"] = s.limits.tenant_max_seqs;
             d["tenant_max_kv_blocks"] = s.limits.tenant_max_kv_blocks;
             d["reject_over_quota"] = s.limits.reject_over_quota;
             d["prefix_cache_misses"] = s.prefix_cache_misses;
             d["kv_copies"] = s.kv_copies;
             d["step_tokens"] = s.step_tokens;
             return d;
           })
      .def("graph_table", &Engine::graph_table, py::call_guard<py::gil_scoped_release>())
      .def("model_sha256", &Engine::model_sha256, py::call_guard<py::gil_scoped_release>())
      .def("info",
           [](const Engine& e) {
             const ModelInfo& i = e.model_info();
             py::dict d;
             d["path"] = i.path;
             d["architecture"] = i.architecture;
             d["name"] = i.name;
             d["n_vocab"] = i.n_vocab;
             d["n_embd"] = i.n_embd;
             d["n_layer"] = i.n_layer;
             d["n_head"] = i.n_head;
             d["n_head_kv"] = i.n_head_kv;
             d["head_dim"] = i.head_dim;
             d["n_ff"] = i.n_ff;
             d["n_ctx_train"] = i.n_ctx_train;
             d["n_params"] = i.n_params;
             d["weight_bytes"] = i.weight_bytes;
             d["context_length"] = i.context_length;
             d["kv_cache_type"] = i.kv_cache_type;
             d["kv_cache_bytes"] = i.kv_cache_bytes;
             d["k_cache_type"] = i.k_cache_type;
             d["v_cache_type"] = i.v_cache_type;
             d["kv_pool_bytes"] = i.kv_pool_bytes;
             d["kv_pool_tokens"] = i.kv_pool_tokens;
             d["activation_bytes"] = i.activation_bytes;
             d["threads"] = i.threads;
             d["cpu_isa"] = i.cpu_isa;
             d["cpu_weight_prefetch"] = i.cpu_weight_prefetch;
             d["backend"] = i.backend;
             d["device"] = i.device;
             d["device_description"] = i.device_description;
             d["decode_fusion"] = i.decode_fusion;
             d["bos"] = i.bos;
             d["eos"] = i.eos;
             d["add_bos"] = i.add_bos;
             d["weights"] = i.weights;
             d["weights_converted_tensors"] = i.weights_converted_tensors;
             d["weights_kept_tensors"] = i.weights_kept_tensors;
             d["weights_converted_bytes"] = i.weights_converted_bytes;
             d["weights_converted_to_bytes"] = i.weights_converted_to_bytes;
             d["weights_convert_seconds"] = i.weights_convert_seconds;
             d["weights_output_head"] = i.weights_output_head;
             d["weights_mmapped"] = i.weights_mmapped;
             d["weights_repacked_tensors"] = i.weights_repacked_tensors;
             d["weights_copy_seconds"] = i.weights_copy_seconds;
             return d;
           })
      .def_property_readonly("circuit_breaker_open", &Engine::circuit_breaker_open)
      .def("reset_circuit_breaker", &Engine::reset_circuit_breaker);
}

}  // namespace sitsrt::python
