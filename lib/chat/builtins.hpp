// The filters, tests, methods and globals a template can use, each following the jinja2 3.1 /
// Python 3 function of the same name (jinja2/filters.py, jinja2/tests.py, Python's str, list
// and dict methods, jinja2/defaults.py and transformers' chat-template globals).
#pragma once

#include "chat/ast.hpp"
#include "chat/value.hpp"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace sitsrt::chat {

class Scope;

// nullptr: not implemented here (see jinja_has_filter / jinja_has_test).
[[nodiscard]] FilterFunction find_filter(std::string_view name) noexcept;
[[nodiscard]] TestFunction find_test(std::string_view name) noexcept;
// Whether jinja2's default environment has the filter or test (implemented here or not).
[[nodiscard]] bool jinja_has_filter(std::string_view name) noexcept;
[[nodiscard]] bool jinja_has_test(std::string_view name) noexcept;

// Python attribute lookup on a str, list, tuple, dict view, dict, int, float or bool: a bound
// method or a data attribute. nullopt: Python has no such attribute. A mutating method gives
// the sandbox's unsafe Undefined (calling it raises SecurityError, as in the
// ImmutableSandboxedEnvironment). A Python method not implemented here raises kUnsupported.
[[nodiscard]] std::optional<Value> builtin_attribute(Interpreter& interpreter, const Value& object, std::string_view name);

// The template globals: range, dict, namespace, cycler, joiner, lipsum, raise_exception,
// strftime_now.
void install_globals(Interpreter& interpreter, Scope& globals);

// Binds call arguments to parameter names the way Python does for a builtin function.
class ArgReader {
 public:
  ArgReader(std::string_view function, CallArgs& args, std::initializer_list<std::string_view> names);
  [[nodiscard]] const Value* get(std::size_t index) const;  // nullptr when not passed
  [[nodiscard]] Value get_or(std::size_t index, Value fallback) const;
  [[nodiscard]] const Value& required(std::size_t index) const;
  [[nodiscard]] std::int64_t int_or(std::size_t index, std::int64_t fallback) const;
  [[nodiscard]] bool bool_or(std::size_t index, bool fallback) const;  // Python truthiness

 private:
  std::string function_;
  std::vector<std::string_view> names_;
  std::vector<const Value*> bound_;
};

// Python's str % args (printf-style formatting) and str.format(*args, **kwargs).
[[nodiscard]] std::string percent_format(Interpreter& interpreter, std::string_view format, const Value& args);
[[nodiscard]] std::string brace_format(Interpreter& interpreter, std::string_view format, const CallArgs& args);

// json.dumps(value, ensure_ascii, indent, separators, sort_keys), as transformers' tojson.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // null: one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
[[nodiscard]] std::string json_dumps(const Value& value, const JsonDumpOptions& options);

// Markup's escape(): & < > ' " as HTML entities.
[[nodiscard]] std::string html_escape(std::string_view text);

}  // namespace sitsrt::chat
