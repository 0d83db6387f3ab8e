// Hyper-parameters of a decoder-only transformer, read from model metadata.
#pragma once

#include <cstdint>
#include <string>

namespace sitsrt::gguf {
class File;
}

namespace sitsrt {

struct ModelSpec {
  std::string architecture;  // "llama"
  std::string name;          // general.name, if present
  std::int64_t n_vocab = 0;
  std::int64_t n_embd = 0;
  std::int64_t n_layer = 0;
  std::int64_t n_head = 0;
  std::int64_t n_head_kv = 0;
  std::int64_t head_dim = 0;
  std::int64_t n_ff = 0;
  std::int64_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  std::int64_t rope_dims = 0;
  bool rope_neox = false;
  bool tied_output = false;  // no output.weight: the embedding doubles as the output head
};

// Reads and validates `llama` hyper-parameters from GGUF metadata. Errors name the file and key.
ModelSpec read_model_spec(const gguf::File& file);

}  // namespace sitsrt
