// jinja2's builtin filters (jinja2/filters.py) for an environment without autoescape, and
// transformers' tojson override.
#include "chat/builtins.hpp"
#include "chat/interpreter.hpp"
#include "chat/objects.hpp"
#include "chat/unicode.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <set>

namespace sitsrt::chat {

std::string python_title(std::string_view text);
std::string python_capitalize(std::string_view text);

namespace {

// markupsafe.soft_str: a Markup string stays Markup, anything else becomes str().
Value soft_str(Interpreter& interpreter, const Value& value) {
  if (value.is_string()) return value;
  return interpreter.make_string(to_str(value));
}

Value iterator(Interpreter& interpreter, std::string type, std::vector<Value> items) {
  return Value::object(interpreter.make<IteratorObject>(std::move(type), std::move(items)));
}

Value lowered(const Value& v) { return v.is_string() ? Value::string(unicode::lower(v.as_string())) : v; }

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0 (environment.getitem).
std::vector<Value> attribute_parts(const Value& attribute) {
  std::vector<Value> parts;
  if (attribute.is_none()) return parts;
  if (!attribute.is_string()) return {attribute};
  const std::string& text = attribute.as_string();
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = text.find('.', start);
    const std::string part = text.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    std::int64_t number = 0;
    if (digits && std::from_chars(part.data(), part.data() + part.size(), number).ec == std::errc()) {
      parts.push_back(Value::integer(number));
    } else {
      parts.push_back(Value::string(part));
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

Value get_path(Interpreter& interpreter, Value item, const std::vector<Value>& parts, const Value* fallback = nullptr) {
  for (const Value& part : parts) {
    item = interpreter.get_item(item, part);
    if (fallback != nullptr && item.is_undefined()) item = *fallback;
  }
  return item;
}

// ---- filters ----

Value f_abs(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader("abs", args, {});
  if (v.is_float()) return Value::number(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    if (v.int_value() == INT64_MIN) fault(Fault::kUnsupported, "integer overflow (Python integers are unbounded)");
    return Value::integer(std::llabs(v.int_value()));
  }
  if (v.is_undefined()) v.raise_undefined();
  fault(Fault::kType, "bad operand type for abs(): '{}'", type_name(v));
}

Value f_attr(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader reader("attr", args, {"name"});
  const Value& name = reader.required(0);
  if (!name.is_string()) fault(Fault::kType, "attribute name must be string");
  if (v.is_undefined()) v.raise_undefined();
  // Only Python attributes: unlike obj.name, |attr never falls back to obj[name].
  std::optional<Value> found = v.is_object() ? v.object()->attribute(interpreter, name.as_string())
                                             : builtin_attribute(interpreter, v, name.as_string());
  if (found) return *found;
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(v), name.as_string()));
}

Value f_batch(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader reader("batch", args, {"linecount", "fill_with"});
  const std::int64_t count = reader.int_or(0, 0);
  const Value fill = reader.get_or(1, Value::none());
  std::vector<Value> batches;
  std::vector<Value> current;
  for (Value& item : interpreter.to_list(v)) {
    if (static_cast<std::int64_t>(current.size()) == count) batches.push_back(Value::sequence(std::exchange(current, {})));
    current.push_back(std::move(item));
  }
  if (!current.empty()) {
    if (!fill.is_none()) {
      while (static_cast<std::int64_t>(current.size()) < count) current.push_back(fill);
    }
    batches.push_back(Value::sequence(std::move(current)));
  }
  return iterator(interpreter, "generator", std::move(batches));
}

Value f_capitalize(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader("capitalize", args, {});
  const Value s = soft_str(interpreter, v);
  return interpreter.make_string(python_capitalize(s.as_string()), s.is_markup());
}

Value f_center(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader reader("center", args, {"width"});
  CallArgs inner;
  inner.positional.push_back(Value::integer(reader.int_or(0, 80)));
  return interpreter.call(interpreter.get_attr(soft_str(interpreter, v), "center"), std::move(inner));
}

Value f_length(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader("length", args, {});
  return Value::integer(interpreter.length(v));
}

Value f_default(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader reader("default", args, {"default_value", "boolean"});
  if (v.is_undefined() || (reader.bool_or(1, false) && !truthy(v))) return reader.get_or(0, Value::string(""));
  return v;
}

Value f_dictsort(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader reader("dictsort", args, {"case_sensitive", "by", "reverse"});
  const bool case_sensitive = reader.bool_or(0, false);
  const Value by = reader.get_or(1, Value::string("key"));
  const bool reverse = reader.bool_or(2, false);
  std::size_t position = 0;
  if (by.is_string() && by.as_string() == "value") {
    position = 1;
  } else if (!by.is_string() || by.as_string() != "key") {
    fault(Fault::kType, "You can only sort by either \"key\" or \"value\"");
  }
  if (!v.is_dict()) fault(Fault::kType, "'{}' object has no attribute 'items'", type_name(v));
  std::vector<Value> items;
  for (const auto& [key, value] : v.dict().entries) items.push_back(Value::tuple({key, value}));
  const auto sort_key = [&](const Value& item) {
    const Value& k = item.list().items[position];
    return case_sensitive ? k : lowered(k);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? less(sort_key(b), sort_key(a)) : less(sort_key(a), sort_key(b));
  });
  return Value::sequence(std::move(items));
}

Value f_escape(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader("escape", args, {});
  if (v.is_markup()) return v;
  return interpreter.make_string(html_escape(to_str(v)), true);
}

Value f_forceescape(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader("forceescape", args, {});
  return interpreter.make_string(html_escape(to_str(v)), true);
}

Value f_first(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader("first", args, {});
  if (v.is_object()) {
    if (auto* it = dynamic_cast<IteratorObject*>(v.object())) {
      if (std::optional<Value> item = it->next()) return *item;
      return Value::undefined("No first item, sequence was empty.");
    }
  }
  const std::vector<Value> items = interpreter.to_list(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader("last", args, {});
  if (v.is_object()) fault(Fault::kType, "'{}' object is not reversible", type_name(v));
  const std::vector<Value> items = interpreter.to_list(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

// Python's float() of a str: surrounding whitespace, '_' between digits, inf/nan.
std::optional<double> parse_python_float(std::string_view text) {
  std::string s;
  std::size_t b = 0;
  std::size_t e = text.size();
  while (b < e && unicode::is_space(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && unicode::is_space(static_cast<unsigned char>(text[e - 1]))) --e;
  const std::string_view body = text.substr(b, e - b);
  for (std::size_t i = 0; i < body.size(); ++i) {
    if (body[i] == '_') {
      if (i == 0 || i + 1 == body.size() || !std::isdigit(static_cast<unsigned char>(body[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(body[i + 1]))) {
        return std::nullopt;
      }
      continue;
    }
    s.push_back(body[i]);
  }
  std::string lower = unicode::lower(s);
  std::string_view digits = lower;
  const bool negative = !digits.empty() && digits.front() == '-';
  if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) digits.remove_prefix(1);
  if (digits == "inf" || digits == "infinity") return negative ? -INFINITY : INFINITY;
  if (digits == "nan") return NAN;
  if (digits.empty() || digits.find_first_not_of("0123456789.e+-") != std::string_view::npos) return std::nullopt;
  double value = 0;
  const auto result = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (result.ec != std::errc() || result.ptr != digits.data() + digits.size()) return std::nullopt;
  return negative ? -value : value;
}

Value f_float(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader reader("float", args, {"default"});
  if (v.is_float()) return v;
  if (v.is_int() || v.is_bool()) return Value::number(static_cast<double>(v.int_value()));
  if (v.is_string()) {
    if (const std::optional<double> parsed = parse_python_float(v.as_string())) return Value::number(*parsed);
  }
  return reader.get_or(0, Value::number(0.0));
}

std::optional<std::int64_t> parse_python_int(std::string_view text, int base) {
  std::size_t b = 0;
  std::size_t e = text.size();
  while (b < e && unicode::is_space(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && unicode::is_space(static_cast<unsigned char>(text[e - 1]))) --e;
  std::string_view body = text.substr(b, e - b);
  bool negative = false;
  if (!body.empty() && (body.front() == '+' || body.front() == '-')) {
    negative = body.front() == '-';
    body.remove_prefix(1);
  }
  if (body.size() > 2 && body[0] == '0') {
    const char p = static_cast<char>(body[1] | 0x20);
    if ((p == 'x' && base == 16) || (p == 'o' && base == 8) || (p == 'b' && base == 2)) body.remove_prefix(2);
  }
  std::string digits;
  for (std::size_t i = 0; i < body.size(); ++i) {
    if (body[i] == '_' && i > 0 && i + 1 < body.size() && body[i - 1] != '_') continue;
    digits.push_back(body[i]);
  }
  if (digits.empty()) return std::nullopt;
  std::int64_t value = 0;
  const auto result = std::from_chars(digits.data(), digits.data() + digits.size(), value, base);
  if (result.ec == std::errc::result_out_of_range) fault(Fault::kUnsupported, "integer overflow (Python integers are unbounded)");
  if (result.ec != std::errc() || result.ptr != digits.data() + digits.size()) return std::nullopt;
  return negative ? -value : value;
}

Value f_int(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader reader("int", args, {"default", "base"});
  const Value fallback = reader.get_or(0, Value::integer(0));
  if (v.is_int()) return v;
  if (v.is_bool()) return Value::integer(v.int_value());
  const auto from_float = [&](double d) -> Value {
    if (!std::isfinite(d)) return fallback;
    if (std::fabs(d) >= 9.2e18) fault(Fault::kUnsupported, "integer overflow (Python integers are unbounded)");
    return Value::integer(static_cast<std::int64_t>(d));
  };
  if (v.is_float()) return from_float(v.as_float());
  if (v.is_string()) {
    if (const auto parsed = parse_python_int(v.as_string(), static_cast<int>(reader.int_or(1, 10)))) return Value::integer(*parsed);
    if (const auto parsed = parse_python_float(v.as_string())) return from_float(*parsed);
  }
  return fallback;
}

Value f_format(Interpreter& interpreter, const Value& v, CallArgs& args) {
  if (!args.positional.empty() && !args.keywords.empty()) {
    fault(Fault::kType, "can't handle positional and keyword arguments at the same time");
  }
  Value operands;
  if (!args.keywords.empty()) {
    DictData dict;
    for (auto& [name, value] : args.keywords) dict.set(Value::string(name), value);
    operands = Value::mapping(std::move(dict));
  } else {
    operands = Value::tuple(args.positional);
  }
  return binary_op(interpreter, BinaryOp::kMod, soft_str(interpreter, v), operands);
}

Value f_groupby(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader reader("groupby", args, {"attribute", "default", "case_sensitive"});
  const std::vector<Value> parts = attribute_parts(reader.required(0));
  const Value* fallback = reader.get(1) != nullptr && !reader.get(1)->is_none() ? reader.get(1) : nullptr;
  const bool case_sensitive = reader.bool_or(2, false);
  std::vector<Value> items = interpreter.to_list(v);
  const auto key = [&](const Value& item) {
    const Value k = get_path(interpreter, item, parts, fallback);
    return case_sensitive ? k : lowered(k);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) { return less(key(a), key(b)); });
  std::vector<Value> groups;
  for (std::size_t i = 0; i < items.size();) {
    const Value group_key = key(items[i]);
    std::vector<Value> members;
    std::size_t j = i;
    while (j < items.size() && equals(key(items[j]), group_key)) members.push_back(items[j++]);
    const Value shown = case_sensitive ? group_key : get_path(interpreter, members.front(), parts, fallback);
    groups.push_back(Value::sequence({shown, Value::sequence(std::move(members))}, SeqKind::kGroupTuple));
    i = j;
  }
  return Value::sequence(std::move(groups));
}

// Python's str.splitlines() without keepends.
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size();) {
    const unicode::Decoded d = unicode::decode_at(text, i);
    const char32_t c = d.code_point;
    const bool boundary = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                          c == 0x2028 || c == 0x2029;
    std::size_t next = i + d.bytes;
    if (boundary) {
      lines.push_back(text.substr(start, i - start));
      if (c == '\r' && next < text.size() && text[next] == '\n') ++next;
      start = next;
    }
    i = next;
  }
  if (start < text.size()) lines.push_back(text.substr(start));
  return lines;
}

Value f_indent(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader reader("indent", args, {"width", "first", "blank"});
  const Value width = reader.get_or(0, Value::integer(4));
  const bool first = reader.bool_or(1, false);
  const bool blank = reader.bool_or(2, false);
  std::string indention;
  if (width.is_string()) {
    indention = width.as_string();
  } else if (width.is_int() || width.is_bool()) {
    indention.assign(static_cast<std::size_t>(std::max<std::int64_t>(0, std::min<std::int64_t>(width.int_value(), 1 << 20))), ' ');
  } else {
    fault(Fault::kType, "can't multiply sequence by non-int of type '{}'", type_name(width));
  }
  if (v.is_undefined()) v.raise_undefined();
  if (!v.is_string()) fault(Fault::kType, "unsupported operand type(s) for +=: '{}' and 'str'", type_name(v));
  const std::vector<std::string> lines = split_lines(v.as_string() + "\n");
  std::string out;
  if (blank) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n" + indention;
      out += lines[i];
    }
  } else {
    out = lines.empty() ? std::string() : lines.front();
    for (std::size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indention;
      out += lines[i];
    }
  }
  if (first) out = indention + out;
  return interpreter.make_string(std::move(out), v.is_markup());
}

Value f_join(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader reader("join", args, {"d", "attribute"});
  const std::string separator = to_str(reader.get_or(0, Value::string("")));
  const Value* attribute = reader.get(1);
  const std::vector<Value> parts = attribute != nullptr ? attribute_parts(*attribute) : std::vector<Value>{};
  std::string out;
  bool first = true;
  for (const Value& item : interpreter.to_list(v)) {
    if (!first) out += separator;
    first = false;
    append_str(out, attribute != nullptr ? get_path(interpreter, item, parts) : item);
  }
  return interpreter.make_string(std::move(out));
}

Value f_list(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader("list", args, {});
  return Value::sequence(interpreter.to_list(v));
}

Value f_lower(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader("lower", args, {});
  const Value s = soft_str(interpreter, v);
  return interpreter.make_string(unicode::lower(s.as_string()), s.is_markup());
}

Value f_upper(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader("upper", args, {});
  const Value s = soft_str(interpreter, v);
  return interpreter.make_string(unicode::upper(s.as_string()), s.is_markup());
}

Value f_items(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader("items", args, {});
  if (v.is_undefined()) return iterator(interpreter, "generator", {});
  if (!v.is_dict()) fault(Fault::kType, "Can only get item pairs from a mapping.");
  std::vector<Value> items;
  for (const auto& [key, value] : v.dict().entries) items.push_back(Value::tuple({key, value}));
  return iterator(interpreter, "generator", std::move(items));
}

Value f_map(Interpreter& interpreter, const Value& v, CallArgs& args) {
  std::vector<Value> out;
  if (truthy(v)) {
    const std::vector<Value> items = interpreter.to_list(v);
    if (args.positional.empty()) {
      const auto it = std::find_if(args.keywords.begin(), args.keywords.end(), [](const auto& kw) { return kw.first == "attribute"; });
      if (it == args.keywords.end()) fault(Fault::kType, "map requires a filter argument");
      const std::vector<Value> parts = attribute_parts(it->second);
      std::optional<Value> fallback;
      for (const auto& [name, value] : args.keywords) {
        if (name == "default") {
          if (!value.is_none()) fallback = value;
        } else if (name != "attribute") {
          fault(Fault::kType, "Unexpected keyword argument '{}'", name);
        }
      }
      for (const Value& item : items) out.push_back(get_path(interpreter, item, parts, fallback ? &*fallback : nullptr));
    } else {
      const Value name = args.positional.front();
      CallArgs rest{std::vector<Value>(args.positional.begin() + 1, args.positional.end()), args.keywords};
      for (const Value& item : items) out.push_back(interpreter.call_filter(to_str(name), item, rest));
    }
  }
  return iterator(interpreter, "generator", std::move(out));
}

Value select_or_reject(Interpreter& interpreter, const Value& v, CallArgs& args, bool keep_when, bool lookup_attr) {
  std::vector<Value> out;
  if (!truthy(v)) return iterator(interpreter, "generator", {});
  std::vector<Value> parts;
  std::size_t offset = 0;
  if (lookup_attr) {
    if (args.positional.empty()) fault(Fault::kType, "Missing parameter for attribute name");
    parts = attribute_parts(args.positional.front());
    offset = 1;
  }
  std::optional<std::string> test;
  CallArgs test_args;
  if (args.positional.size() > offset) {
    test = to_str(args.positional[offset]);
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(offset) + 1, args.positional.end());
    test_args.keywords = args.keywords;
  }
  for (const Value& item : interpreter.to_list(v)) {
    const Value subject = lookup_attr ? get_path(interpreter, item, parts) : item;
    const bool passed = test ? interpreter.call_test(*test, subject, test_args) : truthy(subject);
    if (passed == keep_when) out.push_back(item);
  }
  return iterator(interpreter, "generator", std::move(out));
}

Value f_select(Interpreter& i, const Value& v, CallArgs& a) { return select_or_reject(i, v, a, true, false); }
Value f_reject(Interpreter& i, const Value& v, CallArgs& a) { return select_or_reject(i, v, a, false, false); }
Value f_selectattr(Interpreter& i, const Value& v, CallArgs& a) { return select_or_reject(i, v, a, true, true); }
Value f_rejectattr(Interpreter& i, const Value& v, CallArgs& a) { return select_or_reject(i, v, a, false, true); }

Value min_or_max(Interpreter& interpreter, const Value& v, CallArgs& args, bool maximum) {
  ArgReader reader(maximum ? "max" : "min", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = reader.bool_or(0, false);
  const std::vector<Value> parts = reader.get(1) ? attribute_parts(*reader.get(1)) : std::vector<Value>{};
  const std::vector<Value> items = interpreter.to_list(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const auto key = [&](const Value& item) {
    const Value k = get_path(interpreter, item, parts);
    return case_sensitive ? k : lowered(k);
  };
  std::size_t best = 0;
  for (std::size_t i = 1; i < items.size(); ++i) {
    if (maximum ? less(key(items[best]), key(items[i]), ">") : less(key(items[i]), key(items[best]))) best = i;
  }
  return items[best];
}

Value f_min(Interpreter& i, const Value& v, CallArgs& a) { return min_or_max(i, v, a, false); }
Value f_max(Interpreter& i, const Value& v, CallArgs& a) { return min_or_max(i, v, a, true); }

Value f_replace(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader reader("replace", args, {"old", "new", "count"});
  CallArgs inner;
  inner.positional = {Value::string(to_str(reader.required(0))), Value::string(to_str(reader.required(1)))};
  if (const Value* count = reader.get(2); count != nullptr && !count->is_none()) inner.positional.push_back(*count);
  // Without autoescape jinja2 replaces on str(s): the result is a plain str.
  const Value result = interpreter.call(interpreter.get_attr(Value::string(to_str(v)), "replace"), std::move(inner));
  return Value::string(result.as_string());
}

Value f_reverse(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader("reverse", args, {});
  if (v.is_string()) {
    std::u32string text = unicode::decode(v.as_string());
    std::reverse(text.begin(), text.end());
    return interpreter.make_string(unicode::encode(text), v.is_markup());
  }
  if (v.is_object()) {  // reversed() of an iterator fails; jinja2 then reverses list(value)
    std::vector<Value> items = interpreter.to_list(v);
    std::reverse(items.begin(), items.end());
    return Value::sequence(std::move(items));
  }
  std::vector<Value> items = interpreter.to_list(v);
  std::reverse(items.begin(), items.end());
  return iterator(interpreter, v.is_dict() ? "dict_reversekeyiterator" : v.is_range() ? "range_iterator" : "list_reverseiterator", std::move(items));
}

// Python's round(x, n): correctly rounded, ties to even, on the exact binary value.
double python_round(double value, std::int64_t digits) {
  if (!std::isfinite(value)) return value;
  if (digits > 300) return value;
  if (digits >= 0) {
    char buffer[512];
    std::snprintf(buffer, sizeof buffer, "%.*f", static_cast<int>(digits), value);
    return std::strtod(buffer, nullptr);
  }
  const double scale = std::pow(10.0, static_cast<double>(-digits));
  const double scaled = value / scale;
  double rounded = std::nearbyint(scaled);
  return rounded * scale;
}

Value f_round(Interpreter&, const Value& v, CallArgs& args) {
  ArgReader reader("round", args, {"precision", "method"});
  const std::int64_t precision = reader.int_or(0, 0);
  const std::string method = to_str(reader.get_or(1, Value::string("common")));
  if (method != "common" && method != "ceil" && method != "floor") fault(Fault::kType, "method must be common, ceil or floor");
  if (!v.is_number()) {
    if (v.is_undefined()) v.raise_undefined();
    fault(Fault::kType, "type {} doesn't define __round__ method", type_name(v));
  }
  if (method == "common") {
    if (!v.is_float()) return Value::integer(v.int_value());  // round(int, n) stays an int
    return Value::number(python_round(v.as_float(), precision));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.float_value() * scale;
  return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_safe(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader("safe", args, {});
  if (v.is_markup()) return v;
  return interpreter.make_string(to_str(v), true);
}

Value f_slice(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader reader("slice", args, {"slices", "fill_with"});
  const std::int64_t slices = reader.int_or(0, 0);
  if (slices <= 0) fault(Fault::kType, "integer division or modulo by zero");
  const Value fill = reader.get_or(1, Value::none());
  const std::vector<Value> seq = interpreter.to_list(v);
  const auto length = static_cast<std::int64_t>(seq.size());
  const std::int64_t per_slice = length / slices;
  const std::int64_t with_extra = length % slices;
  std::int64_t offset = 0;
  std::vector<Value> out;
  for (std::int64_t n = 0; n < std::min<std::int64_t>(slices, 1 << 20); ++n) {
    const std::int64_t start = offset + n * per_slice;
    if (n < with_extra) ++offset;
    const std::int64_t end = offset + (n + 1) * per_slice;
    std::vector<Value> part(seq.begin() + start, seq.begin() + end);
    if (!fill.is_none() && n >= with_extra) part.push_back(fill);
    out.push_back(Value::sequence(std::move(part)));
  }
  return iterator(interpreter, "generator", std::move(out));
}

Value f_sort(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader reader("sort", args, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = reader.bool_or(0, false);
  const bool case_sensitive = reader.bool_or(1, false);
  std::vector<std::vector<Value>> attributes;
  if (const Value* attribute = reader.get(2); attribute != nullptr && !attribute->is_none()) {
    if (attribute->is_string()) {
      const std::string& text = attribute->as_string();
      std::size_t start = 0;
      while (true) {
        const std::size_t comma = text.find(',', start);
        attributes.push_back(attribute_parts(Value::string(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start))));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else {
      attributes.push_back(attribute_parts(*attribute));
    }
  }
  std::vector<Value> items = interpreter.to_list(v);
  const auto key = [&](const Value& item) {
    std::vector<Value> keys;
    if (attributes.empty()) {
      keys.push_back(case_sensitive ? item : lowered(item));
    } else {
      for (const auto& parts : attributes) {
        const Value k = get_path(interpreter, item, parts);
        keys.push_back(case_sensitive ? k : lowered(k));
      }
    }
    return Value::sequence(std::move(keys));
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? less(key(b), key(a)) : less(key(a), key(b));
  });
  return Value::sequence(std::move(items));
}

Value f_string(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader("string", args, {});
  return soft_str(interpreter, v);
}

Value f_sum(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader reader("sum", args, {"attribute", "start"});
  const Value* attribute = reader.get(0);
  const std::vector<Value> parts = attribute != nullptr ? attribute_parts(*attribute) : std::vector<Value>{};
  Value total = reader.get_or(1, Value::integer(0));
  if (total.is_string()) fault(Fault::kType, "sum() can't sum strings [use ''.join(seq) instead]");
  for (const Value& item : interpreter.to_list(v)) {
    total = binary_op(interpreter, BinaryOp::kAdd, total, attribute != nullptr ? get_path(interpreter, item, parts) : item);
  }
  return total;
}

// jinja2's title filter: words start after runs of '-', whitespace and opening brackets.
Value f_title(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader("title", args, {});
  const std::u32string text = unicode::decode(soft_str(interpreter, v).as_string());
  const auto separator = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || unicode::is_space(c); };
  std::u32string out;
  for (std::size_t i = 0; i < text.size();) {
    std::size_t j = i;
    const bool run_of_separators = separator(text[i]);
    while (j < text.size() && separator(text[j]) == run_of_separators) ++j;
    for (std::size_t k = i; k < j; ++k) out.push_back(k == i ? unicode::to_upper(text[k]) : unicode::to_lower(text[k]));
    i = j;
  }
  return interpreter.make_string(unicode::encode(out));
}

Value f_trim(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader reader("trim", args, {"chars"});
  CallArgs inner;
  if (const Value* chars = reader.get(0)) inner.positional.push_back(*chars);
  return interpreter.call(interpreter.get_attr(soft_str(interpreter, v), "strip"), std::move(inner));
}

Value f_truncate(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader reader("truncate", args, {"length", "killwords", "end", "leeway"});
  const std::int64_t length = reader.int_or(0, 255);
  const bool killwords = reader.bool_or(1, false);
  const std::u32string end = unicode::decode(to_str(reader.get_or(2, Value::string("..."))));
  const std::int64_t leeway = reader.int_or(3, 5);
  if (length < static_cast<std::int64_t>(end.size())) fault(Fault::kType, "expected length >= {}, got {}", end.size(), length);
  if (leeway < 0) fault(Fault::kType, "expected leeway >= 0, got {}", leeway);
  if (!v.is_string()) fault(Fault::kType, "object of type '{}' has no len()", type_name(v));
  const std::u32string text = unicode::decode(v.as_string());
  if (static_cast<std::int64_t>(text.size()) <= length + leeway) return v;
  std::u32string head = text.substr(0, static_cast<std::size_t>(length) - end.size());
  if (!killwords) {
    const std::size_t space = head.rfind(U' ');
    if (space != std::u32string::npos) head = head.substr(0, space);
  }
  return interpreter.make_string(unicode::encode(head + end), v.is_markup());
}

Value f_unique(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader reader("unique", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = reader.bool_or(0, false);
  const std::vector<Value> parts = reader.get(1) ? attribute_parts(*reader.get(1)) : std::vector<Value>{};
  std::set<std::string> seen;
  std::vector<Value> out;
  for (const Value& item : interpreter.to_list(v)) {
    const Value k = get_path(interpreter, item, parts);
    if (seen.insert(hash_key(case_sensitive ? k : lowered(k))).second) out.push_back(item);
  }
  return iterator(interpreter, "generator", std::move(out));
}

Value f_wordcount(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader("wordcount", args, {});
  std::int64_t words = 0;
  bool in_word = false;
  for (const char32_t c : unicode::decode(soft_str(interpreter, v).as_string())) {
    const bool word = unicode::is_word(c);
    if (word && !in_word) ++words;
    in_word = word;
  }
  return Value::integer(words);
}

// transformers' override: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value f_tojson(Interpreter& interpreter, const Value& v, CallArgs& args) {
  ArgReader reader("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions options;
  options.ensure_ascii = reader.bool_or(0, false);
  options.sort_keys = reader.bool_or(3, false);
  if (const Value* indent = reader.get(1); indent != nullptr && !indent->is_none()) {
    if (indent->is_string()) {
      options.indent = indent->as_string();
    } else if (indent->is_int() || indent->is_bool()) {
      options.indent = std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(indent->int_value(), 0, 1 << 16)), ' ');
    } else {
      fault(Fault::kType, "indent must be an int or a str, not {}", type_name(*indent));
    }
    options.item_separator.assign(1, ',');  // json.dumps drops the space when indenting
  }
  if (const Value* separators = reader.get(2); separators != nullptr && !separators->is_none()) {
    const std::vector<Value> pair = interpreter.to_list(*separators);
    if (pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) {
      fault(Fault::kType, "separators must be a pair of strings");
    }
    options.item_separator = pair[0].as_string();
    options.key_separator = pair[1].as_string();
  }
  return interpreter.make_string(json_dumps(v, options));
}

struct NamedFilter {
  std::string_view name;
  FilterFunction function;
};

constexpr std::array kFilters = {
    NamedFilter{"abs", f_abs},
    NamedFilter{"attr", f_attr},
    NamedFilter{"batch", f_batch},
    NamedFilter{"capitalize", f_capitalize},
    NamedFilter{"center", f_center},
    NamedFilter{"count", f_length},
    NamedFilter{"d", f_default},
    NamedFilter{"default", f_default},
    NamedFilter{"dictsort", f_dictsort},
    NamedFilter{"e", f_escape},
    NamedFilter{"escape", f_escape},
    NamedFilter{"first", f_first},
    NamedFilter{"float", f_float},
    NamedFilter{"forceescape", f_forceescape},
    NamedFilter{"format", f_format},
    NamedFilter{"groupby", f_groupby},
    NamedFilter{"indent", f_indent},
    NamedFilter{"int", f_int},
    NamedFilter{"items", f_items},
    NamedFilter{"join", f_join},
    NamedFilter{"last", f_last},
    NamedFilter{"length", f_length},
    NamedFilter{"list", f_list},
    NamedFilter{"lower", f_lower},
    NamedFilter{"map", f_map},
    NamedFilter{"max", f_max},
    NamedFilter{"min", f_min},
    NamedFilter{"reject", f_reject},
    NamedFilter{"rejectattr", f_rejectattr},
    NamedFilter{"replace", f_replace},
    NamedFilter{"reverse", f_reverse},
    NamedFilter{"round", f_round},
    NamedFilter{"safe", f_safe},
    NamedFilter{"select", f_select},
    NamedFilter{"selectattr", f_selectattr},
    NamedFilter{"slice", f_slice},
    NamedFilter{"sort", f_sort},
    NamedFilter{"string", f_string},
    NamedFilter{"sum", f_sum},
    NamedFilter{"title", f_title},
    NamedFilter{"tojson", f_tojson},
    NamedFilter{"trim", f_trim},
    NamedFilter{"truncate", f_truncate},
    NamedFilter{"unique", f_unique},
    NamedFilter{"upper", f_upper},
    NamedFilter{"wordcount", f_wordcount},
};

// jinja2 filters without an implementation here (they print HTML, randomness or pretty-printing
// whose output this implementation does not reproduce).
constexpr std::array<std::string_view, 8> kUnimplementedFilters = {
    "filesizeformat", "pprint", "random", "striptags", "urlencode", "urlize", "wordwrap", "xmlattr"};

}  // namespace

FilterFunction find_filter(std::string_view name) noexcept {
  for (const NamedFilter& entry : kFilters) {
    if (entry.name == name) return entry.function;
  }
  return nullptr;
}

bool jinja_has_filter(std::string_view name) noexcept {
  return find_filter(name) != nullptr ||
         std::find(kUnimplementedFilters.begin(), kUnimplementedFilters.end(), name) != kUnimplementedFilters.end();
}

}  // namespace sitsrt::chat
