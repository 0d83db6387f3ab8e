#include "chat/value.hpp"

#include "chat/unicode.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <algorithm>

namespace sitsrt::chat {

void fault(Fault kind, std::string message) { throw RenderFault{kind, std::move(message)}; }

Value Value::undefined(std::string message, bool unsafe) {
  Value v;
  v.storage_ = std::make_shared<const UndefinedData>(UndefinedData{std::move(message), unsafe});
  return v;
}

Value Value::none() noexcept {
  Value v;
  v.storage_ = std::monostate{};
  return v;
}

Value Value::boolean(bool value) noexcept {
  Value v;
  v.storage_ = value;
  return v;
}

Value Value::integer(std::int64_t value) noexcept {
  Value v;
  v.storage_ = value;
  return v;
}

Value Value::number(double value) noexcept {
  Value v;
  v.storage_ = value;
  return v;
}

Value Value::string(std::string text, bool markup) {
  Value v;
  v.storage_ = std::make_shared<const std::string>(std::move(text));
  v.markup_ = markup;
  return v;
}

Value Value::sequence(std::vector<Value> items, SeqKind kind) {
  std::uint32_t depth = 0;
  for (const Value& item : items) depth = std::max(depth, item.depth());
  if (depth + 1 > kMaxNesting) fault(Fault::kLimit, "lists and dicts nest deeper than {} levels", kMaxNesting);
  Value v;
  v.storage_ = std::make_shared<const ListData>(ListData{kind, std::move(items), depth + 1});
  return v;
}

Value Value::mapping(DictData dict) {
  std::uint32_t depth = 0;
  for (const auto& [key, value] : dict.entries) depth = std::max({depth, key.depth(), value.depth()});
  if (depth + 1 > kMaxNesting) fault(Fault::kLimit, "lists and dicts nest deeper than {} levels", kMaxNesting);
  dict.depth = depth + 1;
  Value v;
  v.storage_ = std::make_shared<const DictData>(std::move(dict));
  return v;
}

Value Value::object(Object* object) noexcept {
  Value v;
  v.storage_ = object;
  return v;
}

bool Value::is_list() const noexcept { return is_sequence() && list().kind == SeqKind::kList; }
bool Value::is_tuple() const noexcept {
  return is_sequence() && (list().kind == SeqKind::kTuple || list().kind == SeqKind::kGroupTuple);
}
bool Value::is_range() const noexcept { return is_sequence() && list().kind == SeqKind::kRange; }

Value Value::range(std::int64_t start, std::int64_t stop, std::int64_t step) {
  ListData data;
  data.kind = SeqKind::kRange;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) data.items.push_back(Value::integer(i));
  data.range_start = start;
  data.range_stop = stop;
  data.range_step = step;
  Value v;
  v.storage_ = std::make_shared<const ListData>(std::move(data));
  return v;
}

double Value::float_value() const {
  if (is_float()) return as_float();
  return static_cast<double>(int_value());
}

std::string Value::undefined_message() const {
  const auto& data = std::get<std::shared_ptr<const UndefinedData>>(storage_);
  return data ? data->message : std::string("the value is undefined");
}

bool Value::undefined_is_unsafe() const noexcept {
  const auto* data = std::get_if<std::shared_ptr<const UndefinedData>>(&storage_);
  return data != nullptr && *data && (*data)->unsafe;
}

std::uint32_t Value::depth() const noexcept {
  if (is_sequence()) return list().depth;
  if (is_dict()) return dict().depth;
  return 0;
}

void Value::raise_undefined() const {
  fault(undefined_is_unsafe() ? Fault::kSecurity : Fault::kUndefined, undefined_message());
}

const Value* DictData::find(const Value& key) const {
  const auto it = index.find(hash_key(key));
  return it == index.end() ? nullptr : &entries[it->second].second;
}

const Value* DictData::find(std::string_view key) const {
  std::string hashed = "s";
  hashed += key;
  const auto it = index.find(hashed);
  return it == index.end() ? nullptr : &entries[it->second].second;
}

void DictData::set(Value key, Value value) {
  std::string hashed = hash_key(key);
  const auto [it, inserted] = index.try_emplace(std::move(hashed), entries.size());
  if (inserted) {
    entries.emplace_back(std::move(key), std::move(value));
  } else {
    entries[it->second].second = std::move(value);
  }
}

std::optional<Value> Object::attribute(Interpreter&, std::string_view) { return std::nullopt; }

Value Object::call(Interpreter&, CallArgs) { fault(Fault::kType, "'{}' object is not callable", type_name()); }

std::vector<Value> IteratorObject::drain() {
  std::vector<Value> rest(items_.begin() + static_cast<std::ptrdiff_t>(position_), items_.end());
  position_ = items_.size();
  return rest;
}

std::optional<Value> IteratorObject::next() {
  if (position_ >= items_.size()) return std::nullopt;
  return items_[position_++];
}

std::string type_name(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return value.is_markup() ? "Markup" : "str";
    case Value::Kind::kList:
      switch (value.list().kind) {
        case SeqKind::kList: return "list";
        case SeqKind::kTuple: return "tuple";
        case SeqKind::kGroupTuple: return "_GroupTuple";
        case SeqKind::kRange: return "range";
        case SeqKind::kDictKeys: return "dict_keys";
        case SeqKind::kDictValues: return "dict_values";
        case SeqKind::kDictItems: return "dict_items";
      }
      return "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kObject: return value.object()->type_name();
  }
  return "object";
}

bool truthy(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return value.as_bool();
    case Value::Kind::kInt: return value.as_int() != 0;
    case Value::Kind::kFloat: return value.as_float() != 0.0;
    case Value::Kind::kString: return !value.as_string().empty();
    case Value::Kind::kList: return !value.list().items.empty();
    case Value::Kind::kDict: return value.dict().size() != 0;
    case Value::Kind::kObject: return true;
  }
  return true;
}

std::string float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  const std::string_view text(buffer, static_cast<std::size_t>(result.ptr - buffer));
  // text: [-]d[.ddd]e(+|-)XX, the shortest digits that read back as `value`.
  const bool negative = text.front() == '-';
  const std::size_t e_at = text.find('e');
  std::string digits;
  for (const char c : text.substr(negative ? 1 : 0, e_at - (negative ? 1 : 0))) {
    if (c != '.') digits.push_back(c);
  }
  const int exponent = std::atoi(std::string(text.substr(e_at + 1)).c_str());
  std::string out = negative ? "-" : "";
  // Python's repr switches to exponent notation below 1e-4 and from 1e16 on.
  if (exponent < -4 || exponent >= 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += exponent < 0 ? "e-" : "e+";
    const int magnitude = std::abs(exponent);
    if (magnitude < 10) out += '0';
    out += std::to_string(magnitude);
  } else if (exponent >= 0) {
    const auto integer_digits = static_cast<std::size_t>(exponent) + 1;
    if (digits.size() <= integer_digits) {
      out += digits + std::string(integer_digits - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, integer_digits) + "." + digits.substr(integer_digits);
    }
  } else {
    out += "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
  }
  return out;
}

std::string string_repr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (std::size_t i = 0; i < text.size();) {
    const unicode::Decoded d = unicode::decode_at(text, i);
    const char32_t c = d.code_point;
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if (c < 0x7F || unicode::is_printable(c)) {
      out.append(text.substr(i, d.bytes));
    } else if (c <= 0xFF) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if (c <= 0xFFFF) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(c));
    }
    i += d.bytes;
  }
  out += quote;
  return out;
}

namespace {

void append_items_repr(std::string& out, const std::vector<Value>& items) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    append_repr(out, items[i]);
  }
}

}  // namespace

void append_repr(std::string& out, const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: out += "Undefined"; return;
    case Value::Kind::kNone: out += "None"; return;
    case Value::Kind::kBool: out += value.as_bool() ? "True" : "False"; return;
    case Value::Kind::kInt: out += std::to_string(value.as_int()); return;
    case Value::Kind::kFloat: out += float_repr(value.as_float()); return;
    case Value::Kind::kString:
      if (value.is_markup()) {
        out += "Markup(" + string_repr(value.as_string()) + ")";
      } else {
        out += string_repr(value.as_string());
      }
      return;
    case Value::Kind::kList: {
      const ListData& list = value.list();
      switch (list.kind) {
        case SeqKind::kList:
          out += '[';
          append_items_repr(out, list.items);
          out += ']';
          return;
        case SeqKind::kTuple:
        case SeqKind::kGroupTuple:
          out += '(';
          append_items_repr(out, list.items);
          if (list.items.size() == 1) out += ',';
          out += ')';
          return;
        case SeqKind::kRange:
          out += fmt::format("range({}, {}", list.range_start, list.range_stop);
          if (list.range_step != 1) out += fmt::format(", {}", list.range_step);
          out += ')';
          return;
        case SeqKind::kDictKeys: out += "dict_keys(["; break;
        case SeqKind::kDictValues: out += "dict_values(["; break;
        case SeqKind::kDictItems: out += "dict_items(["; break;
      }
      append_items_repr(out, list.items);
      out += "])";
      return;
    }
    case Value::Kind::kDict: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : value.dict().entries) {
        if (!first) out += ", ";
        first = false;
        append_repr(out, key);
        out += ": ";
        append_repr(out, item);
      }
      out += '}';
      return;
    }
    case Value::Kind::kObject: {
      const std::optional<std::string> text = value.object()->repr();
      if (!text) {
        fault(Fault::kUnsupported, "printing a '{}' object: Python prints its memory address", type_name(value));
      }
      out += *text;
      return;
    }
  }
}

void append_str(std::string& out, const Value& value) {
  if (value.is_undefined()) return;
  if (value.is_string()) {
    out += value.as_string();
    return;
  }
  append_repr(out, value);
}

std::string to_str(const Value& value) {
  if (value.is_string()) return value.as_string();
  std::string out;
  append_str(out, value);
  return out;
}

std::string to_repr(const Value& value) {
  std::string out;
  append_repr(out, value);
  return out;
}

namespace {

// Python compares int and float exactly; long double holds every int64 exactly on x86-64.
long double exact(const Value& v) {
  return v.is_float() ? static_cast<long double>(v.as_float()) : static_cast<long double>(v.int_value());
}

}  // namespace

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.int_value() == b.int_value();
    return exact(a) == exact(b);
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const ListData& x = a.list();
      const ListData& y = b.list();
      const auto family = [](SeqKind k) { return k == SeqKind::kGroupTuple ? SeqKind::kTuple : k; };
      if (family(x.kind) != family(y.kind) || x.items.size() != y.items.size()) return false;
      for (std::size_t i = 0; i < x.items.size(); ++i) {
        if (!equals(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const DictData& x = a.dict();
      const DictData& y = b.dict();
      if (x.size() != y.size()) return false;
      for (const auto& [key, item] : x.entries) {
        const Value* other = y.find(key);
        if (other == nullptr || !equals(item, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kObject: return a.object() == b.object();
    default: return false;
  }
}

bool less(const Value& a, const Value& b, std::string_view op) {
  if (a.is_undefined()) a.raise_undefined();
  if (b.is_undefined()) b.raise_undefined();
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.int_value() < b.int_value();
    return exact(a) < exact(b);
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 keeps code point order
  if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less(x[i], y[i], op);
    }
    return x.size() < y.size();
  }
  fault(Fault::kType, "'{}' not supported between instances of '{}' and '{}'", op, type_name(a), type_name(b));
}

namespace {

// tag + text; built by append because GCC 12 misreports `"x" + string` (-Wrestrict, PR105329).
std::string tagged(char tag, std::string_view text) {
  std::string out(1, tag);
  out.append(text);
  return out;
}

}  // namespace

std::string hash_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kUndefined: return "u";
    case Value::Kind::kNone: return "n";
    case Value::Kind::kBool:
    case Value::Kind::kInt: return tagged('i', std::to_string(key.int_value()));
    case Value::Kind::kFloat: {
      const double f = key.as_float();
      if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 9.2e18) {
        return tagged('i', std::to_string(static_cast<std::int64_t>(f)));
      }
      return tagged('f', float_repr(f));
    }
    case Value::Kind::kString: return tagged('s', key.as_string());
    case Value::Kind::kList:
      if (key.is_tuple()) {
        std::string out = "t(";
        for (const Value& item : key.list().items) {
          const std::string part = hash_key(item);
          out += std::to_string(part.size()) + ":" + part;
        }
        return out + ")";
      }
      break;
    case Value::Kind::kDict: break;
    case Value::Kind::kObject: return fmt::format("o{}", static_cast<const void*>(key.object()));
  }
  fault(Fault::kType, "unhashable type: '{}'", type_name(key));
}

}  // namespace sitsrt::chat
