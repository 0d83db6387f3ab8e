// Engine behaviour: generation controls, streaming text, reproducibility, errors for bad
// models and bad parameters.
#include "formats/gguf.hpp"
#include "formats/gguf_writer.hpp"
#include "support/model_files.hpp"

#include <sitsrt/engine.hpp>
#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <thread>

using namespace sitsrt;
using Catch::Matchers::Contains;

namespace {

EngineOptions tiny_engine(DType type = DType::kQ8_0) {
  EngineOptions o;
  o.model_path = test::random_model(test::tiny_options(type), "engine");
  o.threads = 2;
  return o;
}

// Copies a model file with one edit: `drop` removes a tensor, tag "reshaped" doubles the rows of
// blk.1.attn_k.weight, `remove_key` drops a metadata key, `retype_key` turns one into a string,
// `replace_keys` sets keys (replacing those of the same name).
std::string edited_copy(const std::string& source, const std::string& tag, const std::string& drop,
                        const std::string& remove_key = "", const std::string& retype_key = "",
                        const std::vector<gguf::KeyValue>& replace_keys = {}) {
  const gguf::File in = gguf::File::open(source);
  gguf::Writer w(in.alignment());
  for (const auto& kv : in.metadata()) {
    if (kv.key == remove_key) continue;
    if (kv.key == retype_key) {
      w.set(kv.key, gguf::Value::string("not a number"));
      continue;
    }
    w.set(kv.key, kv.value);
  }
  for (const auto& kv : replace_keys) w.set(kv.key, kv.value);
  for (const auto& t : in.tensors()) {
    if (t.name == drop) continue;
    const auto data = in.tensor_data(t);
    auto dims = t.dims;
    if (t.name == "blk.1.attn_k.weight" && tag == "reshaped") dims[1] *= 2;  // twice the kv heads
    std::vector<std::byte> bytes(data.begin(), data.end());
    if (dims != t.dims) bytes.resize(row_bytes(t.type, dims[0]) * static_cast<std::size_t>(dims[1]));
    w.add_tensor(t.name, dims, t.type, [bytes](std::span<std::byte> out) {
      std::copy(bytes.begin(), bytes.begin() + static_cast<long>(std::min(bytes.size(), out.size())), out.begin());
    });
  }
  const auto path = test::temp_dir() / (tag + ".gguf");
  w.write(path.string());
  return path.string();
}

}  // namespace

TEST_CASE("same seed, same tokens; different seed, different tokens", "[engine]") {
  const Engine engine(tiny_engine());
  GenerationConfig c;
  c.max_new_tokens = 40;
  c.temperature = 1.0f;
  c.top_k = 0;
  c.top_p = 1.0f;
  c.min_p = 0.0f;
  c.seed = 7;
  c.stop_at_end_of_sequence = false;
  const auto a = engine.generate("the cat", c);
  const auto b = engine.generate("the cat", c);
  CHECK(a.tokens == b.tokens);
  CHECK(a.seed == 7);
  c.seed = 8;
  const auto d = engine.generate("the cat", c);
  CHECK(a.tokens != d.tokens);
}

TEST_CASE("streamed pieces concatenate to the result text, one event per token", "[engine]") {
  const Engine engine(tiny_engine());
  GenerationConfig c;
  c.max_new_tokens = 50;
  c.seed = 3;
  c.stop_at_end_of_sequence = false;
  std::string streamed;
  std::int64_t expected_index = 0;
  double last_time = 0;
  const auto result = engine.generate("hello", c, [&](const TokenEvent& e) {
    CHECK(e.index == expected_index++);
    CHECK(e.logprob <= 0.0f);
    CHECK(e.entropy >= 0.0f);
    CHECK(e.top.size() == 5);
    for (std::size_t i = 1; i < e.top.size(); ++i) CHECK(e.top[i - 1].logprob >= e.top[i].logprob);
    CHECK(e.seconds_since_start >= last_time);
    last_time = e.seconds_since_start;
    streamed += e.text;
    return true;
  });
  CHECK(static_cast<std::int64_t>(result.tokens.size()) == expected_index);
  CHECK(streamed == result.text);
  CHECK(result.finish_reason == FinishReason::kLength);
}

TEST_CASE("greedy chosen token is the top alternative and carries its logprob", "[engine]") {
  const Engine engine(tiny_engine());
  GenerationConfig c;
  c.max_new_tokens = 10;
  c.temperature = 0.0f;
  c.stop_at_end_of_sequence = false;
  engine.generate("once", c, [&](const TokenEvent& e) {
    REQUIRE(!e.top.empty());
    CHECK(e.top[0].id == e.token_id);
    CHECK(e.top[0].logprob == Approx(e.logprob));
    return true;
  });
}

TEST_CASE("tokens and statistics sampled from the backend's logit summaries equal those from the rows", "[engine]") {
  // Asking the full distribution of every token makes the scheduler read each row (the path
  // without summaries); greedy and top-k sampling otherwise sample from summaries.
  const Engine engine(tiny_engine());
  const auto run = [&](GenerationConfig c, bool rows) {
    if (rows) {
      c.audit.level = TraceLevel::kFull;
      for (std::int64_t i = 0; i < c.max_new_tokens; ++i) c.audit.full_distribution_steps.push_back(i);
    }
    std::vector<TokenEvent> events;
    engine.generate("the cat sat", c, [&](const TokenEvent& e) {
      CHECK(e.full_logprobs.empty() == !rows);
      events.push_back(e);
      return true;
    });
    return events;
  };
  GenerationConfig c;
  c.max_new_tokens = 24;
  c.seed = 11;
  c.top_logprobs = 7;
  c.stop_at_end_of_sequence = false;
  c.temperature = GENERATE(0.0f, 1.2f);
  c.top_k = GENERATE(3, 40);
  CAPTURE(c.temperature, c.top_k);
  const auto from_summaries = run(c, false), from_rows = run(c, true);
  REQUIRE(from_summaries.size() == from_rows.size());
  const auto bits = [](float x) { return std::bit_cast<std::uint32_t>(x); };
  for (std::size_t i = 0; i < from_rows.size(); ++i) {
    CAPTURE(i);
    CHECK(from_summaries[i].token_id == from_rows[i].token_id);
    CHECK(bits(from_summaries[i].logprob) == bits(from_rows[i].logprob));
    CHECK(bits(from_summaries[i].entropy) == bits(from_rows[i].entropy));
    REQUIRE(from_summaries[i].top.size() == from_rows[i].top.size());
    for (std::size_t j = 0; j < from_rows[i].top.size(); ++j) {
      CHECK(from_summaries[i].top[j].id == from_rows[i].top[j].id);
      CHECK(bits(from_summaries[i].top[j].logprob) == bits(from_rows[i].top[j].logprob));
    }
  }
}

TEST_CASE("callback can stop generation", "[engine]") {
  const Engine engine(tiny_engine());
  GenerationConfig c;
  c.max_new_tokens = 50;
  c.stop_at_end_of_sequence = false;
  int seen = 0;
  const auto result = engine.generate("x", c, [&](const TokenEvent&) { return ++seen < 3; });
  CHECK(seen == 3);
  CHECK(result.tokens.size() == 3);
  CHECK(result.finish_reason == FinishReason::kCallback);
}

TEST_CASE("stop strings end generation and never reach the caller", "[engine]") {
  const Engine engine(tiny_engine());
  GenerationConfig c;
  c.max_new_tokens = 60;
  c.temperature = 0.0f;
  c.stop_at_end_of_sequence = false;
  const auto free_run = engine.generate("a b", c);
  REQUIRE(free_run.text.size() > 12);
  // Use a piece of the free-running text as the stop string: generation must end right before it.
  const std::string stop = free_run.text.substr(6, 5);
  c.stop = {stop};
  std::string streamed;
  const auto stopped = engine.generate("a b", c, [&](const TokenEvent& e) {
    streamed += e.text;
    return true;
  });
  CHECK(stopped.finish_reason == FinishReason::kStopString);
  CHECK(stopped.text == free_run.text.substr(0, free_run.text.find(stop)));
  CHECK(streamed == stopped.text);
}

TEST_CASE("context full ends generation", "[engine]") {
  EngineOptions o = tiny_engine();
  o.context_length = 12;
  const Engine engine(o);
  GenerationConfig c;
  c.max_new_tokens = 100;
  c.stop_at_end_of_sequence = false;
  const auto prompt = engine.tokenize("ab");
  const auto result = engine.generate_from_tokens(prompt, c);
  CHECK(result.finish_reason == FinishReason::kContextFull);
  CHECK(result.prompt_tokens.size() + result.tokens.size() == 13);  // the last token is sampled, not fed
  std::vector<std::int32_t> too_long(12, 5);
  CHECK_THROWS_WITH(engine.generate_from_tokens(too_long, c), Contains("context length"));
}

TEST_CASE("concurrent requests on one engine give the same results as sequential ones (deterministic mode)",
          "[engine]") {
  // Concurrent requests share batched steps; in deterministic mode each row's arithmetic is the
  // same whatever shares its step, so sampled tokens match bit for bit. (Default mode: a batch
  // of rows runs other kernels than one row, equal within rounding; tests/unit/batched_step_test.)
  EngineOptions o = tiny_engine();
  o.deterministic = true;
  const Engine engine(o);
  GenerationConfig c;
  c.max_new_tokens = 20;
  c.stop_at_end_of_sequence = false;
  std::vector<GenerationResult> sequential;
  for (int i = 0; i < 4; ++i) {
    c.seed = static_cast<std::uint64_t>(i);
    sequential.push_back(engine.generate("tick", c));
  }
  std::vector<GenerationResult> parallel(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      GenerationConfig ci = c;
      ci.seed = static_cast<std::uint64_t>(i);
      parallel[static_cast<std::size_t>(i)] = engine.generate("tick", ci);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i)
    CHECK(parallel[static_cast<std::size_t>(i)].tokens == sequential[static_cast<std::size_t>(i)].tokens);
}

TEST_CASE("invalid parameters are rejected with the parameter named", "[engine]") {
  const Engine engine(tiny_engine());
  GenerationConfig c;
  c.top_logprobs = 100;
  CHECK_THROWS_WITH(engine.generate("x", c), Contains("top_logprobs"));
  c = {};
  c.top_p = -1.0f;
  CHECK_THROWS_WITH(engine.generate("x", c), Contains("top_p"));
  c = {};
  c.max_new_tokens = -2;
  CHECK_THROWS_WITH(engine.generate("x", c), Contains("max_new_tokens"));
  CHECK_THROWS_WITH(engine.token_bytes(99999), Contains("vocabulary"));
  EngineOptions o = tiny_engine();
  o.cpu_isa = "sse9";
  CHECK_THROWS_WITH(Engine(o), Contains("cpu_isa"));
  o = tiny_engine();
  o.max_batch_tokens = 0;
  CHECK_THROWS_WITH(Engine(o), Contains("max_batch_tokens"));
}

TEST_CASE("every out-of-range GenerationConfig field is refused before anything is recorded", "[engine]") {
  struct Recorder : AuditSink {
    int begins = 0;
    void on_request_begin(const RequestRecord&) override { ++begins; }
    void on_token(const std::string&, const TokenEvent&) override {}
    void on_request_end(const RequestSummary&) override {}
  };
  auto recorder = std::make_shared<Recorder>();
  EngineOptions o = tiny_engine();
  o.audit_sinks = {recorder};
  const Engine engine(o);
  const std::vector<std::pair<const char*, std::function<void(GenerationConfig&)>>> cases = {
      {"temperature", [](GenerationConfig& c) { c.temperature = -1.0f; }},
      {"temperature", [](GenerationConfig& c) { c.temperature = std::nanf(""); }},
      {"top_k", [](GenerationConfig& c) { c.top_k = -5; }},
      {"top_p", [](GenerationConfig& c) { c.top_p = 1.5f; }},
      {"min_p", [](GenerationConfig& c) { c.min_p = -0.1f; }},
      {"repeat_penalty", [](GenerationConfig& c) { c.repeat_penalty = 0.0f; }},
      {"repeat_last_n", [](GenerationConfig& c) { c.repeat_last_n = -1; }},
      {"top_logprobs", [](GenerationConfig& c) { c.top_logprobs = 65; }},
      {"stop", [](GenerationConfig& c) { c.stop = {""}; }},
      {"full_distribution_steps", [](GenerationConfig& c) { c.audit.full_distribution_steps = {-1}; }},
  };
  for (const auto& [field, edit] : cases) {
    GenerationConfig c;
    edit(c);
    CHECK_THROWS_WITH(validate(c), Contains(field));
    CHECK_THROWS_WITH(engine.generate("x", c), Contains(field));
    const std::vector<std::int32_t> ids = {5, 6};
    CHECK_THROWS_WITH(engine.generate_from_tokens(ids, c), Contains(field));
  }
  CHECK(recorder->begins == 0);
  GenerationConfig fine;
  fine.temperature = 0.0f;
  fine.top_k = 0;
  fine.max_new_tokens = 2;
  CHECK_NOTHROW(validate(fine));
  CHECK_NOTHROW(engine.generate("x", fine));
  CHECK(recorder->begins == 1);
}

TEST_CASE("a sink that fails leaves every other sink with a complete request", "[engine][audit]") {
  struct Recorder : AuditSink {
    int begins = 0;
    std::vector<RequestSummary> ends;
    int tokens = 0;
    int fail_at_token = -1;  // throw on this token (after counting it); -1: never
    bool fail_at_begin = false;
    bool fail_at_end = false;
    void on_request_begin(const RequestRecord&) override {
      if (fail_at_begin) throw Error(ErrorCode::kRejected, "begin refused");
      ++begins;
    }
    void on_token(const std::string&, const TokenEvent&) override {
      if (tokens++ == fail_at_token) throw Error(ErrorCode::kRejected, "token refused");
    }
    void on_request_end(const RequestSummary& s) override {
      ends.push_back(s);
      if (fail_at_end) throw Error(ErrorCode::kRejected, "end refused");
    }
  };
  auto first = std::make_shared<Recorder>();
  auto failing = std::make_shared<Recorder>();
  EngineOptions o = tiny_engine();
  o.audit_sinks = {first};
  const Engine engine(o);
  GenerationConfig c;
  c.max_new_tokens = 8;
  c.temperature = 0.0f;
  failing->fail_at_begin = true;
  c.audit.sinks = {failing};
  CHECK_THROWS_WITH(engine.generate("x", c), Contains("begin refused"));
  REQUIRE(first->ends.size() == 1);
  CHECK(first->ends[0].finish_reason == "error");
  CHECK(first->ends[0].generated_tokens == 0);
  CHECK(failing->ends.empty());  // it never accepted the request
  failing->fail_at_begin = false;
  failing->fail_at_token = 3;
  CHECK_THROWS_WITH(engine.generate("x", c), Contains("token refused"));
  REQUIRE(first->ends.size() == 2);
  CHECK(first->ends[1].finish_reason == "error");
  CHECK(first->ends[1].generated_tokens == 4);  // the token being reported when the sink failed counts
  CHECK(first->ends[1].tokens.size() == 4);
  CHECK(first->tokens == 4);
  // A sink failing at the end record fails the request, and no sink gets a second end record.
  failing->fail_at_token = -1;
  failing->fail_at_end = true;
  failing->ends.clear();
  CHECK_THROWS_WITH(engine.generate("x", c), Contains("end refused"));
  REQUIRE(first->ends.size() == 3);
  CHECK(first->ends[2].finish_reason != "error");
  CHECK(failing->ends.size() == 1);
}

TEST_CASE("model files missing pieces are rejected naming the file and the piece", "[engine][malformed]") {
  const std::string good = tiny_engine().model_path;
  EngineOptions o = tiny_engine();
  o.model_path = edited_copy(good, "missing-tensor", "blk.1.ffn_up.weight");
  CHECK_THROWS_WITH(Engine(o), Contains("missing-tensor.gguf") && Contains("missing tensor 'blk.1.ffn_up.weight'"));
  o.model_path = edited_copy(good, "reshaped", "");
  CHECK_THROWS_WITH(Engine(o), Contains("reshaped.gguf") && Contains("blk.1.attn_k.weight") && Contains("expected"));
  o.model_path = edited_copy(good, "missing-key", "", "llama.embedding_length");
  CHECK_THROWS_WITH(Engine(o), Contains("missing-key.gguf") && Contains("llama.embedding_length"));
  o.model_path = edited_copy(good, "wrong-key-type", "", "", "llama.block_count");
  CHECK_THROWS_WITH(Engine(o), Contains("wrong-key-type.gguf") && Contains("llama.block_count"));
  o.model_path = test::temp_dir() / "does-not-exist.gguf";
  CHECK_THROWS_WITH(Engine(o), Contains("does-not-exist.gguf"));
}

TEST_CASE("the engine picks its tokenizer from tokenizer.ggml.model", "[engine][tokenizer]") {
  // The tiny model re-labelled with a byte-level BPE vocabulary of the same size (300): the 256
  // mapped bytes, merges that build " hello" and "world", and <|endoftext|> as EOS.
  const std::string good = tiny_engine().model_path;
  std::vector<gguf::Value> tokens;
  std::vector<gguf::Value> types;
  const auto add = [&](std::string piece, std::int32_t type) {
    tokens.push_back(gguf::Value::string(std::move(piece)));
    types.push_back(gguf::Value::i32(type));
  };
  int unprintable = 0;  // GPT-2's mapping: unprintable bytes go to U+0100, U+0101, ... in order
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const int cp = printable ? b : 0x100 + unprintable++;
    std::string piece;
    if (cp < 0x80) {
      piece.push_back(static_cast<char>(cp));
    } else {
      piece.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      piece.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    add(piece, 1);
  }
  const std::string space = "\xC4\xA0";  // the mapped space
  const std::vector<std::pair<std::string, std::string>> merges = {
      {space, "h"}, {space + "h", "e"}, {"l", "l"}, {space + "he", "ll"}, {space + "hell", "o"},
      {"w", "o"},   {"r", "l"},         {"wo", "rl"}, {"worl", "d"}};
  std::vector<gguf::Value> merge_values;
  for (const auto& [left, right] : merges) {
    merge_values.push_back(gguf::Value::string(left + " " + right));
    add(left + right, 1);
  }
  while (tokens.size() < 299) add("<|unused" + std::to_string(tokens.size()) + "|>", 5);
  add("<|endoftext|>", 3);
  const std::vector<gguf::KeyValue> bpe = {
      {"tokenizer.ggml.model", gguf::Value::string("gpt2")},
      {"tokenizer.ggml.pre", gguf::Value::string("llama-bpe")},
      {"tokenizer.ggml.tokens", gguf::Value::array(gguf::ValueType::kString, tokens)},
      {"tokenizer.ggml.token_type", gguf::Value::array(gguf::ValueType::kI32, types)},
      {"tokenizer.ggml.merges", gguf::Value::array(gguf::ValueType::kString, merge_values)},
      {"tokenizer.ggml.bos_token_id", gguf::Value::u32(299)},
      {"tokenizer.ggml.eos_token_id", gguf::Value::u32(299)},
      {"tokenizer.ggml.add_bos_token", gguf::Value::boolean(false)},
  };
  EngineOptions o = tiny_engine();
  o.model_path = edited_copy(good, "bpe-tokenizer", "", "", "", bpe);
  const Engine engine(o);
  // Pre-tokens "world", " hello", " world"; merge results have ids 256.. in merge order, so
  // " hello" = 260 and "world" = 264, and " world" is the space byte (32) then "world".
  const std::vector<std::int32_t> ids = engine.tokenize("world hello world", false);
  CHECK(ids == std::vector<std::int32_t>{264, 260, 32, 264});
  CHECK(engine.detokenize(ids) == "world hello world");
  CHECK(engine.token_bytes(299).empty());  // a control token prints nothing
  GenerationConfig config;
  config.max_new_tokens = 4;
  config.temperature = 0;
  CHECK(engine.generate("hello", config).tokens.size() <= 4);

  o.model_path = edited_copy(good, "t5-tokenizer", "", "", "", {{"tokenizer.ggml.model", gguf::Value::string("t5")}});
  CHECK_THROWS_WITH(Engine(o), Contains("t5-tokenizer.gguf") && Contains("tokenizer.ggml.model") &&
                                   Contains("llama, gpt2"));
}

TEST_CASE("the device plan accounts for the model's weights, KV cache and activations", "[engine][plan]") {
  // Expectations from the model the test wrote, not from ModelInfo (the plan is filled from it).
  const RandomModelOptions model = test::tiny_options(DType::kQ8_0);
  EngineOptions o;
  o.model_path = test::random_model(model, "plan");
  o.threads = 1;
  o.memory_budget_bytes = 64u << 20;
  const Engine engine(o);
  const DevicePlan& plan = engine.plan();
  REQUIRE(plan.devices.size() == 1);
  const PlanDevice& cpu = plan.devices[0];
  CHECK(cpu.kind == "cpu");
  CHECK(cpu.budget_bytes == (64u << 20));
  // The weights are the file's tensors, summed from its GGUF tensor table. Resident weights start
  // each tensor on a cache line (and may pad long rows): a little more; read in place, exactly those.
  const std::uint64_t file_bytes = test::file_tensor_bytes(o.model_path);
  CHECK(cpu.weight_bytes >= file_bytes);
  CHECK(cpu.weight_bytes <= file_bytes + file_bytes / 16 + 64 * 64);
  o.mmap_weights = true;
  CHECK(Engine(o).plan().devices.at(0).weight_bytes == file_bytes);
  // The context defaults to the training context (256 < 4096); the KV cache holds a K and a V row
  // of kv_heads x head_dim f16 values per layer and position.
  const auto context = static_cast<std::uint64_t>(model.context);
  CHECK(plan.context_length == model.context);
  const auto kv_width = static_cast<std::uint64_t>(model.kv_heads * (model.dim / model.heads));
  CHECK(cpu.kv_bytes_per_request == static_cast<std::uint64_t>(model.layers) * 2 * context * kv_width * 2);
  // The activation arena holds one forward pass of max_batch_tokens float rows: at least an FFN
  // matmul's input and output at once; at most every value of the pass without reuse (per layer
  // fewer than 16 values, none wider than the fused FFN's 2 x ffn, plus embedding, norm and
  // logits), each 64-byte aligned.
  const auto rows = std::min<std::uint64_t>(static_cast<std::uint64_t>(EngineOptions{}.max_batch_tokens), context);
  const auto widest = static_cast<std::uint64_t>(std::max(model.dim, 2 * model.ffn));
  const auto layers = static_cast<std::uint64_t>(model.layers);
  const std::uint64_t least = rows * static_cast<std::uint64_t>(model.dim + model.ffn) * sizeof(float);
  const std::uint64_t most = rows * sizeof(float) * (layers * 16 * widest + 4 * static_cast<std::uint64_t>(model.dim) +
                                                     static_cast<std::uint64_t>(model.vocab)) +
                             64 * (layers * 16 + 8);
  CHECK(cpu.activation_bytes_per_request >= least);
  CHECK(cpu.activation_bytes_per_request <= most);
  REQUIRE(plan.stages.size() == 1);
  CHECK(plan.stages[0].first_layer == 0);
  CHECK(plan.stages[0].last_layer == model.layers - 1);
  CHECK(plan.stages[0].embedding);
  CHECK(plan.stages[0].output_head);
  const auto json = nlohmann::json::parse(plan.to_json());
  CHECK(json["devices"][0]["weight_bytes"] == cpu.weight_bytes);
  CHECK(plan.to_table().find("cpu0") != std::string::npos);
}

TEST_CASE("a prompt far beyond the context is refused before it is tokenized", "[engine]") {
  EngineOptions o = tiny_engine();
  o.context_length = 64;
  const Engine engine(o);
  GenerationConfig c;
  c.max_new_tokens = 1;
  const std::string huge(std::size_t{8} << 20, 'a');  // before: tokenized in full (seconds, 100s of MB)
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    (void)engine.generate(huge, c);
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    message = e.what();
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(200));
  CHECK_THAT(message, Contains("prompt of 8388608 bytes does not fit the context length 64") &&
                          Contains("refused before tokenizing"));
  // The bound is sound: texts one byte past it tokenize to more tokens than the context holds,
  // however they are made (one letter, words, spaces, multi-byte UTF-8, bytes the vocabulary lacks).
  const auto at = message.find("covers at most ");
  REQUIRE(at != std::string::npos);
  const std::size_t per_token = std::stoul(message.substr(at + 15));
  const std::size_t bound = 64 * per_token;
  for (const std::string unit : {"a", "hello world ", " ", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "\x01\xff"}) {
    std::string text;
    while (text.size() <= bound) text += unit;
    CHECK(engine.tokenize(text, false).size() >= 64);
    CHECK_THROWS_WITH(engine.generate(text, c), Contains("does not fit the context length 64"));
  }
  // A prompt that fits is not refused, whatever its bytes.
  CHECK_NOTHROW(engine.generate(std::string(40, 'a'), c));
}
