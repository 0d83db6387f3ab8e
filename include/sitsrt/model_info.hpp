// A description of a loaded model and the engine's resolved settings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sitsrt {

struct ModelInfo {
  std::string path;
  std::string architecture;
  std::string name;
  std::int64_t n_vocab = 0;
  std::int64_t n_embd = 0;
  std::int64_t n_layer = 0;
  std::int64_t n_head = 0;
  std::int64_t n_head_kv = 0;
  std::int64_t head_dim = 0;
  std::int64_t n_ff = 0;
  std::int64_t n_ctx_train = 0;
  std::int64_t n_params = 0;
  std::uint64_t weight_bytes = 0;     // bytes of all weights the graph reads
  std::uint64_t weight_bytes_per_token = 0;  // weight bytes one decode step reads (one embedding row)
  std::int64_t context_length = 0;    // resolved context window of this engine
  std::string kv_cache_type;          // "f16", or e.g. "k=int4+hadamard+centered,v=int4+hadamard"
  std::uint64_t kv_cache_bytes = 0;   // per request at full context (logits / evaluate sessions)
  std::string k_cache_type;           // of the serving KV block pool: "f32", "f16", "int8", "int4"
  std::string v_cache_type;
  std::uint64_t kv_pool_bytes = 0;    // the serving KV block pool (ServingOptions::kv_pool_tokens)
  std::int64_t kv_pool_tokens = 0;
  std::uint64_t activation_bytes = 0; // activation arena per request
  std::string backend = "cpu";        // the backend running the model (EngineOptions::device)
  std::string device = "cpu:0";       // its device
  std::string device_description;     // e.g. the CPU model name
  int threads = 0;
  std::string cpu_isa;                // kernel level in use
  std::string cpu_weight_prefetch;    // how CPU decode requests weights ahead, e.g. "l2, 4096 B ahead" (per CPU
                                      // vendor, or SITSRT_DECODE_PREFETCH); empty on other backends
  bool int8_activations = false;      // decode uses int8-quantized activations (EngineOptions)
  bool decode_fusion = true;          // one-token steps run fused matmul groups (EngineOptions)
  std::string weights = "as-stored";  // EngineOptions::weights
  int weights_converted_tensors = 0;  // matmul weights converted at load
  int weights_kept_tensors = 0;       // matmul weights left as stored (already that format / rows not whole blocks)
  std::uint64_t weights_converted_bytes = 0;  // stored bytes of the converted tensors (read)
  std::uint64_t weights_converted_to_bytes = 0;  // their bytes after conversion
  double weights_convert_seconds = 0.0;  // wall time of the load-time conversion
  // The output head's format when the conversion kept it out of the target ("fp8" holds it at
  // 16 bits: "bf16" for an F32 head); empty when the head follows the target.
  std::string weights_output_head;
  bool weights_mmapped = false;       // EngineOptions::mmap_weights: read in place from the file
  int weights_repacked_tensors = 0;   // resident matmul weights repacked for the CPU kernels
  double weights_copy_seconds = 0.0;  // wall time of copying (and repacking) resident weights
  std::int32_t bos = -1;
  std::int32_t eos = -1;
  bool add_bos = false;  // the tokenizer prepends bos to a text (GGUF tokenizer.ggml.add_bos_token)
};

}  // namespace sitsrt
