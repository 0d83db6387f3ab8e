#include "tokenizer/tokenizer.hpp"

#include "core/check.hpp"
#include "formats/gguf.hpp"
#include "tokenizer/bpe_tokenizer.hpp"
#include "tokenizer/hf_tokenizer.hpp"
#include "tokenizer/spm_tokenizer.hpp"

#include <filesystem>

namespace sitsrt {

std::unique_ptr<Tokenizer> make_tokenizer(Vocabulary vocab, std::string_view source) {
  if (vocab.model == "llama") return std::make_unique<SpmTokenizer>(std::move(vocab));
  if (vocab.model == "gpt2") return std::make_unique<BpeTokenizer>(std::move(vocab), source);
  raise(ErrorCode::kUnsupported, "{}: tokenizer model '{}' (tokenizer.ggml.model) is not supported; supported: llama, gpt2",
        source, vocab.model);
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  std::filesystem::path file(path);
  if (std::filesystem::is_directory(file)) file /= "tokenizer.json";
  if (file.extension() == ".json") return make_tokenizer(read_hf_tokenizer(file.string()), file.string());
  const gguf::File gguf_file = gguf::File::open(path);
  return make_tokenizer(read_vocabulary(gguf_file), gguf_file.path());
}

}  // namespace sitsrt
