#include "tokenizer/hf_tokenizer.hpp"

#include "core/check.hpp"
#include "core/file_io.hpp"
#include "tokenizer/pre_tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <limits>
#include <unordered_map>

namespace sitsrt {
namespace {

using Json = nlohmann::json;

Json parse_json(std::string_view text, std::string_view name) {
  try {
    Json root = Json::parse(text.begin(), text.end());
    if (!root.is_object()) raise(ErrorCode::kInvalidModel, "{}: the top level is not a JSON object", name);
    return root;
  } catch (const Json::parse_error& e) {
    raise(ErrorCode::kInvalidModel, "{}: malformed JSON: {}", name, e.what());
  }
}

// Bounded reads: the largest tokenizer.json in use (Gemma 3, 262k tokens) is 33 MB.
constexpr std::uint64_t kMaxTokenizerJsonBytes = std::uint64_t{256} << 20;
constexpr std::uint64_t kMaxTokenizerConfigBytes = std::uint64_t{16} << 20;

std::string read_text_file(const std::string& path, std::uint64_t max_bytes, std::string_view what) {
  return read_regular_file(path, max_bytes, what, ErrorCode::kInvalidModel);  // a FIFO or device is refused
}

// Typed access to one JSON document; every error names the file and the dotted key.
class Reader {
 public:
  explicit Reader(std::string_view file) : file_(file) {}

  const Json& require(const Json& object, std::string_view key, std::string_view path) const {
    const auto found = object.find(key);
    if (found == object.end()) raise(ErrorCode::kInvalidModel, "{}: {} is missing", file_, join(path, key));
    return *found;
  }
  const Json* optional(const Json& object, std::string_view key) const {
    const auto found = object.find(key);
    return found == object.end() || found->is_null() ? nullptr : &*found;
  }
  std::string string(const Json& value, std::string_view path) const {
    if (!value.is_string()) raise(ErrorCode::kInvalidModel, "{}: {} must be a string", file_, path);
    return value.get<std::string>();
  }
  bool boolean(const Json& value, std::string_view path) const {
    if (!value.is_boolean()) raise(ErrorCode::kInvalidModel, "{}: {} must be true or false", file_, path);
    return value.get<bool>();
  }
  std::int32_t id(const Json& value, std::string_view path) const {
    if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
        value.get<std::int64_t>() >= std::numeric_limits<std::int32_t>::max()) {
      raise(ErrorCode::kInvalidModel, "{}: {} must be a token id (an integer in [0, 2^31-1))", file_, path);
    }
    return static_cast<std::int32_t>(value.get<std::int64_t>());
  }
  const Json& object(const Json& value, std::string_view path) const {
    if (!value.is_object()) raise(ErrorCode::kInvalidModel, "{}: {} must be an object", file_, path);
    return value;
  }
  const Json& array(const Json& value, std::string_view path) const {
    if (!value.is_array()) raise(ErrorCode::kInvalidModel, "{}: {} must be an array", file_, path);
    return value;
  }
  // A flag that must be absent, null or `allowed` for this reader to handle the file.
  void expect_flag(const Json& object, std::string_view key, bool allowed, std::string_view path) const {
    if (const Json* value = optional(object, key); value != nullptr && boolean(*value, join(path, key)) != allowed) {
      raise(ErrorCode::kUnsupported, "{}: {} = {} is not supported", file_, join(path, key), !allowed);
    }
  }
  std::string type_of(const Json& component, std::string_view path) const {
    return string(require(object(component, path), "type", path), join(path, "type"));
  }
  [[noreturn]] void unsupported(std::string_view path, std::string_view what, std::string_view supported) const {
    raise(ErrorCode::kUnsupported, "{}: {} '{}' is not supported; supported: {}", file_, path, what, supported);
  }

  static std::string join(std::string_view path, std::string_view key) {
    return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
  }
  static std::string index(std::string_view path, std::size_t i) { return fmt::format("{}[{}]", path, i); }
  std::string_view file() const noexcept { return file_; }

 private:
  std::string_view file_;
};

// A literal string as a PCRE2 pattern: every ASCII punctuation character escaped.
std::string quote_regex(std::string_view literal) {
  std::string out;
  for (const char c : literal) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x80 && !std::isalnum(byte)) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// What the normalizer, pre-tokenizer and decoder amount to.
struct Pipeline {
  std::vector<std::string> patterns;  // pre-tokenizer regexes, in order
  bool byte_level = false;            // a ByteLevel pre-tokenizer step
  bool spaces_to_marker = false;      // Replace(" " -> U+2581) normalizer or Metaspace pre-tokenizer
  bool prepend_marker = false;        // Prepend(U+2581) normalizer or Metaspace with a prepend scheme
  bool metaspace_prefix = false;      // Metaspace's prefix, skipped when the text starts with a space
};

// A Replace / Split pattern given as {"String": text}; empty when it is a regex.
std::string string_pattern(const Reader& r, const Json& component, const std::string& path) {
  const std::string pattern_path = Reader::join(path, "pattern");
  const Json& pattern = r.object(r.require(component, "pattern", path), pattern_path);
  if (const Json* literal = r.optional(pattern, "String")) return r.string(*literal, Reader::join(pattern_path, "String"));
  return {};
}

void read_normalizer(const Reader& r, const Json& normalizer, const std::string& path, Pipeline& pipeline) {
  const std::string type = r.type_of(normalizer, path);
  if (type == "NFC") return;  // not applied: see the header and docs/tokenizers.md
  if (type == "Sequence") {
    const Json& list = r.array(r.require(normalizer, "normalizers", path), Reader::join(path, "normalizers"));
    for (std::size_t i = 0; i < list.size(); ++i) {
      read_normalizer(r, list[i], Reader::index(Reader::join(path, "normalizers"), i), pipeline);
    }
    return;
  }
  if (type == "Prepend") {  // SentencePiece's dummy prefix
    const std::string text = r.string(r.require(normalizer, "prepend", path), Reader::join(path, "prepend"));
    if (text != kSpaceMarker) r.unsupported(Reader::join(path, "prepend"), text, "U+2581");
    pipeline.prepend_marker = true;
    return;
  }
  if (type == "Replace") {  // spaces as U+2581
    const std::string content = r.string(r.require(normalizer, "content", path), Reader::join(path, "content"));
    if (string_pattern(r, normalizer, path) != " " || content != kSpaceMarker) {
      r.unsupported(path, "Replace other than ' ' -> U+2581", "Replace(' ' -> U+2581)");
    }
    pipeline.spaces_to_marker = true;
    return;
  }
  r.unsupported(Reader::join(path, "type"), type, "NFC, Prepend(U+2581), Replace(' ' -> U+2581), Sequence (or null)");
}

void read_pre_tokenizer(const Reader& r, const Json& pre, const std::string& path, Pipeline& pipeline) {
  std::vector<std::string>& patterns = pipeline.patterns;
  const std::string type = r.type_of(pre, path);
  if (type == "ByteLevel") {
    r.expect_flag(pre, "add_prefix_space", false, path);
    pipeline.byte_level = true;
    const Json* use_regex = r.optional(pre, "use_regex");
    if (use_regex == nullptr || r.boolean(*use_regex, Reader::join(path, "use_regex"))) {
      patterns.emplace_back(detail::gpt2_pattern());
    }
    return;
  }
  if (type == "Split") {
    const std::string pattern_path = Reader::join(path, "pattern");
    const Json& pattern = r.object(r.require(pre, "pattern", path), pattern_path);
    if (const Json* regex = r.optional(pattern, "Regex")) {
      patterns.push_back(r.string(*regex, Reader::join(pattern_path, "Regex")));
    } else if (const Json* literal = r.optional(pattern, "String")) {
      patterns.push_back(quote_regex(r.string(*literal, Reader::join(pattern_path, "String"))));
    } else {
      raise(ErrorCode::kInvalidModel, "{}: {} has neither Regex nor String", r.file(), pattern_path);
    }
    const std::string behavior =
        r.string(r.require(pre, "behavior", path), Reader::join(path, "behavior"));
    if (behavior != "Isolated") r.unsupported(Reader::join(path, "behavior"), behavior, "Isolated");
    r.expect_flag(pre, "invert", false, path);
    return;
  }
  if (type == "Sequence") {
    const std::string list_path = Reader::join(path, "pretokenizers");
    const Json& list = r.array(r.require(pre, "pretokenizers", path), list_path);
    for (std::size_t i = 0; i < list.size(); ++i) {
      read_pre_tokenizer(r, list[i], Reader::index(list_path, i), pipeline);
    }
    return;
  }
  if (type == "Metaspace") {  // SentencePiece: spaces as U+2581, optionally a dummy prefix
    const std::string replacement =
        r.string(r.require(pre, "replacement", path), Reader::join(path, "replacement"));
    if (replacement != kSpaceMarker) r.unsupported(Reader::join(path, "replacement"), replacement, "U+2581");
    pipeline.spaces_to_marker = true;
    if (const Json* scheme = r.optional(pre, "prepend_scheme")) {
      const std::string name = r.string(*scheme, Reader::join(path, "prepend_scheme"));
      if (name != "first" && name != "always" && name != "never") {
        r.unsupported(Reader::join(path, "prepend_scheme"), name, "first, always, never");
      }
      pipeline.prepend_marker = name != "never";
    } else if (const Json* add = r.optional(pre, "add_prefix_space")) {  // older files
      pipeline.prepend_marker = r.boolean(*add, Reader::join(path, "add_prefix_space"));
    }
    pipeline.metaspace_prefix = pipeline.prepend_marker;
    return;
  }
  r.unsupported(Reader::join(path, "type"), type, "ByteLevel, Split, Metaspace, Sequence");
}

void read_decoder(const Reader& r, const Json& decoder, const std::string& path) {
  const std::string type = r.type_of(decoder, path);
  // ByteLevel undoes byte-level BPE's mapping; the others are SentencePiece's decoding steps
  // (U+2581 -> space, <0xNN> -> byte, drop the dummy prefix), which SpmTokenizer performs.
  for (const std::string_view known : {"ByteLevel", "Replace", "ByteFallback", "Fuse", "Strip", "Metaspace"}) {
    if (type == known) return;
  }
  if (type == "Sequence") {
    const std::string list_path = Reader::join(path, "decoders");
    const Json& list = r.array(r.require(decoder, "decoders", path), list_path);
    for (std::size_t i = 0; i < list.size(); ++i) read_decoder(r, list[i], Reader::index(list_path, i));
    return;
  }
  r.unsupported(Reader::join(path, "type"), type, "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence");
}

struct TemplateSpecials {
  std::string first;  // a special token the "single" template starts with (BOS)
  std::string last;   // ... ends with (EOS)
};

void read_post_processor(const Reader& r, const Json& post, const std::string& path, TemplateSpecials& specials) {
  const std::string type = r.type_of(post, path);
  if (type == "ByteLevel") return;  // only adjusts offsets
  if (type == "Sequence") {
    const std::string list_path = Reader::join(path, "processors");
    const Json& list = r.array(r.require(post, "processors", path), list_path);
    for (std::size_t i = 0; i < list.size(); ++i) read_post_processor(r, list[i], Reader::index(list_path, i), specials);
    return;
  }
  if (type != "TemplateProcessing") r.unsupported(Reader::join(path, "type"), type, "TemplateProcessing, ByteLevel, Sequence");
  const std::string single_path = Reader::join(path, "single");
  const Json& single = r.array(r.require(post, "single", path), single_path);
  const auto special_id = [&](std::size_t i) -> std::string {
    const Json& item = r.object(single[i], Reader::index(single_path, i));
    const Json* special = r.optional(item, "SpecialToken");
    if (special == nullptr) return {};
    const std::string item_path = Reader::join(Reader::index(single_path, i), "SpecialToken");
    return r.string(r.require(r.object(*special, item_path), "id", item_path), Reader::join(item_path, "id"));
  };
  if (!single.empty()) {
    specials.first = special_id(0);
    if (single.size() > 1) specials.last = special_id(single.size() - 1);
  }
}

void read_model(const Reader& r, const Json& model, Vocabulary& vocab, std::unordered_map<std::int32_t, std::string>& by_id,
                std::string& unk_text, bool& byte_fallback) {
  const std::string type = r.type_of(model, "model");
  if (type != "BPE") r.unsupported("model.type", type, "BPE");
  if (const Json* fallback = r.optional(model, "byte_fallback")) {
    byte_fallback = r.boolean(*fallback, "model.byte_fallback");
  }
  if (r.optional(model, "dropout") != nullptr) raise(ErrorCode::kUnsupported, "{}: model.dropout is not supported", r.file());
  for (const std::string_view affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const Json* value = r.optional(model, affix);
        value != nullptr && !r.string(*value, Reader::join("model", affix)).empty()) {
      raise(ErrorCode::kUnsupported, "{}: model.{} is not supported", r.file(), affix);
    }
  }
  if (const Json* ignore = r.optional(model, "ignore_merges")) vocab.ignore_merges = r.boolean(*ignore, "model.ignore_merges");
  if (const Json* unk = r.optional(model, "unk_token")) unk_text = r.string(*unk, "model.unk_token");

  const Json& pieces = r.object(r.require(model, "vocab", "model"), "model.vocab");
  for (const auto& [piece, id_value] : pieces.items()) {
    const std::int32_t id = r.id(id_value, fmt::format("model.vocab[\"{}\"]", piece));
    if (!by_id.emplace(id, piece).second) {
      raise(ErrorCode::kInvalidModel, "{}: model.vocab gives id {} to both '{}' and '{}'", r.file(), id, by_id[id], piece);
    }
  }

  const Json& merges = r.array(r.require(model, "merges", "model"), "model.merges");
  vocab.merges.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const std::string path = Reader::index("model.merges", i);
    if (merges[i].is_string()) {
      vocab.merges.push_back(merges[i].get<std::string>());
      continue;
    }
    const Json& pair = r.array(merges[i], path);
    if (pair.size() != 2) raise(ErrorCode::kInvalidModel, "{}: {} must be a string or a pair of strings", r.file(), path);
    const std::string left = r.string(pair[0], Reader::index(path, 0));
    const std::string right = r.string(pair[1], Reader::index(path, 1));
    if (left.find(' ') != std::string::npos || right.find(' ') != std::string::npos) {
      raise(ErrorCode::kUnsupported, "{}: {} has a piece with a space, which byte-level BPE never produces", r.file(), path);
    }
    vocab.merges.push_back(left + " " + right);
  }
}

bool is_byte_piece(std::string_view piece) {
  return piece.size() == 6 && piece.starts_with("<0x") && piece.back() == '>' &&
         std::isxdigit(static_cast<unsigned char>(piece[3])) && std::isxdigit(static_cast<unsigned char>(piece[4]));
}

// SentencePiece-style BPE (Llama 2, Gemma: byte_fallback, spaces as U+2581) becomes a "llama"
// vocabulary for SpmTokenizer: each merge result scores minus its rank, so the SentencePiece
// loop (highest score first) merges in rank order; pieces no merge produces score lowest.
void to_sentencepiece(const Reader& r, const Pipeline& pipeline, Vocabulary& vocab) {
  if (pipeline.byte_level || !pipeline.patterns.empty()) {
    raise(ErrorCode::kUnsupported, "{}: model.byte_fallback with a ByteLevel or Split pre-tokenizer is not supported",
          r.file());
  }
  if (!pipeline.spaces_to_marker) {
    raise(ErrorCode::kUnsupported,
          "{}: model.byte_fallback needs spaces as U+2581 (normalizer Replace or pre_tokenizer Metaspace)", r.file());
  }
  vocab.model = "llama";
  vocab.add_space_prefix = pipeline.prepend_marker;
  vocab.space_prefix_unless_leading_space = pipeline.metaspace_prefix;
  std::unordered_map<std::string_view, std::int32_t> id_of;
  for (std::int32_t id = 0; id < vocab.size(); ++id) {
    if (vocab.types[id] == TokenType::kNormal) id_of.emplace(vocab.pieces[id], id);
  }
  constexpr float kNeverMerged = std::numeric_limits<float>::lowest();
  vocab.scores.assign(vocab.pieces.size(), kNeverMerged);
  for (std::size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    std::string joined = vocab.merges[rank];
    const std::size_t space = joined.find(' ');
    if (space != std::string::npos) joined.erase(space, 1);
    const auto found = id_of.find(joined);
    if (space == std::string::npos || found == id_of.end()) {
      raise(ErrorCode::kInvalidModel, "{}: model.merges[{}] ('{}') does not make a token of model.vocab", r.file(), rank,
            vocab.merges[rank]);
    }
    float& score = vocab.scores[static_cast<std::size_t>(found->second)];
    if (score == kNeverMerged) score = -static_cast<float>(rank);
  }
  vocab.merges.clear();
  for (std::int32_t id = 0; id < vocab.size(); ++id) {
    if (vocab.types[id] == TokenType::kNormal && is_byte_piece(vocab.pieces[id])) vocab.types[id] = TokenType::kByte;
  }
  if (vocab.unk >= 0 && vocab.types[vocab.unk] == TokenType::kNormal) vocab.types[vocab.unk] = TokenType::kUnknown;
}

// A token named in tokenizer_config.json: a string, an AddedToken object {"content": ...} or null.
std::string config_token_text(const Reader& r, const Json& config, std::string_view key) {
  const Json* value = r.optional(config, key);
  if (value == nullptr) return {};
  if (value->is_object()) return r.string(r.require(*value, "content", key), Reader::join(key, "content"));
  return r.string(*value, key);
}

std::int32_t find_piece(const Vocabulary& vocab, std::string_view text) {
  const auto found = std::find(vocab.pieces.begin(), vocab.pieces.end(), text);
  return found == vocab.pieces.end() ? -1 : static_cast<std::int32_t>(found - vocab.pieces.begin());
}

std::int32_t require_piece(const Vocabulary& vocab, std::string_view text, std::string_view file, std::string_view key) {
  const std::int32_t id = find_piece(vocab, text);
  if (id < 0) raise(ErrorCode::kInvalidModel, "{}: {} '{}' is not a token of the vocabulary", file, key, text);
  return id;
}

void read_config(std::string_view text, std::string_view name, Vocabulary& vocab) {
  const Json config = parse_json(text, name);
  const Reader r(name);
  if (const Json* add_bos = r.optional(config, "add_bos_token")) vocab.add_bos = r.boolean(*add_bos, "add_bos_token");
  if (const Json* add_eos = r.optional(config, "add_eos_token")) vocab.add_eos = r.boolean(*add_eos, "add_eos_token");
  const auto set = [&](std::string_view key, std::int32_t& id) {
    const std::string token = config_token_text(r, config, key);
    if (!token.empty()) id = require_piece(vocab, token, name, key);
  };
  set("bos_token", vocab.bos);
  set("eos_token", vocab.eos);
  set("unk_token", vocab.unk);
  set("pad_token", vocab.pad);
  if (const Json* chat = r.optional(config, "chat_template")) {
    if (chat->is_string()) {
      vocab.chat_template = chat->get<std::string>();
    } else {  // a list of named templates: keep "default" (or the first)
      const Json& list = r.array(*chat, "chat_template");
      for (std::size_t i = 0; i < list.size(); ++i) {
        const std::string path = Reader::index("chat_template", i);
        const Json& entry = r.object(list[i], path);
        const std::string entry_name = r.string(r.require(entry, "name", path), Reader::join(path, "name"));
        if (i == 0 || entry_name == "default") {
          vocab.chat_template = r.string(r.require(entry, "template", path), Reader::join(path, "template"));
        }
      }
    }
  }
}

}  // namespace

Vocabulary parse_hf_tokenizer(std::string_view tokenizer_json, std::string_view tokenizer_json_name,
                              std::string_view config_json, std::string_view config_json_name) {
  const Json root = parse_json(tokenizer_json, tokenizer_json_name);
  const Reader r(tokenizer_json_name);
  Vocabulary vocab;
  vocab.model = "gpt2";
  vocab.pre.clear();
  vocab.add_bos = false;
  vocab.add_space_prefix = false;

  std::unordered_map<std::int32_t, std::string> by_id;
  std::string unk_text;
  bool byte_fallback = false;
  read_model(r, r.require(root, "model", ""), vocab, by_id, unk_text, byte_fallback);

  // Added tokens: their id (often beyond model.vocab, as in Llama 3) and whether special.
  std::unordered_map<std::int32_t, bool> added_special;
  if (const Json* added = r.optional(root, "added_tokens")) {
    r.array(*added, "added_tokens");
    for (std::size_t i = 0; i < added->size(); ++i) {
      const std::string path = Reader::index("added_tokens", i);
      const Json& token = r.object((*added)[i], path);
      const std::int32_t id = r.id(r.require(token, "id", path), Reader::join(path, "id"));
      const std::string content = r.string(r.require(token, "content", path), Reader::join(path, "content"));
      if (content.empty()) raise(ErrorCode::kInvalidModel, "{}: {}.content is empty", r.file(), path);
      for (const std::string_view flag : {"lstrip", "rstrip", "single_word"}) r.expect_flag(token, flag, false, path);
      bool special = false;
      if (const Json* value = r.optional(token, "special")) special = r.boolean(*value, Reader::join(path, "special"));
      const auto [it, inserted] = by_id.emplace(id, content);
      if (!inserted && it->second != content) {
        raise(ErrorCode::kInvalidModel, "{}: {} has id {}, which model.vocab gives to '{}'", r.file(), path, id,
              it->second);
      }
      added_special[id] = special;
    }
  }
  if (by_id.empty()) raise(ErrorCode::kInvalidModel, "{}: model.vocab is empty", r.file());

  std::int32_t max_id = 0;
  for (const auto& entry : by_id) max_id = std::max(max_id, entry.first);
  vocab.pieces.assign(static_cast<std::size_t>(max_id) + 1, std::string());
  vocab.types.assign(vocab.pieces.size(), TokenType::kUnused);  // ids no entry names stay unused
  vocab.scores.assign(vocab.pieces.size(), 0.0f);
  for (auto& [id, piece] : by_id) {
    vocab.pieces[id] = std::move(piece);
    vocab.types[id] = TokenType::kNormal;
  }
  for (const auto& [id, special] : added_special) vocab.types[id] = special ? TokenType::kControl : TokenType::kUserDefined;
  if (!unk_text.empty()) vocab.unk = require_piece(vocab, unk_text, r.file(), "model.unk_token");

  Pipeline pipeline;
  if (const Json* normalizer = r.optional(root, "normalizer")) read_normalizer(r, *normalizer, "normalizer", pipeline);
  if (const Json* pre = r.optional(root, "pre_tokenizer")) read_pre_tokenizer(r, *pre, "pre_tokenizer", pipeline);
  if (byte_fallback) {
    to_sentencepiece(r, pipeline, vocab);
  } else {
    if (!pipeline.byte_level || pipeline.spaces_to_marker || pipeline.prepend_marker) {
      raise(ErrorCode::kUnsupported,
            "{}: without model.byte_fallback only byte-level BPE (a ByteLevel pre-tokenizer, no U+2581 steps) is "
            "supported",
            r.file());
    }
    vocab.pre_patterns = std::move(pipeline.patterns);
  }
  const Json* decoder = r.optional(root, "decoder");
  if (decoder == nullptr) raise(ErrorCode::kInvalidModel, "{}: decoder is missing", r.file());
  read_decoder(r, *decoder, "decoder");
  if (const Json* post = r.optional(root, "post_processor")) {
    TemplateSpecials specials;
    read_post_processor(r, *post, "post_processor", specials);
    if (!specials.first.empty()) {
      vocab.bos = require_piece(vocab, specials.first, r.file(), "post_processor SpecialToken");
      vocab.add_bos = true;
    }
    if (!specials.last.empty()) {
      vocab.eos = require_piece(vocab, specials.last, r.file(), "post_processor SpecialToken");
      vocab.add_eos = true;
    }
  }
  if (!config_json.empty()) read_config(config_json, config_json_name, vocab);
  return vocab;
}

Vocabulary read_hf_tokenizer(const std::string& tokenizer_json_path) {
  const std::string text = read_text_file(tokenizer_json_path, kMaxTokenizerJsonBytes, "tokenizer.json");
  const std::filesystem::path config_path =
      std::filesystem::path(tokenizer_json_path).parent_path() / "tokenizer_config.json";
  std::string config;
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::symlink_status(config_path, ec))) {  // a FIFO there is refused
    config = read_text_file(config_path.string(), kMaxTokenizerConfigBytes, "tokenizer_config.json");
  }
  return parse_hf_tokenizer(text, tokenizer_json_path, config, config_path.string());
}

}  // namespace sitsrt
