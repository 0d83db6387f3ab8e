// Render-time objects: jinja2's namespace(), loop, macros and callers, and Python callables
// (builtin functions and bound methods). Owned by the Interpreter of one render.
#pragma once

#include "chat/interpreter.hpp"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace sitsrt::chat {

// jinja2.utils.Namespace: the one object a template may assign attributes to ({% set ns.x = %}).
class NamespaceObject final : public Object {
 public:
  [[nodiscard]] std::string type_name() const override { return "Namespace"; }
  [[nodiscard]] std::optional<Value> attribute(Interpreter& interpreter, std::string_view name) override;
  [[nodiscard]] std::optional<std::string> repr() const override;
  void set(Value name, Value value) { attributes_.set(std::move(name), std::move(value)); }

 private:
  DictData attributes_;
};

// A Python callable implemented in C++: a global function or a method bound to its object.
class FunctionObject final : public Object {
 public:
  using Body = std::function<Value(Interpreter&, CallArgs&)>;
  FunctionObject(std::string name, Body body) : name_(std::move(name)), body_(std::move(body)) {}
  [[nodiscard]] std::string type_name() const override { return "builtin_function_or_method"; }
  [[nodiscard]] bool callable() const override { return true; }
  Value call(Interpreter& interpreter, CallArgs args) override { return body_(interpreter, args); }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

 private:
  std::string name_;
  Body body_;
};

class MacroObject final : public Object {
 public:
  explicit MacroObject(Interpreter::MacroDefinition definition) : definition_(std::move(definition)) {}
  [[nodiscard]] std::string type_name() const override { return "Macro"; }
  [[nodiscard]] std::optional<Value> attribute(Interpreter& interpreter, std::string_view name) override;
  [[nodiscard]] bool callable() const override { return true; }
  Value call(Interpreter& interpreter, CallArgs args) override;
  [[nodiscard]] std::optional<std::string> repr() const override { return "<Macro " + string_repr(definition_.name) + ">"; }

 private:
  Interpreter::MacroDefinition definition_;
};

// jinja2.runtime.LoopContext over a materialized sequence.
class LoopObject final : public Object {
 public:
  LoopObject(std::vector<Value> items, int depth0, const ForStmt* recursive_loop, std::shared_ptr<Scope> loop_scope)
      : items_(std::move(items)), depth0_(depth0), recursive_loop_(recursive_loop), loop_scope_(std::move(loop_scope)) {}
  [[nodiscard]] std::string type_name() const override { return "LoopContext"; }
  [[nodiscard]] std::optional<Value> attribute(Interpreter& interpreter, std::string_view name) override;
  [[nodiscard]] bool callable() const override { return true; }
  Value call(Interpreter& interpreter, CallArgs args) override;
  [[nodiscard]] std::optional<std::string> repr() const override;
  void set_index0(std::size_t index0) noexcept { index0_ = index0; }
  [[nodiscard]] std::size_t size() const noexcept { return items_.size(); }

 private:
  std::vector<Value> items_;
  std::size_t index0_ = 0;
  int depth0_;
  const ForStmt* recursive_loop_;  // null unless the loop is marked recursive
  std::shared_ptr<Scope> loop_scope_;
  std::optional<Value> last_changed_;
};

}  // namespace sitsrt::chat
