// sitsrt::ChatTemplate: the public face of the chat layer (lib/chat), with transformers'
// apply_chat_template conventions for the template's variables.
#include <sitsrt/chat.hpp>

#include "api/chat_template_internal.hpp"

#include "chat/template.hpp"
#include "chat/unicode.hpp"
#include "core/check.hpp"
#include "formats/gguf.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/vocabulary.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace sitsrt {

struct ChatTemplate::Impl {
  Impl(std::string_view text, std::string origin_name, std::string bos, std::string eos)
      : source(text), origin(origin_name), bos_token(std::move(bos)), eos_token(std::move(eos)),
        parsed(text, std::move(origin_name)) {}
  std::string source;
  std::string origin;
  std::string bos_token;
  std::string eos_token;
  chat::Template parsed;
};

namespace {

using chat::DictData;
using chat::Value;

void check_utf8(const std::string& text, std::string_view what) {
  if (!chat::unicode::is_valid_utf8(text)) raise(ErrorCode::kInvalidArgument, "{} is not valid UTF-8", what);
}

// Renders `messages` (already a validated list of dicts) with transformers' variables:
// messages, tools (None unless given), documents (None), add_generation_prompt, the special
// tokens, then the extra context.
std::string render_with(const chat::Template& parsed, const std::string& bos_token, const std::string& eos_token,
                        Value messages, const ChatTemplateOptions& options) {
  DictData context;
  context.set(Value::string("messages"), std::move(messages));
  Value tools = Value::none();
  if (!options.tools_json.empty()) {
    tools = chat::value_from_json(options.tools_json, "tools");
    if (!tools.is_list()) raise(ErrorCode::kInvalidArgument, "tools: expected a JSON array of tool definitions");
  }
  context.set(Value::string("tools"), std::move(tools));
  context.set(Value::string("documents"), Value::none());
  context.set(Value::string("add_generation_prompt"), Value::boolean(options.add_generation_prompt));
  if (!bos_token.empty()) context.set(Value::string("bos_token"), Value::string(bos_token));
  if (!eos_token.empty()) context.set(Value::string("eos_token"), Value::string(eos_token));
  if (!options.extra_context_json.empty()) {
    const Value extra = chat::value_from_json(options.extra_context_json, "extra context");
    if (!extra.is_dict()) raise(ErrorCode::kInvalidArgument, "extra context: expected a JSON object");
    for (const auto& [key, value] : extra.dict().entries) {
      const std::string& name = key.as_string();
      if (name == "messages" || name == "tools" || name == "documents" || name == "add_generation_prompt") {
        raise(ErrorCode::kInvalidArgument, "extra context: '{}' is set by the renderer itself", name);
      }
      context.set(key, value);
    }
  }
  chat::RenderLimits limits;
  limits.max_output_bytes = options.max_output_bytes;
  limits.max_loop_iterations = options.max_loop_iterations;
  limits.max_call_depth = options.max_call_depth;
  return parsed.render(context, limits, options.now_unix_seconds);
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source, std::string origin, std::string bos_token, std::string eos_token) {
  check_utf8(bos_token, "bos_token");
  check_utf8(eos_token, "eos_token");
  impl_ = std::make_shared<const Impl>(source, std::move(origin), std::move(bos_token), std::move(eos_token));
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(const ChatTemplate&) = default;
ChatTemplate& ChatTemplate::operator=(const ChatTemplate&) = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

const std::string& ChatTemplate::source() const noexcept { return impl_->source; }
const std::string& ChatTemplate::origin() const noexcept { return impl_->origin; }
const std::string& ChatTemplate::bos_token() const noexcept { return impl_->bos_token; }
const std::string& ChatTemplate::eos_token() const noexcept { return impl_->eos_token; }

std::string ChatTemplate::render(std::span<const ChatMessage> messages, const ChatTemplateOptions& options) const {
  std::vector<Value> list;
  list.reserve(messages.size());
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    check_utf8(message.role, fmt::format("messages[{}].role", i));
    check_utf8(message.content, fmt::format("messages[{}].content", i));
    DictData dict;
    dict.set(Value::string("role"), Value::string(message.role));
    dict.set(Value::string("content"), Value::string(message.content));
    if (!message.extra_json.empty()) {
      const std::string what = fmt::format("messages[{}].extra_json", i);
      const Value extra = chat::value_from_json(message.extra_json, what);
      if (!extra.is_dict()) raise(ErrorCode::kInvalidArgument, "{}: expected a JSON object", what);
      for (const auto& [key, value] : extra.dict().entries) {
        // Non-text content (a list of parts) comes here, in place of an empty `content`.
        const bool content_here = key.as_string() == "content" && message.content.empty();
        if (key.as_string() == "role" || (key.as_string() == "content" && !content_here)) {
          raise(ErrorCode::kInvalidArgument, "{}: repeats the field '{}'", what, key.as_string());
        }
        dict.set(key, value);
      }
    }
    list.push_back(Value::mapping(std::move(dict)));
  }
  return render_with(impl_->parsed, impl_->bos_token, impl_->eos_token, Value::sequence(std::move(list)), options);
}

std::string ChatTemplate::render_json(std::string_view messages_json, const ChatTemplateOptions& options) const {
  Value messages = chat::value_from_json(messages_json, "messages");
  if (!messages.is_list()) raise(ErrorCode::kInvalidArgument, "messages: expected a JSON array of message objects");
  const auto& items = messages.list().items;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_dict()) raise(ErrorCode::kInvalidArgument, "messages[{}]: expected a JSON object", i);
    const DictData& message = items[i].dict();
    const Value* role = message.find(std::string_view("role"));
    if (role == nullptr) raise(ErrorCode::kInvalidArgument, "messages[{}]: no \"role\"", i);
    if (!role->is_string()) raise(ErrorCode::kInvalidArgument, "messages[{}].role: expected a string", i);
    if (const Value* content = message.find(std::string_view("content"))) {
      if (!content->is_string() && !content->is_none() && !content->is_list()) {
        raise(ErrorCode::kInvalidArgument, "messages[{}].content: expected a string, null or a list of parts", i);
      }
    }
    if (const Value* calls = message.find(std::string_view("tool_calls")); calls != nullptr && !calls->is_list() && !calls->is_none()) {
      raise(ErrorCode::kInvalidArgument, "messages[{}].tool_calls: expected a list", i);
    }
  }
  return render_with(impl_->parsed, impl_->bos_token, impl_->eos_token, std::move(messages), options);
}

namespace {

std::optional<std::string> read_file_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::string detail::special_token_text(const Vocabulary& vocab, std::int32_t id) {
  if (id < 0 || id >= vocab.size()) return {};
  const std::string& piece = vocab.pieces[static_cast<std::size_t>(id)];
  const TokenType type = vocab.types.empty() ? TokenType::kNormal : vocab.types[static_cast<std::size_t>(id)];
  if (type == TokenType::kControl || type == TokenType::kUserDefined || type == TokenType::kUnknown) return piece;
  std::string text;
  if (vocab.model == "gpt2") {
    detail::append_byte_level_decoded(piece, text);
    return text;
  }
  for (std::size_t at = 0; at < piece.size();) {
    if (piece.compare(at, 3, "\xE2\x96\x81") == 0) {
      text.push_back(' ');
      at += 3;
    } else {
      text.push_back(piece[at++]);
    }
  }
  return text;
}

namespace {

// transformers' view of a Hugging Face folder: tokenizer_config.json's chat_template (a string,
// or a list of named templates of which "default" is used), else chat_template.jinja, else
// chat_template.json; bos_token / eos_token from tokenizer_config.json (a string, an
// AddedToken object or null).
ChatTemplate load_hf_chat_template(const std::filesystem::path& folder) {
  using Json = nlohmann::json;
  const std::filesystem::path config_path = folder / "tokenizer_config.json";
  const std::string config_name = config_path.string();
  Json config = Json::object();
  if (const std::optional<std::string> text = read_file_text(config_path)) {
    try {
      config = Json::parse(*text);
    } catch (const Json::exception& e) {
      raise(ErrorCode::kInvalidModel, "{}: malformed JSON: {}", config_name, e.what());
    }
    if (!config.is_object()) raise(ErrorCode::kInvalidModel, "{}: expected a JSON object", config_name);
  }
  const auto token = [&](const char* key) -> std::string {
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) return {};
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
    raise(ErrorCode::kInvalidModel, "{}: {} is neither a string nor an AddedToken object", config_name, key);
  };
  std::string source;
  std::string origin;
  if (const auto it = config.find("chat_template"); it != config.end() && !it->is_null()) {
    origin = config_name + ": chat_template";
    if (it->is_string()) {
      source = it->get<std::string>();
    } else if (it->is_array()) {
      for (std::size_t i = 0; i < it->size(); ++i) {
        const Json& entry = (*it)[i];
        if (!entry.is_object() || !entry.contains("template") || !entry["template"].is_string()) {
          raise(ErrorCode::kInvalidModel, "{}: chat_template[{}] is not a {{\"name\", \"template\"}} object", config_name, i);
        }
        if (i == 0 || (entry.contains("name") && entry["name"] == "default")) source = entry["template"].get<std::string>();
      }
    } else {
      raise(ErrorCode::kInvalidModel, "{}: chat_template is neither a string nor a list", config_name);
    }
  } else if (const std::optional<std::string> jinja = read_file_text(folder / "chat_template.jinja")) {
    source = *jinja;
    origin = (folder / "chat_template.jinja").string();
  } else if (const std::optional<std::string> json = read_file_text(folder / "chat_template.json")) {
    origin = (folder / "chat_template.json").string();
    try {
      source = Json::parse(*json).at("chat_template").get<std::string>();
    } catch (const Json::exception& e) {
      raise(ErrorCode::kInvalidModel, "{}: no chat_template string: {}", origin, e.what());
    }
  } else {
    raise(ErrorCode::kUnsupported, "{}: the model has no chat template (no chat_template in {}, no chat_template.jinja)",
          folder.string(), config_name);
  }
  return ChatTemplate(source, origin, token("bos_token"), token("eos_token"));
}

}  // namespace

ChatTemplate load_chat_template(const std::string& model_path) {
  const std::filesystem::path path(model_path);
  if (std::filesystem::is_directory(path)) return load_hf_chat_template(path);
  if (path.filename() == "tokenizer_config.json" || path.filename() == "tokenizer.json") {
    return load_hf_chat_template(path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path());
  }
  // The vocabulary alone: a chat template does not need a tokenizer this build can run.
  const Vocabulary vocab = read_vocabulary(gguf::File::open(model_path));
  if (vocab.chat_template.empty()) {
    raise(ErrorCode::kUnsupported, "{}: the model has no chat template (no tokenizer.chat_template key)", model_path);
  }
  return ChatTemplate(vocab.chat_template, model_path + ": tokenizer.chat_template",
                      detail::special_token_text(vocab, vocab.bos), detail::special_token_text(vocab, vocab.eos));
}

}  // namespace sitsrt
