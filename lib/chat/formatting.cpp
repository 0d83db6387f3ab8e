// Python's text formatting the templates reach: json.dumps (transformers' tojson), markupsafe's
// escape(), printf-style str % args and str.format(); and the argument binding of builtins.
#include "chat/builtins.hpp"
#include "chat/interpreter.hpp"
#include "chat/unicode.hpp"

#include <algorithm>
#include <cmath>

namespace sitsrt::chat {

ArgReader::ArgReader(std::string_view function, CallArgs& args, std::initializer_list<std::string_view> names)
    : function_(function), names_(names), bound_(names.size(), nullptr) {
  if (args.positional.size() > names_.size()) {
    fault(Fault::kType, "{}() takes at most {} arguments ({} given)", function_, names_.size() + 1, args.positional.size() + 1);
  }
  for (std::size_t i = 0; i < args.positional.size(); ++i) bound_[i] = &args.positional[i];
  for (const auto& [name, value] : args.keywords) {
    const auto it = std::find(names_.begin(), names_.end(), name);
    if (it == names_.end()) fault(Fault::kType, "{}() got an unexpected keyword argument '{}'", function_, name);
    const auto index = static_cast<std::size_t>(it - names_.begin());
    if (bound_[index] != nullptr) fault(Fault::kType, "{}() got multiple values for argument '{}'", function_, name);
    bound_[index] = &value;
  }
}

const Value* ArgReader::get(std::size_t index) const { return index < bound_.size() ? bound_[index] : nullptr; }

Value ArgReader::get_or(std::size_t index, Value fallback) const {
  const Value* value = get(index);
  return value != nullptr ? *value : std::move(fallback);
}

const Value& ArgReader::required(std::size_t index) const {
  const Value* value = get(index);
  if (value == nullptr) fault(Fault::kType, "{}() missing required argument '{}'", function_, names_[index]);
  return *value;
}

std::int64_t ArgReader::int_or(std::size_t index, std::int64_t fallback) const {
  const Value* value = get(index);
  if (value == nullptr) return fallback;
  if (value->is_int() || value->is_bool()) return value->int_value();
  if (value->is_undefined()) value->raise_undefined();
  fault(Fault::kType, "{}(): '{}' must be an integer, not '{}'", function_, names_[index], type_name(*value));
}

bool ArgReader::bool_or(std::size_t index, bool fallback) const {
  const Value* value = get(index);
  return value != nullptr ? truthy(*value) : fallback;
}

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\'': out += "&#39;"; break;
      case '"': out += "&#34;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

namespace {

void json_string(std::string& out, std::string_view text, bool ensure_ascii) {
  out.push_back('"');
  for (std::size_t i = 0; i < text.size();) {
    const unicode::Decoded d = unicode::decode_at(text, i);
    const char32_t c = d.code_point;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else if (ensure_ascii && c > 0x7F) {
          if (c >= 0x10000) {
            const char32_t v = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", static_cast<unsigned>(0xD800 | (v >> 10)),
                               static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
          }
        } else {
          out.append(text.substr(i, d.bytes));
        }
    }
    i += d.bytes;
  }
  out.push_back('"');
}

std::string json_float(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value < 0 ? "-Infinity" : "Infinity";
  return float_repr(value);
}

class JsonWriter {
 public:
  JsonWriter(const JsonDumpOptions& options, std::string& out) : options_(options), out_(out) {}

  void write(const Value& value, int level) {
    switch (value.kind()) {
      case Value::Kind::kNone: out_ += "null"; return;
      case Value::Kind::kBool: out_ += value.as_bool() ? "true" : "false"; return;
      case Value::Kind::kInt: out_ += std::to_string(value.as_int()); return;
      case Value::Kind::kFloat: out_ += json_float(value.as_float()); return;
      case Value::Kind::kString: json_string(out_, value.as_string(), options_.ensure_ascii); return;
      case Value::Kind::kList:
        if (value.is_list() || value.is_tuple()) {
          write_array(value.list().items, level);
          return;
        }
        break;
      case Value::Kind::kDict: write_object(value.dict(), level); return;
      default: break;
    }
    fault(Fault::kType, "Object of type {} is not JSON serializable", type_name(value));
  }

 private:
  void newline(int level) {
    if (!options_.indent) return;
    out_.push_back('\n');
    for (int i = 0; i < level; ++i) out_ += *options_.indent;
  }

  void write_array(const std::vector<Value>& items, int level) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    out_.push_back('[');
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i) out_ += options_.item_separator;
      newline(level + 1);
      write(items[i], level + 1);
    }
    newline(level);
    out_.push_back(']');
  }

  static std::string key_text(const Value& key) {
    switch (key.kind()) {
      case Value::Kind::kString: return key.as_string();
      case Value::Kind::kBool: return key.as_bool() ? "true" : "false";
      case Value::Kind::kNone: return "null";
      case Value::Kind::kInt: return std::to_string(key.as_int());
      case Value::Kind::kFloat: return json_float(key.as_float());
      default: fault(Fault::kType, "keys must be str, int, float, bool or None, not {}", type_name(key));
    }
  }

  void write_object(const DictData& dict, int level) {
    if (dict.size() == 0) {
      out_ += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& entry : dict.entries) entries.push_back(&entry);
    if (options_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(), [](const auto* a, const auto* b) { return less(a->first, b->first); });
    }
    out_.push_back('{');
    bool first = true;
    for (const auto* entry : entries) {
      if (!first) out_ += options_.item_separator;
      first = false;
      newline(level + 1);
      json_string(out_, key_text(entry->first), options_.ensure_ascii);
      out_ += options_.key_separator;
      write(entry->second, level + 1);
    }
    newline(level);
    out_.push_back('}');
  }

  const JsonDumpOptions& options_;
  std::string& out_;
};

}  // namespace

std::string json_dumps(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  JsonWriter(options, out).write(value, 0);
  return out;
}

namespace {

// A Python format spec ([[fill]align][sign][#][0][width][,][.precision][type]) applied through
// fmt, whose spec language is Python's; anything fmt rejects is reported as unsupported.
std::string format_with_spec(const Value& value, std::string_view spec) {
  if (spec.empty()) return to_str(value);
  try {
    const std::string pattern = "{:" + std::string(spec) + "}";
    if (value.is_string()) return fmt::format(fmt::runtime(pattern), value.as_string());
    if (value.is_int()) return fmt::format(fmt::runtime(pattern), value.as_int());
    if (value.is_float()) return fmt::format(fmt::runtime(pattern), value.as_float());
  } catch (const fmt::format_error&) {
  }
  fault(Fault::kUnsupported, "the format spec '{}' for a '{}' value", spec, type_name(value));
}

}  // namespace

std::string brace_format(Interpreter& interpreter, std::string_view format, const CallArgs& args) {
  std::string out;
  std::size_t auto_index = 0;
  bool manual = false;
  for (std::size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      fault(Fault::kType, "Single '}}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const std::size_t close = format.find('}', i);
    if (close == std::string_view::npos) fault(Fault::kType, "Single '{{' encountered in format string");
    std::string_view field = format.substr(i + 1, close - i - 1);
    i = close;
    std::string_view spec;
    char conversion = 0;
    if (const std::size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (const std::size_t bang = field.find('!'); bang != std::string_view::npos) {
      if (bang + 2 != field.size()) fault(Fault::kType, "expected ':' after conversion specifier");
      conversion = field[bang + 1];
      field = field.substr(0, bang);
    }
    std::size_t name_end = 0;
    while (name_end < field.size() && field[name_end] != '.' && field[name_end] != '[') ++name_end;
    const std::string_view first = field.substr(0, name_end);
    Value value;
    if (first.empty() || std::all_of(first.begin(), first.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      std::size_t index = 0;
      if (first.empty()) {
        if (manual) fault(Fault::kType, "cannot switch from manual field specification to automatic field numbering");
        index = auto_index++;
      } else {
        manual = true;
        index = static_cast<std::size_t>(std::stoul(std::string(first)));
      }
      if (index >= args.positional.size()) fault(Fault::kType, "Replacement index {} out of range for positional args tuple", index);
      value = args.positional[index];
    } else {
      const auto it = std::find_if(args.keywords.begin(), args.keywords.end(), [&](const auto& kw) { return kw.first == first; });
      if (it == args.keywords.end()) fault(Fault::kType, "KeyError: '{}'", first);
      value = it->second;
    }
    // The rest of the field: .attr and [key] lookups, sandboxed like jinja2's SandboxedFormatter.
    for (std::size_t p = name_end; p < field.size();) {
      if (field[p] == '.') {
        std::size_t q = p + 1;
        while (q < field.size() && field[q] != '.' && field[q] != '[') ++q;
        value = interpreter.get_attr(value, field.substr(p + 1, q - p - 1));
        p = q;
      } else {
        const std::size_t q = field.find(']', p);
        if (q == std::string_view::npos) fault(Fault::kType, "Missing ']' in format string");
        const std::string_view key = field.substr(p + 1, q - p - 1);
        const bool numeric = !key.empty() && std::all_of(key.begin(), key.end(), [](char d) { return d >= '0' && d <= '9'; });
        value = interpreter.get_item(value, numeric ? Value::integer(std::stoll(std::string(key))) : Value::string(std::string(key)));
        p = q + 1;
      }
    }
    if (value.is_undefined()) value.raise_undefined();
    if (conversion == 'r' || conversion == 'a') {
      value = Value::string(to_repr(value));
    } else if (conversion == 's') {
      value = Value::string(to_str(value));
    } else if (conversion != 0) {
      fault(Fault::kType, "Unknown conversion specifier {}", conversion);
    }
    out += format_with_spec(value, spec);
  }
  interpreter.charge_string(out.size());
  return out;
}

std::string percent_format(Interpreter& interpreter, std::string_view format, const Value& args) {
  std::vector<Value> positional;
  const DictData* mapping = nullptr;
  if (args.is_tuple()) {
    positional = args.list().items;
  } else if (args.is_dict()) {
    mapping = &args.dict();
    positional.push_back(args);
  } else {
    positional.push_back(args);
  }
  std::size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    if (++i >= format.size()) fault(Fault::kType, "incomplete format");
    Value value;
    bool have_value = false;
    if (format[i] == '(') {
      const std::size_t close = format.find(')', i);
      if (close == std::string_view::npos) fault(Fault::kType, "incomplete format key");
      if (mapping == nullptr) fault(Fault::kType, "format requires a mapping");
      const Value* found = mapping->find(format.substr(i + 1, close - i - 1));
      if (found == nullptr) fault(Fault::kType, "KeyError: '{}'", format.substr(i + 1, close - i - 1));
      value = *found;
      have_value = true;
      used_mapping = true;
      i = close + 1;
    }
    std::string spec;
    while (i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string_view::npos) spec.push_back(format[i++]);
    while (i < format.size() && format[i] >= '0' && format[i] <= '9') spec.push_back(format[i++]);
    if (i < format.size() && format[i] == '.') {
      spec.push_back(format[i++]);
      while (i < format.size() && format[i] >= '0' && format[i] <= '9') spec.push_back(format[i++]);
    }
    if (i >= format.size()) fault(Fault::kType, "incomplete format");
    const char type = format[i];
    if (type == '%') {
      out.push_back('%');
      continue;
    }
    if (!have_value) {
      if (next >= positional.size()) fault(Fault::kType, "not enough arguments for format string");
      value = positional[next++];
    }
    if (value.is_undefined() && type != 's') value.raise_undefined();
    // Python's printf flags map onto a fmt spec: '-' left-aligns, '0' pads with zeros.
    std::string fmt_spec;
    std::string_view rest = spec;
    bool left = false;
    bool zero = false;
    std::string sign;
    while (!rest.empty() && std::string_view("-+ #0").find(rest.front()) != std::string_view::npos) {
      if (rest.front() == '-') left = true;
      if (rest.front() == '0') zero = true;
      if (rest.front() == '+' || rest.front() == ' ') sign = std::string(1, rest.front());
      rest.remove_prefix(1);
    }
    const std::string width_precision(rest);
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        const std::string text = type == 's' ? to_str(value) : to_repr(value);
        out += format_with_spec(Value::string(text), (left ? "<" : ">") + width_precision);
        break;
      }
      case 'x':
      case 'X':
      case 'o':
      case 'd':
      case 'i':
      case 'u': {
        if (!value.is_number()) fault(Fault::kType, "%{} format: a real number is required, not {}", type, type_name(value));
        const Value number = Value::integer(value.is_float() ? static_cast<std::int64_t>(value.as_float()) : value.int_value());
        const char int_type = type == 'x' || type == 'X' || type == 'o' ? type : 'd';
        if (int_type != 'd' && !value.is_int() && !value.is_bool()) {
          fault(Fault::kType, "%{} format: an integer is required, not {}", type, type_name(value));
        }
        fmt_spec = std::string(left ? "<" : (zero ? "" : ">")) + sign + (zero && !left ? "0" : "") + width_precision + int_type;
        out += format_with_spec(number, fmt_spec);
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!value.is_number()) fault(Fault::kType, "must be real number, not {}", type_name(value));
        const std::string precision = width_precision.find('.') == std::string::npos ? width_precision + ".6" : width_precision;
        fmt_spec = std::string(left ? "<" : (zero ? "" : ">")) + sign + (zero && !left ? "0" : "") + precision + type;
        out += format_with_spec(Value::number(value.float_value()), fmt_spec);
        break;
      }
      default: fault(Fault::kUnsupported, "the printf-style conversion '%{}'", type);
    }
  }
  if (!used_mapping && mapping == nullptr && next < positional.size()) {
    fault(Fault::kType, "not all arguments converted during string formatting");
  }
  interpreter.charge_string(out.size());
  return out;
}

}  // namespace sitsrt::chat
