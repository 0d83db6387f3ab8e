// Python's methods of str, list, tuple and dict (and the few data attributes of numbers), as
// the ImmutableSandboxedEnvironment exposes them: mutating methods are refused.
#include "chat/builtins.hpp"
#include "chat/interpreter.hpp"
#include "chat/objects.hpp"
#include "chat/unicode.hpp"

#include <algorithm>
#include <array>

namespace sitsrt::chat {
namespace {

using Method = Value (*)(Interpreter&, const Value& self, CallArgs& args);

const std::string& text_arg(const Value* value, std::string_view method) {
  if (value == nullptr || !value->is_string()) {
    fault(Fault::kType, "{}() argument must be str, not {}", method, value ? type_name(*value) : "nothing");
  }
  return value->as_string();
}

// Result strings of a Markup's methods are Markup again (markupsafe wraps them).
Value same_kind(Interpreter& interpreter, const Value& self, std::string text) {
  return interpreter.make_string(std::move(text), self.is_markup());
}

bool in_chars(char32_t c, const std::u32string* chars) {
  if (chars == nullptr) return unicode::is_space(c);
  return chars->find(c) != std::u32string::npos;
}

Value strip_impl(Interpreter& interpreter, const Value& self, CallArgs& args, bool left, bool right, const char* name) {
  ArgReader reader(name, args, {"chars"});
  std::optional<std::u32string> chars;
  if (const Value* c = reader.get(0); c != nullptr && !c->is_none()) chars = unicode::decode(text_arg(c, name));
  const std::u32string text = unicode::decode(self.as_string());
  std::size_t begin = 0;
  std::size_t end = text.size();
  if (left) {
    while (begin < end && in_chars(text[begin], chars ? &*chars : nullptr)) ++begin;
  }
  if (right) {
    while (end > begin && in_chars(text[end - 1], chars ? &*chars : nullptr)) --end;
  }
  return same_kind(interpreter, self, unicode::encode(std::u32string_view(text).substr(begin, end - begin)));
}

Value m_strip(Interpreter& i, const Value& s, CallArgs& a) { return strip_impl(i, s, a, true, true, "strip"); }
Value m_lstrip(Interpreter& i, const Value& s, CallArgs& a) { return strip_impl(i, s, a, true, false, "lstrip"); }
Value m_rstrip(Interpreter& i, const Value& s, CallArgs& a) { return strip_impl(i, s, a, false, true, "rstrip"); }

std::vector<std::u32string> whitespace_split(const std::u32string& text, std::int64_t maxsplit, bool from_right) {
  std::vector<std::u32string> parts;
  if (!from_right) {
    std::size_t i = 0;
    while (true) {
      while (i < text.size() && unicode::is_space(text[i])) ++i;
      if (i >= text.size()) break;
      if (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) == maxsplit) {
        parts.push_back(text.substr(i));
        break;
      }
      std::size_t j = i;
      while (j < text.size() && !unicode::is_space(text[j])) ++j;
      parts.push_back(text.substr(i, j - i));
      i = j;
    }
    return parts;
  }
  std::size_t end = text.size();
  while (true) {
    while (end > 0 && unicode::is_space(text[end - 1])) --end;
    if (end == 0) break;
    if (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) == maxsplit) {
      parts.push_back(text.substr(0, end));
      break;
    }
    std::size_t start = end;
    while (start > 0 && !unicode::is_space(text[start - 1])) --start;
    parts.push_back(text.substr(start, end - start));
    end = start;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

Value split_impl(Interpreter& interpreter, const Value& self, CallArgs& args, bool from_right) {
  const char* name = from_right ? "rsplit" : "split";
  ArgReader reader(name, args, {"sep", "maxsplit"});
  const std::int64_t maxsplit = reader.int_or(1, -1);
  const Value* sep_value = reader.get(0);
  std::vector<std::string> parts;
  if (sep_value == nullptr || sep_value->is_none()) {
    for (const std::u32string& part : whitespace_split(unicode::decode(self.as_string()), maxsplit, from_right)) {
      parts.push_back(unicode::encode(part));
    }
  } else {
    const std::string& sep = text_arg(sep_value, name);
    if (sep.empty()) fault(Fault::kType, "empty separator");
    const std::string& text = self.as_string();
    if (!from_right) {
      std::size_t start = 0;
      while (true) {
        const std::size_t at = text.find(sep, start);
        if (at == std::string::npos || (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) == maxsplit)) {
          parts.push_back(text.substr(start));
          break;
        }
        parts.push_back(text.substr(start, at - start));
        start = at + sep.size();
      }
    } else {
      std::size_t end = text.size();
      while (true) {
        const std::size_t at = end >= sep.size() ? text.rfind(sep, end - sep.size()) : std::string::npos;
        if (at == std::string::npos || (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) == maxsplit)) {
          parts.push_back(text.substr(0, end));
          break;
        }
        parts.push_back(text.substr(at + sep.size(), end - at - sep.size()));
        end = at;
      }
      std::reverse(parts.begin(), parts.end());
    }
  }
  std::vector<Value> items;
  for (std::string& part : parts) items.push_back(same_kind(interpreter, self, std::move(part)));
  return Value::sequence(std::move(items));
}

Value m_split(Interpreter& i, const Value& s, CallArgs& a) { return split_impl(i, s, a, false); }
Value m_rsplit(Interpreter& i, const Value& s, CallArgs& a) { return split_impl(i, s, a, true); }

Value m_splitlines(Interpreter& interpreter, const Value& self, CallArgs& args) {
  ArgReader reader("splitlines", args, {"keepends"});
  const bool keepends = reader.bool_or(0, false);
  const std::u32string text = unicode::decode(self.as_string());
  std::vector<Value> lines;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    const bool boundary = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                          c == 0x2028 || c == 0x2029;
    if (!boundary) continue;
    std::size_t end = i + 1;
    if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') end = i + 2;
    lines.push_back(same_kind(interpreter, self, unicode::encode(std::u32string_view(text).substr(start, (keepends ? end : i) - start))));
    start = end;
    i = end - 1;
  }
  if (start < text.size()) lines.push_back(same_kind(interpreter, self, unicode::encode(std::u32string_view(text).substr(start))));
  return Value::sequence(std::move(lines));
}

// start/end arguments of find, count, startswith...: Python slice bounds over code points.
std::pair<std::size_t, std::size_t> bounds(const ArgReader& reader, std::size_t first, std::size_t length) {
  const auto resolve = [&](const Value* v, std::int64_t fallback) -> std::int64_t {
    if (v == nullptr || v->is_none()) return fallback;
    if (!v->is_int() && !v->is_bool()) fault(Fault::kType, "slice indices must be integers or None");
    std::int64_t x = v->int_value();
    if (x < 0) x = std::max<std::int64_t>(0, x + static_cast<std::int64_t>(length));
    return std::min<std::int64_t>(x, static_cast<std::int64_t>(length));
  };
  const std::int64_t start = resolve(reader.get(first), 0);
  const std::int64_t end = resolve(reader.get(first + 1), static_cast<std::int64_t>(length));
  return {static_cast<std::size_t>(start), static_cast<std::size_t>(std::max(start, end))};
}

Value affix_impl(const Value& self, CallArgs& args, bool prefix) {
  const char* name = prefix ? "startswith" : "endswith";
  ArgReader reader(name, args, {"affix", "start", "end"});
  const std::u32string text = unicode::decode(self.as_string());
  const auto [start, end] = bounds(reader, 1, text.size());
  const std::u32string_view window = start <= end ? std::u32string_view(text).substr(start, end - start) : std::u32string_view();
  std::vector<Value> candidates;
  const Value& affix = reader.required(0);
  if (affix.is_tuple()) {
    candidates = affix.list().items;
  } else if (affix.is_string()) {
    candidates.push_back(affix);
  } else {
    fault(Fault::kType, "{} first arg must be str or a tuple of str, not {}", name, type_name(affix));
  }
  for (const Value& candidate : candidates) {
    const std::u32string c = unicode::decode(text_arg(&candidate, name));
    if (c.size() > window.size()) continue;
    if (prefix ? window.substr(0, c.size()) == c : window.substr(window.size() - c.size()) == c) return Value::boolean(true);
  }
  return Value::boolean(false);
}

Value m_startswith(Interpreter&, const Value& s, CallArgs& a) { return affix_impl(s, a, true); }
Value m_endswith(Interpreter&, const Value& s, CallArgs& a) { return affix_impl(s, a, false); }

std::int64_t find_impl(const Value& self, CallArgs& args, bool from_right, const char* name, bool raise) {
  ArgReader reader(name, args, {"sub", "start", "end"});
  const std::u32string text = unicode::decode(self.as_string());
  const std::u32string sub = unicode::decode(text_arg(reader.get(0), name));
  const auto [start, end] = bounds(reader, 1, text.size());
  std::int64_t found = -1;
  if (end >= start && end - start >= sub.size()) {
    const std::u32string_view window = std::u32string_view(text).substr(start, end - start);
    const std::size_t at = from_right ? window.rfind(sub) : window.find(sub);
    if (at != std::u32string_view::npos) found = static_cast<std::int64_t>(start + at);
  }
  if (found < 0 && raise) fault(Fault::kType, "substring not found");
  return found;
}

Value m_find(Interpreter&, const Value& s, CallArgs& a) { return Value::integer(find_impl(s, a, false, "find", false)); }
Value m_rfind(Interpreter&, const Value& s, CallArgs& a) { return Value::integer(find_impl(s, a, true, "rfind", false)); }
Value m_index(Interpreter&, const Value& s, CallArgs& a) { return Value::integer(find_impl(s, a, false, "index", true)); }
Value m_rindex(Interpreter&, const Value& s, CallArgs& a) { return Value::integer(find_impl(s, a, true, "rindex", true)); }

Value m_count(Interpreter&, const Value& self, CallArgs& args) {
  ArgReader reader("count", args, {"sub", "start", "end"});
  const std::u32string text = unicode::decode(self.as_string());
  const std::u32string sub = unicode::decode(text_arg(reader.get(0), "count"));
  const auto [start, end] = bounds(reader, 1, text.size());
  if (end < start) return Value::integer(0);
  const std::u32string_view window = std::u32string_view(text).substr(start, end - start);
  if (sub.empty()) return Value::integer(static_cast<std::int64_t>(window.size()) + 1);
  std::int64_t n = 0;
  for (std::size_t at = window.find(sub); at != std::u32string_view::npos; at = window.find(sub, at + sub.size())) ++n;
  return Value::integer(n);
}

std::string replace_text(const std::string& text, const std::string& old, const std::string& replacement, std::int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts the replacement around every character
    std::int64_t done = 0;
    for (std::size_t i = 0; i <= text.size();) {
      if (count < 0 || done < count) {
        out += replacement;
        ++done;
      }
      if (i == text.size()) break;
      const std::size_t n = unicode::decode_at(text, i).bytes;
      out.append(text, i, n);
      i += n;
    }
    return out;
  }
  std::size_t start = 0;
  std::int64_t done = 0;
  while (count < 0 || done < count) {
    const std::size_t at = text.find(old, start);
    if (at == std::string::npos) break;
    out.append(text, start, at - start);
    out += replacement;
    start = at + old.size();
    ++done;
  }
  out.append(text, start, std::string::npos);
  return out;
}

Value m_replace(Interpreter& interpreter, const Value& self, CallArgs& args) {
  ArgReader reader("replace", args, {"old", "new", "count"});
  const std::string& old = text_arg(reader.get(0), "replace");
  const std::string& replacement = text_arg(reader.get(1), "replace");
  const std::int64_t count = reader.int_or(2, -1);
  const std::string& text = self.as_string();
  // Bound the result before building it: a few bytes of template can ask for gigabytes.
  std::uint64_t matches = 0;
  if (old.empty()) {
    matches = unicode::length(text) + 1;
  } else {
    for (std::size_t at = text.find(old); at != std::string::npos; at = text.find(old, at + old.size())) ++matches;
  }
  if (count >= 0) matches = std::min<std::uint64_t>(matches, static_cast<std::uint64_t>(count));
  if (replacement.size() > old.size() &&
      text.size() + matches * (replacement.size() - old.size()) > interpreter.limits().max_output_bytes) {
    fault(Fault::kLimit, "a string exceeds {} bytes", interpreter.limits().max_output_bytes);
  }
  std::string out = replace_text(text, old, replacement, count);
  return same_kind(interpreter, self, std::move(out));
}

Value m_upper(Interpreter& i, const Value& s, CallArgs& a) {
  ArgReader("upper", a, {});
  return same_kind(i, s, unicode::upper(s.as_string()));
}
Value m_lower(Interpreter& i, const Value& s, CallArgs& a) {
  ArgReader("lower", a, {});
  return same_kind(i, s, unicode::lower(s.as_string()));
}

Value m_swapcase(Interpreter& interpreter, const Value& self, CallArgs& args) {
  ArgReader("swapcase", args, {});
  std::u32string text = unicode::decode(self.as_string());
  for (char32_t& c : text) c = unicode::is_upper(c) ? unicode::to_lower(c) : unicode::to_upper(c);
  return same_kind(interpreter, self, unicode::encode(text));
}

}  // namespace

// Python's str.title() and str.capitalize(), shared with the filters.
std::string python_title(std::string_view text) {
  std::u32string cps = unicode::decode(text);
  bool previous_cased = false;
  for (char32_t& c : cps) {
    const bool cased = unicode::is_upper(c) || unicode::is_lower(c);
    c = previous_cased ? unicode::to_lower(c) : unicode::to_upper(c);
    previous_cased = cased;
  }
  return unicode::encode(cps);
}

std::string python_capitalize(std::string_view text) {
  std::u32string cps = unicode::decode(text);
  for (std::size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? unicode::to_upper(cps[i]) : unicode::to_lower(cps[i]);
  return unicode::encode(cps);
}

namespace {

Value m_title(Interpreter& i, const Value& s, CallArgs& a) {
  ArgReader("title", a, {});
  return same_kind(i, s, python_title(s.as_string()));
}
Value m_capitalize(Interpreter& i, const Value& s, CallArgs& a) {
  ArgReader("capitalize", a, {});
  return same_kind(i, s, python_capitalize(s.as_string()));
}

Value pad_impl(Interpreter& interpreter, const Value& self, CallArgs& args, int where, const char* name) {
  ArgReader reader(name, args, {"width", "fillchar"});
  const std::int64_t width = reader.int_or(0, 0);
  std::u32string fill = U" ";
  if (const Value* f = reader.get(1)) {
    fill = unicode::decode(text_arg(f, name));
    if (fill.size() != 1) fault(Fault::kType, "The fill character must be exactly one character long");
  }
  const std::u32string text = unicode::decode(self.as_string());
  if (width <= static_cast<std::int64_t>(text.size())) return self;
  if (static_cast<std::uint64_t>(width) > interpreter.limits().max_output_bytes) fault(Fault::kLimit, "a string exceeds {} bytes", interpreter.limits().max_output_bytes);
  const std::size_t total = static_cast<std::size_t>(width) - text.size();
  std::size_t left = 0;
  if (where == 0) left = total / 2 + (total & static_cast<std::size_t>(width) & 1);  // Python's center()
  if (where > 0) left = total;
  const std::u32string out = std::u32string(left, fill[0]) + text + std::u32string(total - left, fill[0]);
  return same_kind(interpreter, self, unicode::encode(out));
}

Value m_center(Interpreter& i, const Value& s, CallArgs& a) { return pad_impl(i, s, a, 0, "center"); }
Value m_ljust(Interpreter& i, const Value& s, CallArgs& a) { return pad_impl(i, s, a, -1, "ljust"); }
Value m_rjust(Interpreter& i, const Value& s, CallArgs& a) { return pad_impl(i, s, a, 1, "rjust"); }

Value m_zfill(Interpreter& interpreter, const Value& self, CallArgs& args) {
  ArgReader reader("zfill", args, {"width"});
  const std::int64_t width = reader.int_or(0, 0);
  std::u32string text = unicode::decode(self.as_string());
  if (width <= static_cast<std::int64_t>(text.size())) return self;
  if (static_cast<std::uint64_t>(width) > interpreter.limits().max_output_bytes) fault(Fault::kLimit, "a string exceeds {} bytes", interpreter.limits().max_output_bytes);
  const std::size_t pad = static_cast<std::size_t>(width) - text.size();
  const std::size_t at = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
  text.insert(at, pad, U'0');
  return same_kind(interpreter, self, unicode::encode(text));
}

Value m_join(Interpreter& interpreter, const Value& self, CallArgs& args) {
  ArgReader reader("join", args, {"iterable"});
  const std::vector<Value> items = interpreter.to_list(reader.required(0));
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      fault(Fault::kType, "sequence item {}: expected str instance, {} found", i, type_name(items[i]));
    }
    if (i) out += self.as_string();
    out += self.is_markup() && !items[i].is_markup() ? html_escape(items[i].as_string()) : items[i].as_string();
    interpreter.charge_string(0);
  }
  return same_kind(interpreter, self, std::move(out));
}

Value m_format(Interpreter& interpreter, const Value& self, CallArgs& args) {
  CallArgs escaped = args;
  if (self.is_markup()) {  // Markup.format escapes its arguments
    for (Value& v : escaped.positional) {
      if (v.is_string() && !v.is_markup()) v = Value::string(html_escape(v.as_string()), true);
    }
    for (auto& [k, v] : escaped.keywords) {
      if (v.is_string() && !v.is_markup()) v = Value::string(html_escape(v.as_string()), true);
    }
  }
  return same_kind(interpreter, self, brace_format(interpreter, self.as_string(), escaped));
}

Value partition_impl(Interpreter& interpreter, const Value& self, CallArgs& args, bool from_right) {
  ArgReader reader(from_right ? "rpartition" : "partition", args, {"sep"});
  const std::string& sep = text_arg(reader.get(0), "partition");
  if (sep.empty()) fault(Fault::kType, "empty separator");
  const std::string& text = self.as_string();
  const std::size_t at = from_right ? text.rfind(sep) : text.find(sep);
  std::vector<Value> parts;
  if (at == std::string::npos) {
    parts = from_right ? std::vector<Value>{Value::string(""), Value::string(""), self}
                       : std::vector<Value>{self, Value::string(""), Value::string("")};
  } else {
    parts = {same_kind(interpreter, self, text.substr(0, at)), same_kind(interpreter, self, sep),
             same_kind(interpreter, self, text.substr(at + sep.size()))};
  }
  return Value::tuple(std::move(parts));
}

Value m_partition(Interpreter& i, const Value& s, CallArgs& a) { return partition_impl(i, s, a, false); }
Value m_rpartition(Interpreter& i, const Value& s, CallArgs& a) { return partition_impl(i, s, a, true); }

Value m_removeprefix(Interpreter& interpreter, const Value& self, CallArgs& args) {
  ArgReader reader("removeprefix", args, {"prefix"});
  const std::string& prefix = text_arg(reader.get(0), "removeprefix");
  const std::string& text = self.as_string();
  if (text.compare(0, prefix.size(), prefix) == 0) return same_kind(interpreter, self, text.substr(prefix.size()));
  return self;
}

Value m_removesuffix(Interpreter& interpreter, const Value& self, CallArgs& args) {
  ArgReader reader("removesuffix", args, {"suffix"});
  const std::string& suffix = text_arg(reader.get(0), "removesuffix");
  const std::string& text = self.as_string();
  if (!suffix.empty() && text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return same_kind(interpreter, self, text.substr(0, text.size() - suffix.size()));
  }
  return self;
}

template <bool (*Predicate)(char32_t)>
Value all_chars(Interpreter&, const Value& self, CallArgs& args) {
  ArgReader("is", args, {});
  const std::u32string text = unicode::decode(self.as_string());
  if (text.empty()) return Value::boolean(false);
  return Value::boolean(std::all_of(text.begin(), text.end(), Predicate));
}

bool alnum(char32_t c) { return unicode::is_alpha(c) || unicode::is_digit(c); }
bool ascii(char32_t c) { return c < 0x80; }

Value m_isascii(Interpreter&, const Value& self, CallArgs& args) {
  ArgReader("isascii", args, {});
  const std::u32string text = unicode::decode(self.as_string());
  return Value::boolean(std::all_of(text.begin(), text.end(), ascii));
}

Value case_test(const Value& self, CallArgs& args, bool upper) {
  ArgReader(upper ? "isupper" : "islower", args, {});
  bool cased = false;
  for (const char32_t c : unicode::decode(self.as_string())) {
    if (upper ? unicode::is_lower(c) : unicode::is_upper(c)) return Value::boolean(false);
    cased = cased || unicode::is_upper(c) || unicode::is_lower(c);
  }
  return Value::boolean(cased);
}

Value m_isupper(Interpreter&, const Value& s, CallArgs& a) { return case_test(s, a, true); }
Value m_islower(Interpreter&, const Value& s, CallArgs& a) { return case_test(s, a, false); }

struct NamedMethod {
  std::string_view name;
  Method method;
};

constexpr std::array kStrMethods = {
    NamedMethod{"strip", m_strip},
    NamedMethod{"lstrip", m_lstrip},
    NamedMethod{"rstrip", m_rstrip},
    NamedMethod{"split", m_split},
    NamedMethod{"rsplit", m_rsplit},
    NamedMethod{"splitlines", m_splitlines},
    NamedMethod{"startswith", m_startswith},
    NamedMethod{"endswith", m_endswith},
    NamedMethod{"find", m_find},
    NamedMethod{"rfind", m_rfind},
    NamedMethod{"index", m_index},
    NamedMethod{"rindex", m_rindex},
    NamedMethod{"count", m_count},
    NamedMethod{"replace", m_replace},
    NamedMethod{"upper", m_upper},
    NamedMethod{"lower", m_lower},
    NamedMethod{"casefold", m_lower},
    NamedMethod{"swapcase", m_swapcase},
    NamedMethod{"title", m_title},
    NamedMethod{"capitalize", m_capitalize},
    NamedMethod{"center", m_center},
    NamedMethod{"ljust", m_ljust},
    NamedMethod{"rjust", m_rjust},
    NamedMethod{"zfill", m_zfill},
    NamedMethod{"join", m_join},
    NamedMethod{"format", m_format},
    NamedMethod{"partition", m_partition},
    NamedMethod{"rpartition", m_rpartition},
    NamedMethod{"removeprefix", m_removeprefix},
    NamedMethod{"removesuffix", m_removesuffix},
    NamedMethod{"isalpha", all_chars<unicode::is_alpha>},
    NamedMethod{"isdigit", all_chars<unicode::is_digit>},
    NamedMethod{"isdecimal", all_chars<unicode::is_digit>},
    NamedMethod{"isnumeric", all_chars<unicode::is_digit>},
    NamedMethod{"isalnum", all_chars<alnum>},
    NamedMethod{"isspace", all_chars<unicode::is_space>},
    NamedMethod{"isascii", m_isascii},
    NamedMethod{"isupper", m_isupper},
    NamedMethod{"islower", m_islower},
};
// Python str attributes not implemented here: reaching one is reported, never guessed.
constexpr std::array<std::string_view, 9> kStrUnsupported = {
    "encode", "expandtabs", "format_map", "isidentifier", "isprintable", "istitle", "maketrans", "translate", "escape"};

Value m_list_count(Interpreter&, const Value& self, CallArgs& args) {
  ArgReader reader("count", args, {"value"});
  const Value& needle = reader.required(0);
  return Value::integer(std::count_if(self.list().items.begin(), self.list().items.end(),
                                      [&](const Value& v) { return equals(v, needle); }));
}

Value m_list_index(Interpreter&, const Value& self, CallArgs& args) {
  ArgReader reader("index", args, {"value", "start", "stop"});
  const Value& needle = reader.required(0);
  const auto& items = self.list().items;
  const auto [start, end] = bounds(reader, 1, items.size());
  for (std::size_t i = start; i < end; ++i) {
    if (equals(items[i], needle)) return Value::integer(static_cast<std::int64_t>(i));
  }
  fault(Fault::kType, "{} is not in {}", to_repr(needle), type_name(self));
}

Value m_copy(Interpreter&, const Value& self, CallArgs& args) {
  ArgReader("copy", args, {});
  return self;
}

constexpr std::array kListMethods = {NamedMethod{"count", m_list_count}, NamedMethod{"index", m_list_index},
                                     NamedMethod{"copy", m_copy}};
constexpr std::array<std::string_view, 8> kListMutating = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};

Value m_dict_get(Interpreter&, const Value& self, CallArgs& args) {
  ArgReader reader("get", args, {"key", "default"});
  const Value* found = self.dict().find(reader.required(0));
  if (found != nullptr) return *found;
  return reader.get_or(1, Value::none());
}

Value dict_view(const Value& self, CallArgs& args, SeqKind kind, const char* name) {
  ArgReader(name, args, {});
  std::vector<Value> items;
  items.reserve(self.dict().size());
  for (const auto& [key, value] : self.dict().entries) {
    if (kind == SeqKind::kDictKeys) items.push_back(key);
    if (kind == SeqKind::kDictValues) items.push_back(value);
    if (kind == SeqKind::kDictItems) items.push_back(Value::tuple({key, value}));
  }
  return Value::sequence(std::move(items), kind);
}

Value m_items(Interpreter&, const Value& s, CallArgs& a) { return dict_view(s, a, SeqKind::kDictItems, "items"); }
Value m_keys(Interpreter&, const Value& s, CallArgs& a) { return dict_view(s, a, SeqKind::kDictKeys, "keys"); }
Value m_values(Interpreter&, const Value& s, CallArgs& a) { return dict_view(s, a, SeqKind::kDictValues, "values"); }

constexpr std::array kDictMethods = {NamedMethod{"get", m_dict_get}, NamedMethod{"items", m_items},
                                     NamedMethod{"keys", m_keys}, NamedMethod{"values", m_values},
                                     NamedMethod{"copy", m_copy}};
constexpr std::array<std::string_view, 5> kDictMutating = {"clear", "pop", "popitem", "setdefault", "update"};

template <std::size_t N>
const NamedMethod* lookup(const std::array<NamedMethod, N>& table, std::string_view name) {
  for (const NamedMethod& entry : table) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

template <std::size_t N>
bool listed(const std::array<std::string_view, N>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

Value bind(Interpreter& interpreter, const Value& self, const NamedMethod& method) {
  const Method body = method.method;
  return Value::object(interpreter.make<FunctionObject>(std::string(method.name), [self, body](Interpreter& i, CallArgs& args) {
    i.charge_scan(self);
    return body(i, self, args);
  }));
}

Value unsafe(const Value& self, std::string_view name) {
  return Value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(self)), true);
}

}  // namespace

std::optional<Value> builtin_attribute(Interpreter& interpreter, const Value& object, std::string_view name) {
  if (object.is_string()) {
    if (const NamedMethod* method = lookup(kStrMethods, name)) return bind(interpreter, object, *method);
    if (listed(kStrUnsupported, name) || (object.is_markup() && (name == "unescape" || name == "striptags"))) {
      fault(Fault::kUnsupported, "the str method '{}' is not supported", name);
    }
    return std::nullopt;
  }
  if (object.is_sequence() && object.list().kind == SeqKind::kGroupTuple) {
    if (name == "grouper") return object.list().items[0];
    if (name == "list") return object.list().items[1];
  }
  if (object.is_list() || object.is_tuple()) {
    if (const NamedMethod* method = lookup(kListMethods, name); method != nullptr && (object.is_list() || name != "copy")) {
      return bind(interpreter, object, *method);
    }
    if (object.is_list() && listed(kListMutating, name)) return unsafe(object, name);
    return std::nullopt;
  }
  if (object.is_dict()) {
    if (const NamedMethod* method = lookup(kDictMethods, name)) return bind(interpreter, object, *method);
    if (listed(kDictMutating, name)) return unsafe(object, name);
    if (name == "fromkeys") fault(Fault::kUnsupported, "the dict method 'fromkeys' is not supported");
    return std::nullopt;
  }
  if (object.is_sequence()) {  // dict views
    if (name == "isdisjoint" || name == "mapping") fault(Fault::kUnsupported, "the '{}' attribute of a dict view", name);
    return std::nullopt;
  }
  if (object.is_number()) {
    if (name == "real") return object.is_float() ? Value::number(object.as_float()) : Value::integer(object.int_value());
    if (name == "imag") return object.is_float() ? Value::number(0.0) : Value::integer(0);
    static constexpr std::array<std::string_view, 12> kNumberAttributes = {
        "numerator", "denominator", "conjugate", "bit_length", "bit_count", "to_bytes",
        "from_bytes", "as_integer_ratio", "is_integer", "hex", "fromhex", "is_integer"};
    if (listed(kNumberAttributes, name)) fault(Fault::kUnsupported, "the number attribute '{}' is not supported", name);
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace sitsrt::chat
