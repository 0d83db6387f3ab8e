// Template globals: jinja2's defaults (range as the sandbox bounds it, dict, namespace, cycler,
// joiner) and transformers' raise_exception and strftime_now.
#include "chat/builtins.hpp"
#include "chat/interpreter.hpp"
#include "chat/objects.hpp"

#include <chrono>
#include <ctime>

namespace sitsrt::chat {
namespace {

// jinja2.sandbox.MAX_RANGE
constexpr std::int64_t kMaxRange = 100000;

std::int64_t range_int(const Value& v) {
  if (v.is_int() || v.is_bool()) return v.int_value();
  if (v.is_undefined()) v.raise_undefined();
  fault(Fault::kType, "'{}' object cannot be interpreted as an integer", type_name(v));
}

Value g_range(Interpreter&, CallArgs& args) {
  if (!args.keywords.empty()) fault(Fault::kType, "range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) fault(Fault::kType, "range expected at most 3 arguments, got {}", p.size());
  const std::int64_t start = p.size() == 1 ? 0 : range_int(p[0]);
  const std::int64_t stop = p.size() == 1 ? range_int(p[0]) : range_int(p[1]);
  const std::int64_t step = p.size() == 3 ? range_int(p[2]) : 1;
  if (step == 0) fault(Fault::kType, "range() arg 3 must not be zero");
  const long double span = step > 0 ? static_cast<long double>(stop) - start : static_cast<long double>(start) - stop;
  const long double count = span <= 0 ? 0 : (span + std::abs(static_cast<long double>(step)) - 1) / std::abs(static_cast<long double>(step));
  if (count > kMaxRange) {
    fault(Fault::kType, "Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange);
  }
  return Value::range(start, stop, step);
}

void add_pairs(Interpreter& interpreter, const Value& source, const std::function<void(Value, Value)>& add) {
  if (source.is_dict()) {
    for (const auto& [key, value] : source.dict().entries) add(key, value);
    return;
  }
  for (const Value& pair : interpreter.to_list(source)) {
    const std::vector<Value> items = interpreter.to_list(pair);
    if (items.size() != 2) fault(Fault::kType, "dictionary update sequence element has length {}; 2 is required", items.size());
    add(items[0], items[1]);
  }
}

Value g_dict(Interpreter& interpreter, CallArgs& args) {
  if (args.positional.size() > 1) fault(Fault::kType, "dict expected at most 1 argument, got {}", args.positional.size());
  DictData dict;
  if (!args.positional.empty()) add_pairs(interpreter, args.positional[0], [&](Value k, Value v) { dict.set(std::move(k), std::move(v)); });
  for (auto& [name, value] : args.keywords) dict.set(Value::string(name), value);
  return Value::mapping(std::move(dict));
}

Value g_namespace(Interpreter& interpreter, CallArgs& args) {
  if (args.positional.size() > 1) fault(Fault::kType, "dict expected at most 1 argument, got {}", args.positional.size());
  NamespaceObject* ns = interpreter.make<NamespaceObject>();
  if (!args.positional.empty()) add_pairs(interpreter, args.positional[0], [&](Value k, Value v) { ns->set(std::move(k), std::move(v)); });
  for (auto& [name, value] : args.keywords) ns->set(Value::string(name), value);
  return Value::object(ns);
}

class CyclerObject final : public Object {
 public:
  explicit CyclerObject(std::vector<Value> items) : items_(std::move(items)) {}
  [[nodiscard]] std::string type_name() const override { return "Cycler"; }
  [[nodiscard]] std::optional<Value> attribute(Interpreter& interpreter, std::string_view name) override {
    if (name == "current") return items_[position_];
    if (name == "next") {
      return Value::object(interpreter.make<FunctionObject>("next", [this](Interpreter&, CallArgs&) {
        Value current = items_[position_];
        position_ = (position_ + 1) % items_.size();
        return current;
      }));
    }
    if (name == "reset") {
      return Value::object(interpreter.make<FunctionObject>("reset", [this](Interpreter&, CallArgs&) {
        position_ = 0;
        return Value::none();
      }));
    }
    return std::nullopt;
  }

 private:
  std::vector<Value> items_;
  std::size_t position_ = 0;
};

Value g_cycler(Interpreter& interpreter, CallArgs& args) {
  if (args.positional.empty()) fault(Fault::kType, "at least one item has to be provided");
  return Value::object(interpreter.make<CyclerObject>(args.positional));
}

Value g_joiner(Interpreter& interpreter, CallArgs& args) {
  ArgReader reader("joiner", args, {"sep"});
  const Value separator = reader.get_or(0, Value::string(", "));
  auto used = std::make_shared<bool>(false);
  return Value::object(interpreter.make<FunctionObject>("joiner", [separator, used](Interpreter&, CallArgs&) {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return separator;
  }));
}

Value g_lipsum(Interpreter&, CallArgs&) { fault(Fault::kUnsupported, "lipsum() (random text) is not supported"); }

Value g_raise_exception(Interpreter&, CallArgs& args) {
  ArgReader reader("raise_exception", args, {"message"});
  fault(Fault::kRaised, to_str(reader.required(0)));
}

// datetime.now().strftime(format): a naive datetime, so %z and %Z print nothing.
Value g_strftime_now(Interpreter& interpreter, CallArgs& args) {
  ArgReader reader("strftime_now", args, {"format"});
  const Value& format = reader.required(0);
  if (!format.is_string()) fault(Fault::kType, "strftime() argument 1 must be str, not {}", type_name(format));
  std::tm tm{};
  long microseconds = 0;
  if (const std::optional<std::int64_t> fixed = interpreter.now_unix_seconds()) {
    const std::time_t t = static_cast<std::time_t>(*fixed);
    gmtime_r(&t, &tm);
  } else {
    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    localtime_r(&t, &tm);
    microseconds = static_cast<long>(
        std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000);
  }
  std::string pattern;
  const std::string& text = format.as_string();
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 1 < text.size()) {
      const char c = text[++i];
      if (c == 'z' || c == 'Z') continue;
      if (c == 'f') {
        pattern += fmt::format("{:06}", microseconds);
        continue;
      }
      pattern += '%';
      pattern += c;
    } else {
      pattern += text[i];
    }
  }
  if (pattern.empty()) return Value::string("");
  std::string out(64 + pattern.size() * 8, '\0');
  // A leading marker keeps an empty expansion distinguishable from strftime's failure (0).
  const std::string marked = "\x01" + pattern;
  std::size_t written = 0;
  while ((written = std::strftime(out.data(), out.size(), marked.c_str(), &tm)) == 0) {
    if (out.size() > (std::size_t{1} << 20)) fault(Fault::kLimit, "strftime_now() output too long");
    out.resize(out.size() * 2);
  }
  return interpreter.make_string(out.substr(1, written - 1));
}

}  // namespace

void install_globals(Interpreter& interpreter, Scope& globals) {
  const auto add = [&](const char* name, FunctionObject::Body body) {
    globals.set(name, Value::object(interpreter.make<FunctionObject>(name, std::move(body))));
  };
  add("range", g_range);
  add("dict", g_dict);
  add("namespace", g_namespace);
  add("cycler", g_cycler);
  add("joiner", g_joiner);
  add("lipsum", g_lipsum);
  add("raise_exception", g_raise_exception);
  add("strftime_now", g_strftime_now);
}

}  // namespace sitsrt::chat
