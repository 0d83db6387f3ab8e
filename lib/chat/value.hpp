// The values a chat template computes with, modelled on the Python objects jinja2 sees: None,
// bool, int, float, str (optionally markupsafe.Markup), list/tuple and the dict views, dict,
// jinja2's Undefined, and render-time objects (namespace, loop, macro, bound method, ...).
//
// Strings, lists and dicts are immutable and shared (the ImmutableSandboxedEnvironment forbids
// mutating them), so copying a Value is cheap and no reference cycle can form through them.
// Objects are the mutable exceptions (namespace(), loop state, iterators); they are owned by the
// render that created them (Interpreter's arena) and Values refer to them without owning them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

namespace sitsrt::chat {

class Interpreter;
class Object;
struct ListData;
struct DictData;

// The Python exception a failing operation raises in jinja2; the interpreter turns a fault into
// a sitsrt::Error naming the template position.
enum class Fault {
  kType,         // TypeError, ValueError, ZeroDivisionError, OverflowError and friends
  kUndefined,    // jinja2.UndefinedError
  kSecurity,     // jinja2.SecurityError (the sandbox refused an operation)
  kRaised,       // the template called raise_exception()
  kLimit,        // a render limit of this implementation (size, iterations, depth)
  kUnsupported,  // jinja2 would do something here that this implementation cannot reproduce
};

struct RenderFault {
  Fault kind;
  std::string message;
};

[[noreturn]] void fault(Fault kind, std::string message);
template <typename... Args>
[[noreturn]] void fault(Fault kind, fmt::format_string<Args...> format, Args&&... args) {
  fault(kind, fmt::format(format, std::forward<Args>(args)...));
}

// The Python sequence type a ListData stands for; it decides printing and equality.
// kGroupTuple: groupby's (grouper, list) named tuple, a tuple with two attribute names.
enum class SeqKind : std::uint8_t { kList, kTuple, kGroupTuple, kRange, kDictKeys, kDictValues, kDictItems };

// Deepest nesting of lists/dicts a render may build or receive: printing, comparing and
// destroying values recurse, so a bound keeps hostile input from exhausting the stack.
inline constexpr std::uint32_t kMaxNesting = 256;

class Value {
 public:
  enum class Kind : std::uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kObject };

  Value() noexcept = default;  // Undefined without a hint
  static Value undefined(std::string message, bool unsafe = false);
  static Value none() noexcept;
  static Value boolean(bool value) noexcept;
  static Value integer(std::int64_t value) noexcept;
  static Value number(double value) noexcept;
  static Value string(std::string text, bool markup = false);
  static Value sequence(std::vector<Value> items, SeqKind kind = SeqKind::kList);
  static Value tuple(std::vector<Value> items) { return sequence(std::move(items), SeqKind::kTuple); }
  static Value range(std::int64_t start, std::int64_t stop, std::int64_t step);  // step != 0, bounded by the caller
  static Value mapping(DictData dict);
  static Value object(Object* object) noexcept;

  [[nodiscard]] Kind kind() const noexcept { return static_cast<Kind>(storage_.index()); }
  [[nodiscard]] bool is_undefined() const noexcept { return kind() == Kind::kUndefined; }
  [[nodiscard]] bool is_none() const noexcept { return kind() == Kind::kNone; }
  [[nodiscard]] bool is_bool() const noexcept { return kind() == Kind::kBool; }
  [[nodiscard]] bool is_int() const noexcept { return kind() == Kind::kInt; }
  [[nodiscard]] bool is_float() const noexcept { return kind() == Kind::kFloat; }
  // int, float or bool: what Python arithmetic accepts as a number (bool is an int subclass).
  [[nodiscard]] bool is_number() const noexcept { return is_int() || is_float() || is_bool(); }
  [[nodiscard]] bool is_string() const noexcept { return kind() == Kind::kString; }
  [[nodiscard]] bool is_markup() const noexcept { return is_string() && markup_; }
  [[nodiscard]] bool is_sequence() const noexcept { return kind() == Kind::kList; }
  [[nodiscard]] bool is_list() const noexcept;   // a Python list (not a tuple or a view)
  [[nodiscard]] bool is_tuple() const noexcept;
  [[nodiscard]] bool is_range() const noexcept;
  // Supports integer indexing and slicing: list, tuple or range.
  [[nodiscard]] bool is_indexable() const noexcept { return is_list() || is_tuple() || is_range(); }
  [[nodiscard]] bool is_dict() const noexcept { return kind() == Kind::kDict; }
  [[nodiscard]] bool is_object() const noexcept { return kind() == Kind::kObject; }

  [[nodiscard]] bool as_bool() const { return std::get<bool>(storage_); }
  [[nodiscard]] std::int64_t as_int() const { return std::get<std::int64_t>(storage_); }
  [[nodiscard]] double as_float() const { return std::get<double>(storage_); }
  // int or bool as a Python int; float as double.
  [[nodiscard]] std::int64_t int_value() const { return is_bool() ? (as_bool() ? 1 : 0) : as_int(); }
  [[nodiscard]] double float_value() const;
  [[nodiscard]] const std::string& as_string() const { return *std::get<std::shared_ptr<const std::string>>(storage_); }
  [[nodiscard]] const ListData& list() const { return *std::get<std::shared_ptr<const ListData>>(storage_); }
  [[nodiscard]] const DictData& dict() const { return *std::get<std::shared_ptr<const DictData>>(storage_); }
  [[nodiscard]] Object* object() const { return std::get<Object*>(storage_); }
  [[nodiscard]] std::string undefined_message() const;
  [[nodiscard]] bool undefined_is_unsafe() const noexcept;
  // Nesting depth: 0 for scalars, 1 + the deepest element for lists and dicts.
  [[nodiscard]] std::uint32_t depth() const noexcept;

  // Raises the fault this Undefined carries (UndefinedError, or SecurityError for an unsafe
  // attribute); jinja2 raises it on any use but printing, iterating, testing and len().
  [[noreturn]] void raise_undefined() const;

 private:
  struct UndefinedData {
    std::string message;
    bool unsafe = false;
  };
  // The alternatives are in Kind's order, so index() is the kind.
  using Storage = std::variant<std::shared_ptr<const UndefinedData>, std::monostate, bool, std::int64_t, double,
                               std::shared_ptr<const std::string>, std::shared_ptr<const ListData>,
                               std::shared_ptr<const DictData>, Object*>;
  Storage storage_;
  bool markup_ = false;
};

struct ListData {
  SeqKind kind = SeqKind::kList;
  std::vector<Value> items;
  std::uint32_t depth = 1;
  std::int64_t range_start = 0;  // kRange: what repr() prints, range(start, stop[, step])
  std::int64_t range_stop = 0;
  std::int64_t range_step = 1;
};

// A Python dict: insertion-ordered, keys compared as Python compares them (1 == 1.0 == True).
struct DictData {
  std::vector<std::pair<Value, Value>> entries;
  std::unordered_map<std::string, std::size_t> index;  // hash_key(key) -> position in entries
  std::uint32_t depth = 1;

  [[nodiscard]] const Value* find(const Value& key) const;  // TypeError for an unhashable key
  [[nodiscard]] const Value* find(std::string_view key) const;
  void set(Value key, Value value);  // an existing key keeps its position, as in Python
  [[nodiscard]] std::size_t size() const noexcept { return entries.size(); }
};

// Arguments of a call: positional, then keyword (in source order).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
};

// A render-time object. Owned by the Interpreter that made it; lives until the render ends.
class Object {
 public:
  virtual ~Object() = default;
  [[nodiscard]] virtual std::string type_name() const = 0;  // Python type name, for messages
  // Python attribute lookup; nullopt: no such attribute.
  [[nodiscard]] virtual std::optional<Value> attribute(Interpreter& interpreter, std::string_view name);
  [[nodiscard]] virtual bool callable() const { return false; }
  virtual Value call(Interpreter& interpreter, CallArgs args);
  // Python's repr(); nullopt where Python would print a memory address (which no
  // reimplementation can reproduce), so printing such an object is reported as unsupported.
  [[nodiscard]] virtual std::optional<std::string> repr() const { return std::nullopt; }
};

// A one-pass Python iterator (a generator from map/select/..., reversed(), dict|items):
// iterating consumes it, len() is a TypeError and it is always true.
class IteratorObject final : public Object {
 public:
  IteratorObject(std::string type, std::vector<Value> items) : type_(std::move(type)), items_(std::move(items)) {}
  [[nodiscard]] std::string type_name() const override { return type_; }
  std::vector<Value> drain();  // the items not consumed yet; consumes them
  std::optional<Value> next();

 private:
  std::string type_;
  std::vector<Value> items_;
  std::size_t position_ = 0;
};

// Python semantics of the basic protocols.
[[nodiscard]] std::string type_name(const Value& value);
[[nodiscard]] bool truthy(const Value& value);
[[nodiscard]] std::string to_str(const Value& value);   // str()
[[nodiscard]] std::string to_repr(const Value& value);  // repr()
void append_str(std::string& out, const Value& value);
void append_repr(std::string& out, const Value& value);
[[nodiscard]] std::string float_repr(double value);
[[nodiscard]] std::string string_repr(std::string_view text);
[[nodiscard]] bool equals(const Value& a, const Value& b);
// a < b as Python orders values; TypeError (naming `op`) for unorderable operands.
[[nodiscard]] bool less(const Value& a, const Value& b, std::string_view op = "<");
// Canonical text of a hashable key: equal Python keys give equal text. TypeError if unhashable.
[[nodiscard]] std::string hash_key(const Value& key);

}  // namespace sitsrt::chat
