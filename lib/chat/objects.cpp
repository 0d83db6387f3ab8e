// Render-time objects: namespace(), macros and callers, the loop variable.
#include "chat/objects.hpp"

#include <fmt/format.h>

namespace sitsrt::chat {

std::optional<Value> NamespaceObject::attribute(Interpreter&, std::string_view name) {
  if (const Value* value = attributes_.find(name)) return *value;
  return std::nullopt;
}

std::optional<std::string> NamespaceObject::repr() const {
  return "<Namespace " + to_repr(Value::mapping(attributes_)) + ">";
}

std::optional<Value> MacroObject::attribute(Interpreter&, std::string_view name) {
  if (name == "name") return Value::string(definition_.name);
  if (name == "arguments") {
    std::vector<Value> names;
    for (const Parameter& param : *definition_.params) names.push_back(Value::string(param.name));
    return Value::tuple(std::move(names));
  }
  if (name == "catch_kwargs") return Value::boolean(definition_.uses.kwargs);
  if (name == "catch_varargs") return Value::boolean(definition_.uses.varargs);
  if (name == "caller") return Value::boolean(definition_.uses.caller);
  return std::nullopt;
}

Value MacroObject::call(Interpreter& interpreter, CallArgs args) { return interpreter.invoke_macro(definition_, std::move(args)); }

std::optional<Value> LoopObject::attribute(Interpreter& interpreter, std::string_view name) {
  const auto length = static_cast<std::int64_t>(items_.size());
  const auto index0 = static_cast<std::int64_t>(index0_);
  if (name == "index0") return Value::integer(index0);
  if (name == "index") return Value::integer(index0 + 1);
  if (name == "revindex") return Value::integer(length - index0);
  if (name == "revindex0") return Value::integer(length - index0 - 1);
  if (name == "first") return Value::boolean(index0 == 0);
  if (name == "last") return Value::boolean(index0 + 1 == length);
  if (name == "length") return Value::integer(length);
  if (name == "depth") return Value::integer(depth0_ + 1);
  if (name == "depth0") return Value::integer(depth0_);
  if (name == "previtem") {
    if (index0 == 0) return Value::undefined("there is no previous item");
    return items_[index0_ - 1];
  }
  if (name == "nextitem") {
    if (index0 + 1 >= length) return Value::undefined("there is no next item");
    return items_[index0_ + 1];
  }
  if (name == "cycle") {
    return Value::object(interpreter.make<FunctionObject>("cycle", [this](Interpreter&, CallArgs& args) {
      if (args.positional.empty()) fault(Fault::kType, "no items for cycling given");
      return args.positional[index0_ % args.positional.size()];
    }));
  }
  if (name == "changed") {
    return Value::object(interpreter.make<FunctionObject>("changed", [this](Interpreter&, CallArgs& args) {
      Value current = Value::tuple(args.positional);
      if (last_changed_ && equals(*last_changed_, current)) return Value::boolean(false);
      last_changed_ = std::move(current);
      return Value::boolean(true);
    }));
  }
  return std::nullopt;
}

Value LoopObject::call(Interpreter& interpreter, CallArgs args) {
  if (recursive_loop_ == nullptr) fault(Fault::kType, "The loop must have the 'recursive' marker to be called recursively.");
  if (args.positional.size() != 1 || !args.keywords.empty()) fault(Fault::kType, "loop() takes exactly one argument");
  return interpreter.make_string(interpreter.render_loop(*recursive_loop_, loop_scope_, args.positional[0], depth0_ + 1));
}

std::optional<std::string> LoopObject::repr() const {
  return fmt::format("<LoopContext {}/{}>", index0_ + 1, items_.size());
}

}  // namespace sitsrt::chat
