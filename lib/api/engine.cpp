// Engine: loads a model (GGUF file or Hugging Face directory), builds its graph and execution plan, and serves requests.
#include <sitsrt/engine.hpp>
#include <sitsrt/error.hpp>

#include "core/check.hpp"
#include "core/quant_blocks.hpp"
#include "graph/graph_printer.hpp"
#include "model/model_loader.hpp"
#include "model/model_graph.hpp"
#include "model/model_spec.hpp"
#include "model/weight_conversion.hpp"
#include "backend/kv_cache.hpp"
#include "runtime/backend_registry.hpp"
#include "runtime/executor.hpp"
#include "api/chat_template_internal.hpp"
#include "api/kv_centering.hpp"
#include "api/model_pins.hpp"
#include "api/plan_builder.hpp"
#include "api/request_audit.hpp"
#include "api/serving_core.hpp"
#include "audit/hash.hpp"
#include "runtime/generator.hpp"
#include "runtime/session_pool.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/tokenizer.hpp"

#include <sitsrt/version.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <new>
#include <random>
#include <set>

namespace sitsrt {
namespace {

constexpr std::int64_t kDefaultContextCap = 4096;

void validate(const EngineOptions& o) {
  if (o.model_path.empty()) raise(ErrorCode::kInvalidArgument, "model_path is empty");
  if (o.threads > 1024) raise(ErrorCode::kInvalidArgument, "threads = {} is out of range", o.threads);
  if (o.max_batch_tokens < 1 || o.max_batch_tokens > 65536) {
    raise(ErrorCode::kInvalidArgument, "max_batch_tokens = {} is out of range [1, 65536]", o.max_batch_tokens);
  }
  if (o.kv_recent_window < 0 || o.kv_recent_window > 256) {
    raise(ErrorCode::kInvalidArgument, "kv_recent_window = {} is out of range [0, 256]", o.kv_recent_window);
  }
  (void)parse_weight_format(o.weights);  // throws naming the option and its valid values
  for (const auto& rule : o.anomaly_rules) audit::validate_rule(rule);
  for (const auto& sink : o.audit_sinks) {
    if (!sink) raise(ErrorCode::kInvalidArgument, "audit_sinks holds a null sink");
  }
  const ServingOptions& s = o.serving;
  const auto in_range = [](const char* field, std::int64_t v, std::int64_t lo, std::int64_t hi) {
    if (v < lo || v > hi) raise(ErrorCode::kInvalidArgument, "serving.{} = {} is out of range [{}, {}]", field, v, lo, hi);
  };
  in_range("max_num_seqs", s.max_num_seqs, 1, 4096);
  in_range("max_num_batched_tokens", s.max_num_batched_tokens, 0, o.max_batch_tokens);
  in_range("kv_block_size", s.kv_block_size, 1, 4096);
  in_range("kv_pool_tokens", s.kv_pool_tokens, 0, std::int64_t{1} << 30);
  in_range("tenant_max_kv_blocks", s.tenant_max_kv_blocks, 0, std::int64_t{1} << 30);
  in_range("tenant_max_seqs", s.tenant_max_seqs, 0, 4096);
}

ops::KvType kv_type_of(KvCacheType t) {
  switch (t) {
    case KvCacheType::kF32: return ops::KvType::kF32;
    case KvCacheType::kF16: return ops::KvType::kF16;
    case KvCacheType::kInt8: return ops::KvType::kInt8;
    case KvCacheType::kInt4: return ops::KvType::kInt4;
  }
  return ops::KvType::kF16;
}

// K and V types from the options; quantized sides are stored Hadamard-rotated when asked and the
// head size allows (a power of two): rotation spreads outlier channels over the head, lowering
// the quantization error (docs/serving.md has the measurements).
KvCacheLayout kv_layout_for(const EngineOptions& o, const ModelSpec& spec, const BackendInfo& backend) {
  KvCacheLayout l;
  l.n_kv_heads = spec.n_head_kv;
  l.head_dim = spec.head_dim;
  l.k_type = kv_type_of(o.k_cache_type.value_or(o.kv_cache_type));
  l.v_type = kv_type_of(o.v_cache_type.value_or(o.kv_cache_type));
  const bool pow2 = spec.head_dim > 0 && (spec.head_dim & (spec.head_dim - 1)) == 0 && spec.head_dim <= 1024;
  const auto quantized = [](ops::KvType t) { return t == ops::KvType::kInt8 || t == ops::KvType::kInt4; };
  l.k_rotated = o.kv_hadamard && pow2 && quantized(l.k_type);
  l.v_rotated = o.kv_hadamard && pow2 && quantized(l.v_type);
  // A backend without the window's kernels (CUDA) runs without it; the label shows what runs.
  if ((quantized(l.k_type) || quantized(l.v_type)) && backend.exact_recent_window) l.recent_window = o.kv_recent_window;
  return l;
}

// "f16" when K and V are alike, unrotated and uncentered, with no window; else "k=int8,v=int4"
// with "+hadamard" per rotated side, "+centered" for centered K and ",recent=N" for an exact
// recent window.
std::string kv_layout_label(const KvCacheLayout& l) {
  const bool centered = !l.k_offsets.empty();
  if (l.k_type == l.v_type && !l.k_rotated && !l.v_rotated && !centered && l.recent_window == 0) {
    return std::string(ops::name(l.k_type));
  }
  std::string label = fmt::format("k={}{}{},v={}{}", ops::name(l.k_type), l.k_rotated ? "+hadamard" : "",
                                  centered ? "+centered" : "", ops::name(l.v_type), l.v_rotated ? "+hadamard" : "");
  if (l.recent_window > 0) label += fmt::format(",recent={}", l.recent_window);
  return label;
}


// The most prompt bytes one token can stand for, or 0 when there is no such bound. A token is a
// piece (its text as stored is at least as long as the bytes it covers: byte-level BPE pieces map
// each byte to 1-2 bytes, SentencePiece pieces spell a space as 3 bytes), one unknown character
// (<= 4 bytes) or one byte (byte fallback); the normalizers only add bytes (space markers, the
// dummy prefix). A byte-level vocabulary that lacks a byte and has no <unk> drops that byte, so a
// prompt of such bytes tokenizes to nothing: no bound then.
std::uint64_t longest_token_bytes(const Vocabulary& vocab) {
  std::uint64_t longest = 4;
  for (const std::string& piece : vocab.pieces) longest = std::max<std::uint64_t>(longest, piece.size());
  if (vocab.model == "gpt2" && vocab.unk < 0) {
    std::set<std::string_view> mergeable;
    for (std::size_t id = 0; id < vocab.pieces.size(); ++id) {
      const TokenType type = id < vocab.types.size() ? vocab.types[id] : TokenType::kNormal;
      if (type == TokenType::kNormal || type == TokenType::kUndefined) mergeable.insert(vocab.pieces[id]);
    }
    for (int byte = 0; byte < 256; ++byte) {
      if (!mergeable.count(detail::byte_level_char(static_cast<std::uint8_t>(byte)))) return 0;
    }
  }
  return longest;
}

BackendOptions backend_options(const EngineOptions& o) {
  BackendOptions b;
  b.device = o.device;
  b.threads = o.threads;
  b.cpu_isa = o.cpu_isa;
  b.budget_bytes = o.memory_budget_bytes;
  b.int8_activations = o.int8_activations;
  b.resident_weights = !o.mmap_weights;
  b.decode_fusion = o.decode_fusion;
  b.device_graphs = o.device_graphs;
  b.batch_invariant = o.deterministic && o.deterministic_batching;
  return b;
}

std::string random_id_prefix() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

}  // namespace

struct Engine::Impl {
  // `stage` says what the load is doing (an out-of-memory error names it).
  Impl(EngineOptions o, std::string& stage)
      : options(std::move(o)),
        pins(options.model_path, is_hf_model_directory(options.model_path)),  // before anything is read
        model(load_model(options.model_path)),
        spec(model.spec),
        backend(make_backend(backend_options(options))) {
    stage = "reading the tokenizer";
    // An HF directory (or a GGUF converted from one) has no GGUF vocabulary; until tokenizer.json
    // is read it serves token ids only (logits), and everything that needs a tokenizer says so.
    if (model.gguf && model.gguf->find("tokenizer.ggml.tokens") != nullptr) {
      tokenizer = make_tokenizer(read_vocabulary(*model.gguf), options.model_path);
    } else if (model.hf && std::filesystem::exists(std::filesystem::path(options.model_path) / "tokenizer.json")) {
      tokenizer = load_tokenizer(options.model_path);  // tokenizer.json (+ tokenizer_config.json)
    }
    if (tokenizer && tokenizer->vocab().size() != spec.n_vocab) {
      raise(ErrorCode::kInvalidModel, "{}: vocabulary has {} tokens but the model expects {}", options.model_path,
            tokenizer->vocab().size(), spec.n_vocab);
    }
    load_chat_template();
    if (tokenizer) max_token_bytes = longest_token_bytes(tokenizer->vocab());
    const std::int64_t requested = options.context_length;
    if (requested > spec.n_ctx_train * 16) {
      raise(ErrorCode::kInvalidArgument, "context_length {} is far beyond the training context {}", requested,
            spec.n_ctx_train);
    }
    context_length = requested > 0 ? requested : std::min(spec.n_ctx_train, kDefaultContextCap);
    const DType kv_type = options.kv_cache_type == KvCacheType::kF32 ? DType::kF32 : DType::kF16;  // graph costs
    kv_layout = kv_layout_for(options, spec, backend->info());
    ModelGraphOptions graph_options;
    graph_options.kv_type = kv_type;
    if (options.rope_style != RopeStyleOption::kAuto) graph_options.rope_neox = options.rope_style == RopeStyleOption::kNeox;
    stage = "building the graph";
    graph = build_model_graph(spec, model.tensors, graph_options);
    const std::int64_t max_tokens = std::min(options.max_batch_tokens, context_length);
    plan.memory = graph::plan_memory(graph, max_tokens, max_tokens);
    const std::optional<WeightFormat> target = parse_weight_format(options.weights);
    check_budget(target ? weight_bytes_after_conversion(graph, *target) : graph.total_weight_bytes(),
                 ContiguousKvCache::bytes_for(spec.n_layer, context_length, kv_layout));
    if (target) {
      stage = fmt::format("converting the weights to {} ({:.1f} MiB)", options.weights,
                          static_cast<double>(weight_bytes_after_conversion(graph, *target)) / (1 << 20));
      ThreadPool pool(options.threads);  // host threads for the conversion, gone before the backend computes
      converted = std::make_unique<ConvertedWeightSource>(graph, model.tensors, *target, pool);
    }

    plan.graph = &graph;
    plan.backend = backend.get();
    plan.n_layers = spec.n_layer;
    plan.kv_width = spec.n_head_kv * spec.head_dim;
    plan.kv_layout = kv_layout;
    plan.context_length = context_length;
    plan.n_vocab = spec.n_vocab;
    plan.step_mutex = &step_mutex;
    if (options.profile_ops) {
      profile = std::make_unique<StepProfile>(graph);
      plan.profile = profile.get();
    }

    std::function<void(double)> progress;
    if (options.on_progress) progress = [this](double f) { options.on_progress("load", f); };
    if (!options.mmap_weights) {
      stage = fmt::format("copying the weights into memory ({:.1f} MiB)",
                          static_cast<double>(graph.total_weight_bytes()) / (1 << 20));
    }
    bind_report = backend->bind_weights(graph, weight_source(), progress);
    // Resident weights may take a little more than the file (rows padded to cache lines).
    check_budget(backend->memory().weight_bytes,
                 ContiguousKvCache::bytes_for(spec.n_layer, context_length, kv_layout));
    stage = fmt::format("allocating the activation arena ({:.1f} MiB)",
                        static_cast<double>(plan.memory.arena_bytes) / (1 << 20));
    backend->prepare(graph, plan.memory, context_length);
    if (tokenizer && options.kv_k_centering &&
        (kv_layout.k_type == ops::KvType::kInt8 || kv_layout.k_type == ops::KvType::kInt4)) {
      stage = "measuring the K centering offsets";
      center_keys();
    }
    stage = "finishing the load";
    if (options.mmap_weights) prefault();  // resident weights were all touched by the copy
    fill_info();
    if (tokenizer) start_serving();
    device_plan = build_single_device_plan(graph, info, options.memory_budget_bytes, backend->memory().weight_bytes);
    fill_digest();
    // Everything is read (config, tokenizer, the weights copied): it must be what the pinned
    // files hold, or no audit record could name the weights in use.
    pins.confirm(model.weight_files);
  }

  // The template given in the options must parse (the load fails otherwise); the model's own is
  // parsed too, but a model whose template uses something unsupported still loads and serves
  // plain prompts: chat() then reports why it cannot render.
  void load_chat_template() {
    if (!options.chat_template.empty()) {
      const auto token = [&](std::int32_t id) {
        return tokenizer ? detail::special_token_text(tokenizer->vocab(), id) : std::string();
      };
      chat = std::make_unique<ChatTemplate>(options.chat_template, "EngineOptions::chat_template",
                                            token(tokenizer ? tokenizer->vocab().bos : -1),
                                            token(tokenizer ? tokenizer->vocab().eos : -1));
      return;
    }
    try {
      if (model.hf) {  // tokenizer_config.json (or chat_template.jinja) with its own token texts
        chat = std::make_unique<ChatTemplate>(sitsrt::load_chat_template(options.model_path));
      } else if (tokenizer && !tokenizer->vocab().chat_template.empty()) {
        const Vocabulary& vocab = tokenizer->vocab();
        chat = std::make_unique<ChatTemplate>(vocab.chat_template, options.model_path + ": tokenizer.chat_template",
                                              detail::special_token_text(vocab, vocab.bos),
                                              detail::special_token_text(vocab, vocab.eos));
      }
    } catch (const Error& e) {
      chat_error = e.what();
      chat_error_code = e.code();
    }
  }

  const ChatTemplate& chat_template() const {
    if (chat) return *chat;
    if (!chat_error.empty()) raise(chat_error_code, "{}", chat_error);
    raise(ErrorCode::kUnsupported,
          "{}: the model has no chat template (GGUF tokenizer.chat_template / tokenizer_config.json chat_template); "
          "pass one (EngineOptions::chat_template, sitsrt --chat-template-file) or use a plain prompt",
          options.model_path);
  }

  // Refuses, before any weight page is touched or converted, a budget that cannot hold the
  // weights plus one request (its KV cache and activation arena).
  void check_budget(std::uint64_t weight_bytes, std::uint64_t kv_bytes) const {
    const std::uint64_t budget = options.memory_budget_bytes;
    const std::uint64_t needed = weight_bytes + kv_bytes + plan.memory.arena_bytes;
    if (budget == 0 || needed <= budget) return;
    constexpr double kMiB = 1 << 20;
    raise(ErrorCode::kOutOfMemory,
          "{}: memory_budget_bytes {} ({:.1f} MiB) cannot hold the model: it needs {:.1f} MiB (weights {:.1f} MiB {}, "
          "one request's KV cache {:.1f} MiB for {} positions, activations {:.1f} MiB): {:.1f} MiB short",
          options.model_path, budget, static_cast<double>(budget) / kMiB, static_cast<double>(needed) / kMiB,
          static_cast<double>(weight_bytes) / kMiB,
          parse_weight_format(options.weights) ? "as " + options.weights : std::string("as stored"),
          static_cast<double>(kv_bytes) / kMiB, context_length, static_cast<double>(plan.memory.arena_bytes) / kMiB,
          static_cast<double>(needed - budget) / kMiB);
  }

  [[nodiscard]] const graph::WeightSource& weight_source() const {
    if (converted) return *converted;
    return model.tensors;
  }

  void fill_digest() {
    std::map<DType, std::uint64_t> bytes_by_type;
    for (const graph::Weight& w : graph.weights()) bytes_by_type[w.type] += w.bytes;
    const auto most = std::max_element(bytes_by_type.begin(), bytes_by_type.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    digest.library_version = kVersion;
    digest.weights_format = most == bytes_by_type.end() ? "none" : std::string(name(most->first));
    digest.weights_conversion = options.weights.empty() ? "as-stored" : options.weights;
    digest.weights_placement = options.mmap_weights ? "mmap" : "resident";
    digest.kv_cache_type = info.kv_cache_type;
    digest.cpu_isa = info.cpu_isa;
    digest.activations = info.int8_activations ? "int8" : "f32";
    digest.threads = info.threads;
    digest.max_batch_tokens = options.max_batch_tokens;
    digest.context_length = context_length;
    digest.deterministic = options.deterministic;
    digest.batch_invariant = options.deterministic && options.deterministic_batching;
  }

  // From the pinned files (the inodes the weights came from), on first use; a file changed since
  // it was pinned makes it throw (and the next call try again).
  const std::string& model_hash() const {
    std::call_once(hash_once, [&] {
      std::function<void(double)> progress;
      constexpr std::uint64_t kReportAbove = std::uint64_t{64} << 20;
      if (options.on_progress && pins.total_bytes() >= kReportAbove) {
        progress = [&](double f) { options.on_progress("hash", f); };
      }
      model_sha256 = pins.sha256(progress);
    });
    return model_sha256;
  }

  // Mmapped weights are read from the file during every request: refuse one that changed since
  // the load (a truncated file would otherwise end the process with SIGBUS). Resident weights
  // were copied at load and need no check.
  void check_weights() const {
    if (options.mmap_weights) pins.check_weights_unchanged();
  }

  void prefault() {
    constexpr std::uint64_t kReportAbove = std::uint64_t{64} << 20;  // small files load instantly
    if (!options.on_progress || graph.total_weight_bytes() < kReportAbove) return;
    // Touch every weight page once so the first request does not pay for page faults, and
    // report progress while doing it (large files take seconds from a cold page cache).
    std::uint64_t total = graph.total_weight_bytes(), done = 0;
    volatile unsigned char sink = 0;
    for (const graph::Weight& w : graph.weights()) {
      const auto data = weight_source().data(w);
      for (std::size_t off = 0; off < data.size(); off += 4096) sink = sink ^ static_cast<unsigned char>(data[off]);
      done += data.size();
      options.on_progress("load", total ? static_cast<double>(done) / static_cast<double>(total) : 1.0);
    }
  }

  void fill_info() {
    info.path = options.model_path;
    info.architecture = spec.architecture;
    info.name = spec.name;
    info.n_vocab = spec.n_vocab;
    info.n_embd = spec.n_embd;
    info.n_layer = spec.n_layer;
    info.n_head = spec.n_head;
    info.n_head_kv = spec.n_head_kv;
    info.head_dim = spec.head_dim;
    info.n_ff = spec.n_ff;
    info.n_ctx_train = spec.n_ctx_train;
    for (const auto& t : model.tensors.tensors()) info.n_params += t.elements();
    info.weight_bytes = graph.total_weight_bytes();
    // A decode step reads every weight once, except the embedding table, of which it reads one
    // row (unless the table doubles as the output head).
    std::vector<bool> used_by_compute(graph.weights().size(), false);
    for (const graph::Node& node : graph.nodes()) {
      if (node.op == graph::OpKind::kEmbed) continue;
      for (graph::WeightId w : node.weights) used_by_compute[static_cast<std::size_t>(w)] = true;
    }
    for (std::size_t w = 0; w < graph.weights().size(); ++w) {
      const graph::Weight& weight = graph.weights()[w];
      info.weight_bytes_per_token +=
          used_by_compute[w] ? weight.bytes : weight.bytes / static_cast<std::uint64_t>(weight.dims.back());
    }
    info.context_length = context_length;
    info.kv_cache_type = kv_layout_label(kv_layout);
    info.kv_cache_bytes = ContiguousKvCache::bytes_for(spec.n_layer, context_length, kv_layout);
    info.activation_bytes = plan.memory.arena_bytes;
    const BackendInfo& device = backend->info();
    info.backend = device.name;
    info.device = device_name(device.device);
    info.device_description = device.description;
    info.threads = device.threads;
    info.cpu_isa = device.isa;
    info.cpu_weight_prefetch = device.weight_prefetch;
    info.int8_activations = device.int8_activations;
    info.decode_fusion = device.decode_fusion;
    info.weights_mmapped = options.mmap_weights;
    info.weights_repacked_tensors = bind_report.repacked_tensors;
    info.weights_copy_seconds = bind_report.copy_seconds;
    info.weights = options.weights.empty() ? "as-stored" : options.weights;
    if (converted) {
      const WeightConversionReport& r = converted->report();
      info.weights_converted_tensors = r.tensors_converted;
      info.weights_kept_tensors = r.tensors_kept;
      info.weights_converted_bytes = r.bytes_read;
      info.weights_converted_to_bytes = r.bytes_written;
      info.weights_convert_seconds = r.seconds;
      if (r.output_head_type) info.weights_output_head = std::string(name(*r.output_head_type));
    }
    if (tokenizer) {
      info.bos = tokenizer->vocab().bos;
      info.eos = tokenizer->vocab().eos;
      info.add_bos = tokenizer->vocab().add_bos && info.bos >= 0;
    }
  }

  // Measures the K centering offsets and channel scales on the built-in text (kv_centering.hpp)
  // and puts them in the layout every cache of this engine is made from.
  void center_keys() {
    std::vector<std::int32_t> tokens = tokenizer->encode(kv_centering_text(), true);
    tokens.resize(std::min<std::size_t>({tokens.size(), kKvCenteringTokens, static_cast<std::size_t>(context_length)}));
    if (tokens.size() < 2) return;  // nothing to measure on: the keys stay as they are
    const bool neox = options.rope_style == RopeStyleOption::kAuto ? spec.rope_neox
                                                                   : options.rope_style == RopeStyleOption::kNeox;
    KCentering measured =
        measure_k_centering(plan, tokens, kv_centering_mask(spec, neox, context_length), kv_rope_mates(spec, neox));
    k_offsets = std::move(measured.offsets);
    k_scales = std::move(measured.scales);
    kv_layout.k_offsets = k_offsets;
    kv_layout.k_scales = k_scales;
    plan.kv_layout = kv_layout;
  }

  // The KV block pool and the scheduler (generate, chat, submit), sized from ServingOptions.
  void start_serving() {
    ServingOptions s = options.serving;
    if (s.max_num_batched_tokens == 0) s.max_num_batched_tokens = plan.memory.max_tokens;
    s.max_num_batched_tokens = std::min(s.max_num_batched_tokens, plan.memory.max_tokens);
    KvGeometry g;
    g.n_layers = spec.n_layer;
    g.n_kv_heads = spec.n_head_kv;
    g.head_dim = spec.head_dim;
    g.k_type = kv_layout.k_type;
    g.v_type = kv_layout.v_type;
    g.k_rotated = kv_layout.k_rotated;
    g.v_rotated = kv_layout.v_rotated;
    g.k_offsets = kv_layout.k_offsets;
    g.k_scales = kv_layout.k_scales;
    g.recent_window = kv_layout.recent_window;
    g.block_size = s.kv_block_size;
    g.head_major = backend->info().head_major_kv;
    // Positions adopted from the prefix cache are read quantized even inside a window, so hits
    // would change a deterministic request's bits (KvLayerRef::exact_from).
    if (options.deterministic && g.window().active()) s.prefix_caching = false;
    if (s.kv_pool_tokens == 0) {
      // Two whole contexts, or what a memory budget leaves after the weights and the
      // scheduler's activation arena (at least one context: then the allocation names the deficit).
      s.kv_pool_tokens = 2 * context_length;
      const std::uint64_t budget = options.memory_budget_bytes;
      const MemoryUsage used = backend->memory();
      // Each running sequence's exact window is allocated apart from the pool.
      const std::uint64_t taken = used.weight_bytes + used.allocated_bytes + plan.memory.arena_bytes +
                                  static_cast<std::uint64_t>(s.max_num_seqs) * g.window().bytes();
      if (budget > taken) {
        const auto fits = static_cast<std::int64_t>((budget - taken) / g.block_bytes()) * g.block_size;
        s.kv_pool_tokens = std::max(context_length, std::min(s.kv_pool_tokens, fits));
      }
    }
    if (s.kv_pool_tokens < context_length) {
      raise(ErrorCode::kInvalidArgument, "serving.kv_pool_tokens = {} is below the context length {} (one request of "
            "the whole context must fit)", s.kv_pool_tokens, context_length);
    }
    serving = std::make_unique<ServingCore>(plan, *tokenizer, *backend, g, s);
    info.kv_pool_bytes = ServingCore::pool_bytes(g, s);
    info.kv_pool_tokens = s.kv_pool_tokens;
    info.k_cache_type = std::string(ops::name(g.k_type));
    info.v_cache_type = std::string(ops::name(g.v_type));
  }

  // Sessions (KV cache + activation arena) are reused across requests: allocated once per
  // concurrent request, never per token; when the budget is full, requests queue for them.
  template <typename F>
  auto with_session(F&& f) const {
    const auto lease = [&] {
      try {
        return sessions.acquire();
      } catch (const std::bad_alloc&) {
        raise(ErrorCode::kOutOfMemory,
              "{}: out of memory allocating a request's session (KV cache {:.1f} MiB for {} positions, activations "
              "{:.1f} MiB)",
              options.model_path, static_cast<double>(info.kv_cache_bytes) / (1 << 20), context_length,
              static_cast<double>(info.activation_bytes) / (1 << 20));
      }
    }();
    return f(*lease);
  }

  // Generation, with a model that produces no finite logits reported with its file and the first
  // non-finite weight (found only then: every weight is dequantized once).
  GenerationResult generate(std::span<const std::int32_t> prompt, const GenerationConfig& config,
                            const TokenCallback& on_token, const std::string& id) const {
    try {
      (void)tok();
      return serving->generate(prompt, config, on_token, id);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kInvalidModel) throw;
      raise(ErrorCode::kInvalidModel, "{}: {}; {}", options.model_path, e.what(), first_non_finite_weight());
    }
  }

  std::string first_non_finite_weight() const {
    std::vector<float> row;
    for (const graph::Weight& w : graph.weights()) {
      const std::int64_t cols = w.dims.empty() ? 0 : w.dims[0];
      const std::size_t stride = cols > 0 ? row_bytes(w.type, cols) : 0;
      if (stride == 0) continue;
      const std::span<const std::byte> data = model.tensors.data(w);
      row.resize(static_cast<std::size_t>(cols));
      for (std::size_t r = 0; (r + 1) * stride <= data.size(); ++r) {
        try {
          dequantize_row(w.type, data.data() + r * stride, row.data(), cols);
        } catch (const Error&) {
          break;  // a format without a float decoder: not searched
        }
        for (std::size_t c = 0; c < row.size(); ++c) {
          if (!std::isfinite(row[c])) {
            return fmt::format("tensor '{}' holds {} (row {}, column {})", w.name,
                               std::isnan(row[c]) ? "NaN" : "an infinity", r, c);
          }
        }
      }
    }
    return "every weight is finite, so the activations overflow";
  }

  // Refuses, before tokenizing it, a prompt too long to fit however it tokenizes: every token
  // covers at most max_token_bytes bytes of the prompt, so more than context_length x that many
  // bytes make more tokens than the context holds. A prompt that fits is never refused here.
  void check_prompt_bytes(std::string_view prompt) const {
    if (max_token_bytes == 0) return;
    const auto bound = static_cast<std::uint64_t>(context_length) * max_token_bytes;
    if (prompt.size() <= bound) return;
    raise(ErrorCode::kInvalidArgument,
          "prompt of {} bytes does not fit the context length {} (a token of this vocabulary covers at most {} bytes, "
          "so it needs more than {} tokens; refused before tokenizing)",
          prompt.size(), context_length, max_token_bytes, context_length);
  }

  EngineOptions options;
  ModelPins pins;  // the model's files, opened before the loader reads them
  const Tokenizer& tok() const {
    if (!tokenizer) {
      raise(ErrorCode::kUnsupported,
            "{}: the model has no tokenizer (no GGUF vocabulary, and no tokenizer.json beside the Hugging Face "
            "checkpoint); only token-id logits (sitsrt logits --tokens) and inspection (info, graph) work",
            options.model_path);
    }
    return *tokenizer;
  }

  LoadedModel model;
  ModelSpec spec;
  std::unique_ptr<const Tokenizer> tokenizer;  // SentencePiece or BPE; null: the model has none
  std::unique_ptr<const ChatTemplate> chat;     // null: none, or the model's did not parse (chat_error)
  std::string chat_error;
  ErrorCode chat_error_code = ErrorCode::kUnsupported;
  std::unique_ptr<Backend> backend;  // from the registry (EngineOptions::device)
  WeightBindReport bind_report;
  graph::Graph graph;
  std::unique_ptr<ConvertedWeightSource> converted;  // EngineOptions::weights != "as-stored"
  ExecutionPlan plan;
  std::int64_t context_length = 0;
  std::uint64_t max_token_bytes = 0;  // of prompt text one token covers at most; 0: no bound known
  std::mutex step_mutex;
  std::unique_ptr<StepProfile> profile;  // EngineOptions::profile_ops
  std::unique_ptr<ServingCore> serving;  // null without a tokenizer
  KvCacheLayout kv_layout;
  std::vector<float> k_offsets;  // kv_layout.k_offsets' storage (empty: K not centered)
  std::vector<float> k_scales;   // kv_layout.k_scales' storage
  mutable SessionPool<Session> sessions{[this] { return std::make_unique<Session>(plan); }};
  ModelInfo info;
  DevicePlan device_plan;
  EngineDigest digest;
  mutable std::once_flag hash_once;
  mutable std::string model_sha256;
  mutable std::atomic<bool> breaker{false};
  mutable std::atomic<std::uint64_t> requests{0};
  std::string id_prefix = random_id_prefix();

  // What every generation entry point does first: the config validated, the breaker and the
  // weights checked, a new request id with the engine's and the request's sinks and rules.
  std::shared_ptr<RequestAudit> open_request(const GenerationConfig& config) const {
    validate(config);  // before anything is recorded
    if (breaker.load()) {
      raise(ErrorCode::kRejected, "the engine's circuit breaker is open (an anomaly rule tripped); reset it first");
    }
    check_weights();
    std::vector<std::shared_ptr<AuditSink>> sinks = options.audit_sinks;
    for (const auto& s : config.audit.sinks) {
      if (!s) raise(ErrorCode::kInvalidArgument, "audit.sinks holds a null sink");
      sinks.push_back(s);
    }
    std::vector<AnomalyRule> rules = options.anomaly_rules;
    rules.insert(rules.end(), config.audit.rules.begin(), config.audit.rules.end());
    const std::string id = fmt::format("{}-{:06d}", id_prefix, ++requests);
    return std::make_shared<RequestAudit>(std::move(sinks), std::move(rules), options.on_anomaly, breaker, id);
  }
};

const char* to_string(KvCacheType type) noexcept {
  switch (type) {
    case KvCacheType::kF32: return "f32";
    case KvCacheType::kF16: return "f16";
    case KvCacheType::kInt8: return "int8";
    case KvCacheType::kInt4: return "int4";
  }
  return "unknown";
}

std::vector<BackendSummary> available_backends() {
  std::vector<BackendSummary> out;
  for (const RegisteredBackend& b : registered_backends()) out.push_back({std::string(b.name), std::string(b.summary)});
  return out;
}

Engine::Engine(EngineOptions options) {
  validate(options);
  const std::string path = options.model_path;
  std::string stage = "reading the model";
  try {
    impl_ = std::make_unique<Impl>(std::move(options), stage);
  } catch (const std::bad_alloc&) {  // e.g. under ulimit -v: name what could not be allocated
    raise(ErrorCode::kOutOfMemory, "{}: out of memory while {} (an allocation failed)", path, stage);
  }
}
Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

namespace {

std::int64_t unix_time_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

SamplingRecord sampling_record(const GenerationConfig& c) {
  return {c.temperature, c.top_k, c.top_p, c.min_p, c.repeat_penalty, c.repeat_last_n, c.seed.value_or(0),
          c.max_new_tokens, c.top_logprobs, c.stop, c.stop_at_end_of_sequence};
}

}  // namespace

GenerationResult Engine::generate(std::string_view prompt, const GenerationConfig& config,
                                  const TokenCallback& on_token) const {
  const bool add_bos = config.add_bos.value_or(impl_->tok().vocab().add_bos);
  impl_->check_prompt_bytes(prompt);
  std::vector<std::int32_t> tokens;
  try {
    tokens = impl_->tok().encode(prompt, add_bos);
  } catch (const std::bad_alloc&) {
    raise(ErrorCode::kOutOfMemory, "out of memory tokenizing a prompt of {} bytes", prompt.size());
  }
  return run_request(prompt, tokens, config, on_token);
}

GenerationResult Engine::generate_from_tokens(std::span<const std::int32_t> prompt_tokens,
                                              const GenerationConfig& config, const TokenCallback& on_token) const {
  return run_request({}, prompt_tokens, config, on_token);
}

struct Engine::ChatInput {
  std::string rendered;  // the prompt text
  std::vector<std::int32_t> tokens;
  std::string messages_json;
  std::string template_sha256;
  bool add_generation_prompt = false;
};

namespace {

// The messages as an OpenAI-style JSON array (extra_json's fields merged in), for the audit record.
std::string messages_json(std::span<const ChatMessage> messages) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < messages.size(); ++i) {
    nlohmann::ordered_json m{{"role", messages[i].role}, {"content", messages[i].content}};
    if (!messages[i].extra_json.empty()) {
      const auto extra = nlohmann::ordered_json::parse(messages[i].extra_json, nullptr, /*allow_exceptions=*/false);
      if (!extra.is_object()) {
        raise(ErrorCode::kInvalidArgument, "messages[{}].extra_json is not a JSON object", i);
      }
      for (const auto& [key, value] : extra.items()) m[key] = value;
    }
    list.push_back(std::move(m));
  }
  return list.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

std::string Engine::apply_chat_template(std::span<const ChatMessage> messages,
                                        const ChatTemplateOptions& options) const {
  return impl_->chat_template().render(messages, options);
}

std::string Engine::apply_chat_template(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  ChatTemplateOptions options;
  options.add_generation_prompt = add_generation_prompt;
  return apply_chat_template(messages, options);
}

const ChatTemplate* Engine::chat_template() const noexcept { return impl_->chat.get(); }

namespace {

// Special tokens in the rendering (<|im_start|>, <start_of_turn>, ...) are single ids; BOS is
// added as the model's metadata says unless the template already wrote it.
std::vector<std::int32_t> encode_chat(const Tokenizer& tokenizer, std::string_view rendered, std::optional<bool> add_bos) {
  const Vocabulary& vocab = tokenizer.vocab();
  const bool template_wrote_bos = vocab.bos >= 0 && !vocab.pieces[vocab.bos].empty() &&
                                  rendered.starts_with(vocab.pieces[vocab.bos]);
  return tokenizer.encode(rendered, add_bos.value_or(vocab.add_bos && !template_wrote_bos), /*parse_special=*/true);
}

}  // namespace

std::vector<std::int32_t> Engine::chat_tokens(std::span<const ChatMessage> messages,
                                              const ChatTemplateOptions& options) const {
  return encode_chat(impl_->tok(), apply_chat_template(messages, options), std::nullopt);
}

Engine::ChatInput Engine::prepare_chat(std::span<const ChatMessage> messages, const ChatTemplateOptions& options,
                                       const GenerationConfig& config) const {
  const ChatTemplate& chat_template = impl_->chat_template();
  ChatInput input;
  input.rendered = chat_template.render(messages, options);
  impl_->check_prompt_bytes(input.rendered);
  input.tokens = encode_chat(impl_->tok(), input.rendered, config.add_bos);
  input.messages_json = messages_json(messages);
  input.template_sha256 = audit::sha256_hex(chat_template.source());
  input.add_generation_prompt = options.add_generation_prompt;
  return input;
}

GenerationResult Engine::chat(std::span<const ChatMessage> messages, const GenerationConfig& config,
                              const TokenCallback& on_token, const ChatTemplateOptions& options) const {
  const ChatInput input = prepare_chat(messages, options, config);
  return run_request(input.rendered, input.tokens, config, on_token, &input);
}

namespace {

RequestRecord request_record(const Engine& engine, const std::string& id, const GenerationConfig& resolved,
                             std::string_view prompt_text, std::span<const std::int32_t> prompt_tokens) {
  RequestRecord record;
  record.request_id = id;
  record.unix_time_ns = unix_time_ns();
  record.model_path = engine.model_info().path;
  record.model_sha256 = engine.model_sha256();
  record.engine = engine.engine_digest();
  record.sampling = sampling_record(resolved);
  record.level = resolved.audit.level;
  record.input_sha256 = audit::sha256_hex(prompt_text);
  record.input_tokens_sha256 = audit::sha256_hex(prompt_tokens);
  record.input_tokens.assign(prompt_tokens.begin(), prompt_tokens.end());
  record.metadata = resolved.audit.metadata;
  return record;
}

// An audited request's seed is resolved before its begin record, so that the record carries it.
GenerationConfig audited_config(const RequestAudit& audit, const GenerationConfig& config) {
  GenerationConfig resolved = config;
  if (audit.active() && !resolved.seed) {
    resolved.seed = (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }
  return resolved;
}

}  // namespace


RequestHandle Engine::submit(std::string_view prompt, const GenerationConfig& config, SubmitOptions options) const {
  const bool add_bos = config.add_bos.value_or(impl_->tok().vocab().add_bos);
  impl_->check_prompt_bytes(prompt);
  const std::vector<std::int32_t> tokens = impl_->tok().encode(prompt, add_bos);
  return submit_request(prompt, tokens, config, std::move(options));
}

RequestHandle Engine::submit_tokens(std::span<const std::int32_t> prompt_tokens, const GenerationConfig& config,
                                    SubmitOptions options) const {
  return submit_request({}, prompt_tokens, config, std::move(options));
}

RequestHandle Engine::submit_chat(std::span<const ChatMessage> messages, const GenerationConfig& config,
                                  SubmitOptions options, const ChatTemplateOptions& template_options) const {
  const ChatInput input = prepare_chat(messages, template_options, config);
  return submit_request(input.rendered, input.tokens, config, std::move(options), &input);
}

RequestHandle Engine::submit_request(std::string_view prompt_text, std::span<const std::int32_t> prompt_tokens,
                                     const GenerationConfig& config, SubmitOptions options,
                                     const ChatInput* chat) const {
  const std::shared_ptr<RequestAudit> audit = impl_->open_request(config);
  (void)impl_->tok();
  const GenerationConfig resolved = audited_config(*audit, config);
  RequestHooks hooks;
  if (audit->active()) {
    RequestRecord record = request_record(*this, audit->request_id(), resolved, prompt_text, prompt_tokens);
    if (chat != nullptr) {
      record.chat_messages_json = chat->messages_json;
      record.chat_template_sha256 = chat->template_sha256;
      record.chat_add_generation_prompt = chat->add_generation_prompt;
    }
    audit->begin(record);
    // On the scheduler thread, in token order; the end record when the request ends.
    hooks.observe = [audit](const TokenEvent& e) { return audit->on_token(e); };
    hooks.on_end = [audit](GenerationResult& r) { audit->end(r); };
    hooks.on_error = [audit](const std::exception_ptr& error) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        audit->end_with_error(e.what());
      } catch (...) {
        audit->end_with_error("unknown error");
      }
    };
  }
  try {
    return impl_->serving->submit(prompt_tokens, resolved, std::move(options), std::move(hooks), audit->request_id());
  } catch (const std::exception& e) {
    if (audit->active()) audit->end_with_error(e.what());
    throw;
  }
}

GenerationResult Engine::run_request(std::string_view prompt_text, std::span<const std::int32_t> prompt_tokens,
                                     const GenerationConfig& config, const TokenCallback& on_token,
                                     const ChatInput* chat) const {
  const std::shared_ptr<RequestAudit> audit = impl_->open_request(config);
  const std::string& id = audit->request_id();
  if (!audit->active()) return impl_->generate(prompt_tokens, config, on_token, id);
  const GenerationConfig resolved = audited_config(*audit, config);
  RequestRecord record = request_record(*this, id, resolved, prompt_text, prompt_tokens);
  if (chat != nullptr) {
    record.chat_messages_json = chat->messages_json;
    record.chat_template_sha256 = chat->template_sha256;
    record.chat_add_generation_prompt = chat->add_generation_prompt;
  }
  audit->begin(record);
  const TokenCallback hooked = [&](const TokenEvent& e) {
    const bool audit_keep = audit->on_token(e);
    const bool caller_keep = on_token ? on_token(e) : true;
    return audit_keep && caller_keep;
  };
  try {
    GenerationResult result = impl_->generate(prompt_tokens, resolved, hooked, id);
    audit->end(result);
    return result;
  } catch (const std::exception& e) {
    audit->end_with_error(e.what());
    throw;
  }
}

const std::string& Engine::model_sha256() const { return impl_->model_hash(); }
EngineDigest Engine::engine_digest() const { return impl_->digest; }
bool Engine::circuit_breaker_open() const noexcept { return impl_->breaker.load(); }
void Engine::reset_circuit_breaker() const noexcept { impl_->breaker.store(false); }
void Engine::open_circuit_breaker() const noexcept { impl_->breaker.store(true); }

std::vector<float> Engine::logits(std::span<const std::int32_t> tokens, bool all_positions) const {
  impl_->check_weights();
  return impl_->with_session([&](Session& s) {
    s.reset();
    const auto out = s.forward(tokens, all_positions);
    return std::vector<float>(out.begin(), out.end());
  });
}

void Engine::evaluate(std::span<const std::int32_t> tokens, const EvaluateOptions& options,
                      const LogitsCallback& on_logits) const {
  if (!on_logits) raise(ErrorCode::kInvalidArgument, "evaluate: on_logits is empty");
  impl_->check_weights();
  const auto vocab = static_cast<std::size_t>(impl_->spec.n_vocab);
  impl_->with_session([&](Session& s) {
    s.reset();
    s.score(tokens, options.first_scored, options.decode_scored, [&](std::int64_t first, std::span<const float> rows) {
      for (std::size_t r = 0; r * vocab < rows.size(); ++r) {
        on_logits(first + static_cast<std::int64_t>(r), rows.subspan(r * vocab, vocab));
      }
    });
  });
}

std::vector<std::int32_t> Engine::tokenize(std::string_view text, bool add_bos) const {
  return impl_->tok().encode(text, add_bos);
}

std::string Engine::detokenize(std::span<const std::int32_t> tokens) const {
  // A sequence that starts with BOS was encoded from text with the dummy-prefix space: drop it
  // so detokenize(tokenize(text)) == text.
  const bool from_text = !tokens.empty() && tokens.front() == impl_->tok().vocab().bos;
  return impl_->tok().decode(tokens, from_text);
}

std::string Engine::token_bytes(std::int32_t token) const { return impl_->tok().token_bytes(token); }

const ModelInfo& Engine::model_info() const noexcept { return impl_->info; }

const DevicePlan& Engine::plan() const noexcept { return impl_->device_plan; }
OpProfile Engine::op_profile() const {
  OpProfile out;
  if (!impl_->profile) return out;
  std::lock_guard lock(impl_->step_mutex);
  const StepProfile& p = *impl_->profile;
  for (const bool decode : {true, false}) {
    const StepProfile::Side& side = p.side(decode);
    StepTimes& t = decode ? out.decode : out.prefill;
    t.steps = side.steps;
    t.tokens = side.tokens;
    t.seconds = side.seconds;
    for (std::size_t i = 0; i < p.labels().size(); ++i) {
      if (side.entries[i].calls > 0) t.ops.push_back({p.labels()[i], side.entries[i].calls, side.entries[i].seconds});
    }
    std::sort(t.ops.begin(), t.ops.end(), [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  }
  return out;
}

void Engine::reset_op_profile() const {
  if (!impl_->profile) return;
  std::lock_guard lock(impl_->step_mutex);
  impl_->profile->reset();
}

RequestQueueStats Engine::queue_stats() const {
  const SessionPoolStats s = impl_->sessions.stats();
  RequestQueueStats out;
  if (impl_->serving) impl_->serving->fill(out);
  out.requests = s.leases;
  out.sessions = s.created;
  out.queued = s.queued;
  out.queued_seconds = s.waited_seconds;
  out.in_flight = s.in_use;
  out.peak_in_flight = s.peak_in_use;
  const GraphCounters graphs = impl_->backend->graph_counters();
  out.device_graph_captures = graphs.captures;
  out.device_graph_replays = graphs.replays;
  const KernelPathCounters paths = impl_->backend->kernel_paths();
  out.device_prefill_fp8_matmuls = paths.prefill_fp8;
  out.device_prefill_bf16_matmuls = paths.prefill_bf16;
  out.device_decode_tensor_core_matmuls = paths.decode_tensor_cores;
  out.device_decode_cuda_core_matmuls = paths.decode_cuda_cores;
  out.device_prefill_tiled_attentions = paths.prefill_attention_tiled;
  out.device_prefill_row_attentions = paths.prefill_attention_rows;
  out.device_prefill_fp8_activation_reuses = paths.prefill_fp8_activation_reuses;
  out.device_prefill_fp8_block_matmuls = paths.prefill_fp8_blocks;
  return out;
}
std::string Engine::graph_table() const { return graph::to_table(impl_->graph, impl_->plan.memory); }
std::string Engine::graph_json() const { return graph::to_json(impl_->graph, impl_->plan.memory); }

}  // namespace sitsrt
