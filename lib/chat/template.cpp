#include "chat/template.hpp"

#include "chat/lexer.hpp"
#include "chat/parser.hpp"
#include "chat/unicode.hpp"
#include "core/check.hpp"

#include <nlohmann/json.hpp>

#include <new>

namespace sitsrt::chat {

Template::Template(std::string_view source, std::string origin) : origin_(std::move(origin)) {
  if (!unicode::is_valid_utf8(source)) raise(ErrorCode::kInvalidArgument, "{}: the template is not valid UTF-8", origin_);
  try {
    ast_ = parse_template(normalize_template_source(source));
  } catch (const ParseError& e) {
    raise(e.code, "{}:{}:{}: {}", origin_, e.pos.line, e.pos.column, e.message);
  }
}

std::string Template::render(const DictData& variables, const RenderLimits& limits,
                             std::optional<std::int64_t> now_unix_seconds) const {
  Interpreter interpreter(ast_, limits, now_unix_seconds);
  try {
    return interpreter.render(variables);
  } catch (const RenderFault& fault) {
    const SourcePos pos = interpreter.position();
    const char* kind = "";
    switch (fault.kind) {
      case Fault::kType: kind = ""; break;
      case Fault::kUndefined: kind = "UndefinedError: "; break;
      case Fault::kSecurity: kind = "SecurityError: "; break;
      case Fault::kRaised: kind = "raise_exception: "; break;
      case Fault::kLimit: kind = "render limit: "; break;
      case Fault::kUnsupported: kind = "unsupported: "; break;
    }
    raise(fault.kind == Fault::kUnsupported ? ErrorCode::kUnsupported : ErrorCode::kInvalidArgument, "{}:{}:{}: {}{}",
          origin_, pos.line, pos.column, kind, fault.message);
  } catch (const std::bad_alloc&) {
    raise(ErrorCode::kOutOfMemory, "{}: out of memory while rendering", origin_);
  }
}

namespace {

using Json = nlohmann::ordered_json;

Value convert(const Json& json, std::string_view what, std::uint32_t depth) {
  if (depth > kMaxNesting) raise(ErrorCode::kInvalidArgument, "{}: JSON nests deeper than {} levels", what, kMaxNesting);
  switch (json.type()) {
    case Json::value_t::null: return Value::none();
    case Json::value_t::boolean: return Value::boolean(json.get<bool>());
    case Json::value_t::number_integer: return Value::integer(json.get<std::int64_t>());
    case Json::value_t::number_unsigned: {
      const auto value = json.get<std::uint64_t>();
      if (value > static_cast<std::uint64_t>(INT64_MAX)) {
        raise(ErrorCode::kUnsupported, "{}: an integer beyond 64 bits (Python integers are unbounded)", what);
      }
      return Value::integer(static_cast<std::int64_t>(value));
    }
    case Json::value_t::number_float: return Value::number(json.get<double>());
    case Json::value_t::string: return Value::string(json.get<std::string>());
    case Json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const Json& item : json) items.push_back(convert(item, what, depth + 1));
      return Value::sequence(std::move(items));
    }
    case Json::value_t::object: {
      DictData dict;
      for (const auto& [key, item] : json.items()) dict.set(Value::string(key), convert(item, what, depth + 1));
      return Value::mapping(std::move(dict));
    }
    default: raise(ErrorCode::kInvalidArgument, "{}: unsupported JSON value", what);
  }
}

// Counts bracket nesting before parsing, so a hostile document is refused before any
// recursion over it.
void check_nesting(std::string_view text, std::string_view what) {
  std::uint32_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxNesting) raise(ErrorCode::kInvalidArgument, "{}: JSON nests deeper than {} levels", what, kMaxNesting);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

}  // namespace

Value value_from_json(std::string_view json_text, std::string_view what) {
  check_nesting(json_text, what);
  Json json;
  try {
    json = Json::parse(json_text);
  } catch (const Json::exception& e) {
    raise(ErrorCode::kInvalidArgument, "{}: malformed JSON: {}", what, e.what());
  }
  try {
    return convert(json, what, 0);
  } catch (const RenderFault& fault) {
    raise(ErrorCode::kInvalidArgument, "{}: {}", what, fault.message);
  }
}

}  // namespace sitsrt::chat
