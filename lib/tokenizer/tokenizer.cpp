#include "tokenizer/tokenizer.hpp"

#include "core/check.hpp"
#include "formats/gguf.hpp"
#include "tokenizer/bpe_tokenizer.hpp"
#include "tokenizer/hf_tokenizer.hpp"
#include "tokenizer/spm_tokenizer.hpp"
#include "tokenizer/utf8.hpp"

#include <filesystem>

namespace sitsrt {

void Tokenizer::check_id(std::int32_t id) const {
  if (id < 0 || id >= vocab().size()) {
    raise(ErrorCode::kInvalidArgument, "token id {} is out of range for a vocabulary of {} tokens", id, vocab().size());
  }
}

std::string Tokenizer::token_bytes(std::int32_t id) const {
  check_id(id);
  std::string bytes;
  append_token_bytes(id, bytes);
  return bytes;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool strip_dummy_prefix) const {
  std::string raw;
  for (const std::int32_t id : ids) {
    check_id(id);
    append_token_bytes(id, raw);
  }
  std::string_view bytes(raw);
  if (strip_dummy_prefix && inserts_dummy_prefix() && bytes.starts_with(' ')) bytes.remove_prefix(1);
  std::string text;
  text.reserve(bytes.size());
  detail::append_sanitized_utf8(bytes, text, /*hold_incomplete_tail=*/false);
  return text;
}

std::unique_ptr<Tokenizer> make_tokenizer(Vocabulary vocab, std::string_view source) {
  if (vocab.model == "llama") return std::make_unique<SpmTokenizer>(std::move(vocab));
  if (vocab.model == "gpt2" || vocab.model == "gemma4") return std::make_unique<BpeTokenizer>(std::move(vocab), source);
  raise(ErrorCode::kUnsupported,
        "{}: tokenizer model '{}' (tokenizer.ggml.model) is not supported; supported: llama, gpt2, gemma4", source,
        vocab.model);
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  std::filesystem::path file(path);
  if (std::filesystem::is_directory(file)) file /= "tokenizer.json";
  if (file.extension() == ".json") return make_tokenizer(read_hf_tokenizer(file.string()), file.string());
  const gguf::File gguf_file = gguf::File::open(path);
  return make_tokenizer(read_vocabulary(gguf_file), gguf_file.path());
}

}  // namespace sitsrt
