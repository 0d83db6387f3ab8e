// The computation graph: nodes in execution order over named activation values and weights.
// The token count of a step is a run-time dimension: every activation is [rows, width] where
// rows is either the step's token count or its output count (logit rows), so prefill and
// decode run the same graph. Nodes carry byte and FLOP costs for planning and partitioning.
#pragma once

#include "core/dtype.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt::graph {

using ValueId = std::int32_t;
using WeightId = std::int32_t;
inline constexpr ValueId kNoValue = -1;

enum class OpKind : std::uint8_t {
  kEmbed,      // token ids -> rows of the embedding table
  kRmsNorm,    // x * rsqrt(mean(x^2) + eps) * w
  kHeadRmsNorm,  // kRmsNorm over each head_dim slice of the row (weights: head_dim values)
  kMatMul,     // x @ W^T, W in its stored format
  kRope,       // rotary position embedding (in place)
  kAttention,  // store K/V of this step into the layer's cache, causal GQA attention over it
  kSwiGlu,     // silu(gate) * up
  kGeGlu,      // gelu_tanh(gate) * up
  kAddBias,    // x + bias row (in place)
  kScale,      // x * attrs.scalar (in place)
  kSoftCap,    // attrs.scalar * tanh(x / attrs.scalar) (in place)
  kAdd,        // residual add (in place into the first input)
  kGatherRows,  // the step's output rows (StepContext::output_rows), in order: only those feed the head
};
std::string_view name(OpKind op) noexcept;

enum class RowSpace : std::uint8_t {
  kTokens,   // one row per token of the step
  kOutputs,  // one row per requested output (1 for generation, all tokens for scoring)
};

struct Value {
  std::string name;
  std::int64_t width = 0;
  RowSpace rows = RowSpace::kTokens;
  ValueId alias_of = kNoValue;  // written in place over this value's storage
};

struct Weight {
  std::string name;               // tensor name in the model file
  DType type = DType::kF32;
  std::vector<std::int64_t> dims;  // GGUF order (dims[0] contiguous)
  std::uint64_t bytes = 0;
};

// Frequency scaling of a rope node (mirrors cpu::RopeParams; the graph layer sits above the
// kernels' types). A rope node with a weight reads it as per-pair frequency divisors.
enum class RopeScaling : std::uint8_t { kNone, kLinear, kYarn, kLlama3 };
std::string_view name(RopeScaling scaling) noexcept;

struct RopeAttrs {
  std::int64_t head_dim = 0;
  std::int64_t rot_dims = 0;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;  // 1 / factor for kLinear and kYarn
  bool neox = false;  // false: adjacent pairs (2i, 2i+1); true: halves (i, i + rot_dims/2)
  RopeScaling scaling = RopeScaling::kNone;
  float original_context = 0.0f;  // kYarn, kLlama3
  float yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f, yarn_attn_factor = 1.0f;
  float llama3_factor = 1.0f, llama3_low_freq_factor = 1.0f, llama3_high_freq_factor = 4.0f;
  bool operator==(const RopeAttrs&) const = default;
};

struct NodeAttrs {
  float eps = 0.0f;               // kRmsNorm
  std::int64_t n_heads = 0;       // kRope, kAttention, kHeadRmsNorm
  std::int64_t n_kv_heads = 0;    // kAttention
  std::int64_t head_dim = 0;      // kAttention
  float attn_scale = 0.0f;        // kAttention
  std::int64_t window = 0;        // kAttention: sliding window (0: full causal)
  float scalar = 0.0f;            // kScale factor, kSoftCap cap
  std::uint32_t kv_element_bytes = 0;  // kAttention: bytes per cached K or V element
  RopeAttrs rope;                 // kRope
};

// Costs per token of a step, used by the memory plan, the printers and (later) the partitioner.
struct NodeCost {
  std::uint64_t weight_bytes = 0;           // bytes of weights read once per step
  std::uint64_t activation_bytes = 0;       // bytes of activations read + written per token
  std::uint64_t kv_bytes = 0;               // KV cache bytes appended per token
  std::uint64_t flops = 0;                  // FLOPs per token (excluding attention's context term)
  std::uint64_t flops_per_context = 0;      // attention FLOPs per token per attended position
};

struct Node {
  OpKind op = OpKind::kAdd;
  std::string name;
  std::int32_t layer = -1;  // transformer block index; -1 outside the blocks
  std::vector<ValueId> inputs;
  std::vector<WeightId> weights;
  ValueId output = kNoValue;
  NodeAttrs attrs;
  NodeCost cost;
};

class Graph {
 public:
  WeightId add_weight(Weight weight);
  // Appends a node producing a new value; returns the value id. When `in_place` the output
  // shares the storage of inputs[0] (which must have the same width and row space).
  ValueId add_node(OpKind op, std::string name, std::int32_t layer, std::vector<ValueId> inputs,
                   std::vector<WeightId> weights, NodeAttrs attrs, std::int64_t out_width, RowSpace rows,
                   bool in_place = false);
  void set_output(ValueId value) noexcept { output_ = value; }
  // Changes the stored format of a weight (load-time conversion): its bytes and the costs of
  // the nodes that read it follow. Its rows (dims[0]) must be whole blocks of `type`.
  void set_weight_type(WeightId id, DType type);

  [[nodiscard]] const std::vector<Node>& nodes() const noexcept { return nodes_; }
  [[nodiscard]] const std::vector<Value>& values() const noexcept { return values_; }
  [[nodiscard]] const std::vector<Weight>& weights() const noexcept { return weights_; }
  [[nodiscard]] ValueId output() const noexcept { return output_; }
  [[nodiscard]] std::int32_t n_layers() const noexcept;

  // Storage root of a value (follows alias_of).
  [[nodiscard]] ValueId storage_of(ValueId value) const noexcept;

  // Checks ids, widths and weight shapes; throws kInternal on a malformed graph.
  void validate() const;

  [[nodiscard]] std::uint64_t total_weight_bytes() const noexcept;

 private:
  void fill_cost(Node& node) const;
  std::vector<Node> nodes_;
  std::vector<Value> values_;
  std::vector<Weight> weights_;
  ValueId output_ = kNoValue;
};

}  // namespace sitsrt::graph
