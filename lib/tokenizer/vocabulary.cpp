#include "tokenizer/vocabulary.hpp"

#include "core/check.hpp"
#include "formats/gguf.hpp"
#include "tokenizer/pre_tokenizer.hpp"

#include <fmt/ranges.h>

#include <array>
#include <cmath>
#include <optional>
#include <variant>

namespace sitsrt {
namespace {

constexpr std::array<std::string_view, 3> kSupportedModels = {"llama", "gpt2", "gemma4"};
constexpr std::uint64_t kNoTokenU32 = 0xFFFFFFFFu;  // GGUF's "no such token"

bool is_integer_type(gguf::ValueType type) {
  using T = gguf::ValueType;
  return type == T::kU8 || type == T::kI8 || type == T::kU16 || type == T::kI16 || type == T::kU32 || type == T::kI32 ||
         type == T::kU64 || type == T::kI64;
}

bool is_float_type(gguf::ValueType type) {
  return type == gguf::ValueType::kF32 || type == gguf::ValueType::kF64;
}

// Integers are held as uint64 or int64 depending on their signedness in the file.
std::optional<std::int64_t> as_integer(const gguf::Value& value) {
  if (const auto* u = std::get_if<std::uint64_t>(&value.data)) {
    if (*u > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<std::int64_t>(*u);
  }
  if (const auto* i = std::get_if<std::int64_t>(&value.data)) return *i;
  return std::nullopt;
}

std::string describe_type(const gguf::Value& value) {
  if (value.type == gguf::ValueType::kArray) {
    if (const auto* array = std::get_if<gguf::Array>(&value.data)) {
      return fmt::format("array of {}", gguf::name(array->element_type));
    }
  }
  return std::string(gguf::name(value.type));
}

// The array under `key` (nullptr when absent), checked to hold `expected` elements of an
// accepted element type.
template <typename AcceptElement>
const gguf::Array* find_array(const gguf::File& file, std::string_view key, std::string_view expected_type,
                              AcceptElement accept_element) {
  const gguf::Value* value = file.find(key);
  if (value == nullptr) return nullptr;
  const auto* array = std::get_if<gguf::Array>(&value->data);
  if (value->type != gguf::ValueType::kArray || array == nullptr || !accept_element(array->element_type)) {
    raise(ErrorCode::kInvalidModel, "{}: {} must be an array of {}, found {}", file.path(), key, expected_type,
          describe_type(*value));
  }
  return array;
}

void check_length(const gguf::File& file, std::string_view key, const gguf::Array& array, std::size_t tokens) {
  if (array.items.size() != tokens) {
    raise(ErrorCode::kInvalidModel, "{}: {} has {} entries but tokenizer.ggml.tokens has {}", file.path(), key,
          array.items.size(), tokens);
  }
}

// Optional special-token id: absent, 0xFFFFFFFF or -1 mean "none" (-1 here).
std::int32_t read_token_id(const gguf::File& file, std::string_view key, std::int32_t vocab_size) {
  const gguf::Value* value = file.find(key);
  if (value == nullptr) return -1;
  const std::optional<std::int64_t> id = is_integer_type(value->type) ? as_integer(*value) : std::nullopt;
  if (!id) {
    raise(ErrorCode::kInvalidModel, "{}: {} must be an integer token id, found {}", file.path(), key,
          describe_type(*value));
  }
  if (*id == -1 || static_cast<std::uint64_t>(*id) == kNoTokenU32) return -1;
  if (*id < 0 || *id >= vocab_size) {
    raise(ErrorCode::kInvalidModel, "{}: {} = {} is out of range for a vocabulary of {} tokens", file.path(), key, *id,
          vocab_size);
  }
  return static_cast<std::int32_t>(*id);
}

bool read_flag(const gguf::File& file, std::string_view key, bool default_value) {
  const gguf::Value* value = file.find(key);
  if (value == nullptr) return default_value;
  const auto* flag = std::get_if<bool>(&value->data);
  if (value->type != gguf::ValueType::kBool || flag == nullptr) {
    raise(ErrorCode::kInvalidModel, "{}: {} must be a bool, found {}", file.path(), key, describe_type(*value));
  }
  return *flag;
}

// Optional string value; `fallback` when absent.
std::string read_string(const gguf::File& file, std::string_view key, std::string fallback) {
  const gguf::Value* value = file.find(key);
  if (value == nullptr) return fallback;
  const auto* text = std::get_if<std::string>(&value->data);
  if (value->type != gguf::ValueType::kString || text == nullptr) {
    raise(ErrorCode::kInvalidModel, "{}: {} must be a string, found {}", file.path(), key, describe_type(*value));
  }
  return *text;
}

std::vector<std::string> read_strings(const gguf::File& file, std::string_view key) {
  std::vector<std::string> out;
  const gguf::Array* array =
      find_array(file, key, "string", [](gguf::ValueType type) { return type == gguf::ValueType::kString; });
  if (array == nullptr) return out;
  out.reserve(array->items.size());
  for (std::size_t i = 0; i < array->items.size(); ++i) {
    const auto* text = std::get_if<std::string>(&array->items[i].data);
    if (text == nullptr) raise(ErrorCode::kInvalidModel, "{}: {}[{}] is not a string", file.path(), key, i);
    out.push_back(*text);
  }
  return out;
}

std::string read_model_name(const gguf::File& file) {
  constexpr std::string_view kKey = "tokenizer.ggml.model";
  const gguf::Value* value = file.find(kKey);
  if (value == nullptr) raise(ErrorCode::kInvalidModel, "{}: {} is missing", file.path(), kKey);
  const auto* model = std::get_if<std::string>(&value->data);
  if (value->type != gguf::ValueType::kString || model == nullptr) {
    raise(ErrorCode::kInvalidModel, "{}: {} must be a string, found {}", file.path(), kKey, describe_type(*value));
  }
  for (const std::string_view supported : kSupportedModels) {
    if (*model == supported) return *model;
  }
  raise(ErrorCode::kUnsupported, "{}: tokenizer model '{}' ({}) is not supported; supported: {}", file.path(), *model,
        kKey, fmt::join(kSupportedModels, ", "));
}

void check_special_id(std::int32_t id, std::int32_t size, std::string_view name) {
  if (id < -1 || id >= size) {
    raise(ErrorCode::kInvalidArgument, "vocabulary: {} id {} is out of range for {} tokens", name, id, size);
  }
}

}  // namespace

Vocabulary complete_vocabulary(Vocabulary vocab) {
  const std::int32_t size = vocab.size();
  if (size == 0) raise(ErrorCode::kInvalidArgument, "vocabulary: no tokens");
  if (vocab.scores.empty()) vocab.scores.assign(vocab.pieces.size(), 0.0f);
  if (vocab.types.empty()) vocab.types.assign(vocab.pieces.size(), TokenType::kNormal);
  if (vocab.scores.size() != vocab.pieces.size() || vocab.types.size() != vocab.pieces.size()) {
    raise(ErrorCode::kInvalidArgument, "vocabulary: {} pieces but {} scores and {} types", vocab.pieces.size(),
          vocab.scores.size(), vocab.types.size());
  }
  check_special_id(vocab.bos, size, "bos");
  check_special_id(vocab.eos, size, "eos");
  check_special_id(vocab.unk, size, "unk");
  check_special_id(vocab.pad, size, "pad");
  return vocab;
}

Vocabulary read_vocabulary(const gguf::File& file) {
  Vocabulary vocab;
  vocab.model = read_model_name(file);

  constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
  const gguf::Array* tokens =
      find_array(file, kTokensKey, "string", [](gguf::ValueType type) { return type == gguf::ValueType::kString; });
  if (tokens == nullptr) raise(ErrorCode::kInvalidModel, "{}: {} is missing", file.path(), kTokensKey);
  if (tokens->items.empty()) raise(ErrorCode::kInvalidModel, "{}: {} is empty", file.path(), kTokensKey);
  if (tokens->items.size() > static_cast<std::size_t>(INT32_MAX)) {
    raise(ErrorCode::kInvalidModel, "{}: {} has {} entries (more than int32 ids can address)", file.path(), kTokensKey,
          tokens->items.size());
  }
  const std::size_t count = tokens->items.size();
  vocab.pieces.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const auto* piece = std::get_if<std::string>(&tokens->items[i].data);
    if (piece == nullptr) raise(ErrorCode::kInvalidModel, "{}: {}[{}] is not a string", file.path(), kTokensKey, i);
    vocab.pieces.push_back(*piece);
  }

  constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
  vocab.scores.assign(count, 0.0f);
  if (const gguf::Array* scores = find_array(file, kScoresKey, "f32", is_float_type)) {
    check_length(file, kScoresKey, *scores, count);
    for (std::size_t i = 0; i < count; ++i) {
      const auto* score = std::get_if<double>(&scores->items[i].data);
      if (score == nullptr || std::isnan(*score)) {
        raise(ErrorCode::kInvalidModel, "{}: {}[{}] is not a number", file.path(), kScoresKey, i);
      }
      vocab.scores[i] = static_cast<float>(*score);
    }
  }

  constexpr std::string_view kTypesKey = "tokenizer.ggml.token_type";
  vocab.types.assign(count, TokenType::kNormal);
  if (const gguf::Array* types = find_array(file, kTypesKey, "i32", is_integer_type)) {
    check_length(file, kTypesKey, *types, count);
    for (std::size_t i = 0; i < count; ++i) {
      const std::optional<std::int64_t> type = as_integer(types->items[i]);
      if (!type || *type < static_cast<std::int64_t>(TokenType::kUndefined) ||
          *type > static_cast<std::int64_t>(TokenType::kByte)) {
        raise(ErrorCode::kInvalidModel, "{}: {}[{}] is not a token type (0..6)", file.path(), kTypesKey, i);
      }
      vocab.types[i] = static_cast<TokenType>(*type);
    }
  }

  const std::int32_t size = vocab.size();
  vocab.bos = read_token_id(file, "tokenizer.ggml.bos_token_id", size);
  vocab.eos = read_token_id(file, "tokenizer.ggml.eos_token_id", size);
  vocab.unk = read_token_id(file, "tokenizer.ggml.unknown_token_id", size);
  vocab.pad = read_token_id(file, "tokenizer.ggml.padding_token_id", size);
  // SentencePiece defaults as llama.cpp's: BOS yes, EOS no, dummy prefix yes. Byte-level BPE:
  // BOS when the pre-tokenizer's type says so (Llama 3, Tekken, Chameleon), as llama.cpp.
  const bool spm = vocab.model == "llama";
  // "gemma4" is BPE over raw UTF-8 whatever tokenizer.ggml.pre says (as llama.cpp).
  if (!spm) vocab.pre = vocab.model == "gemma4" ? "gemma4" : read_string(file, "tokenizer.ggml.pre", "default");
  const std::optional<detail::PreTokenizerSpec> pre_spec = spm ? std::nullopt : detail::find_pre_tokenizer(vocab.pre);
  vocab.add_bos = read_flag(file, "tokenizer.ggml.add_bos_token", spm || (pre_spec && pre_spec->add_bos));
  vocab.add_eos = read_flag(file, "tokenizer.ggml.add_eos_token", false);
  vocab.add_space_prefix = read_flag(file, "tokenizer.ggml.add_space_prefix", spm);
  vocab.chat_template = read_string(file, "tokenizer.chat_template", "");
  if (!spm) {
    constexpr std::string_view kMergesKey = "tokenizer.ggml.merges";
    vocab.merges = read_strings(file, kMergesKey);
    if (vocab.merges.empty()) raise(ErrorCode::kInvalidModel, "{}: {} is missing or empty", file.path(), kMergesKey);
  }
  return vocab;
}

}  // namespace sitsrt
