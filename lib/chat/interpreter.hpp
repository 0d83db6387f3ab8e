// Renders a TemplateAst: jinja2's runtime semantics (scoping, loops, macros, Undefined, the
// ImmutableSandboxedEnvironment's attribute rules) over chat::Value. One Interpreter serves one
// render on one thread; it owns every object the render creates.
#pragma once

#include "chat/ast.hpp"
#include "chat/value.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt::chat {

struct RenderLimits {
  std::size_t max_output_bytes = std::size_t{64} << 20;   // the rendering, and any one string
  std::int64_t max_loop_iterations = 10'000'000;           // all loops of the render together
  int max_call_depth = 64;                                 // nested macro calls and recursive loops
  std::size_t max_string_work_bytes = std::size_t{4} << 30;  // bytes of all strings built or scanned
  std::size_t max_objects = 1'000'000;                     // namespaces, loops, macros, iterators
};

// Variables visible to a part of the template; scopes chain to the enclosing one.
class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  [[nodiscard]] const Value* find(std::string_view name) const;
  void set(std::string_view name, Value value);

 private:
  std::shared_ptr<Scope> parent_;
  std::map<std::string, Value, std::less<>> vars_;
};

class Interpreter {
 public:
  Interpreter(const TemplateAst& ast, RenderLimits limits, std::optional<std::int64_t> now_unix_seconds);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders with `variables` as the template's context. Throws RenderFault; position() then
  // says where.
  std::string render(const DictData& variables);
  [[nodiscard]] SourcePos position() const noexcept { return position_; }

  // ---- services for the builtins ----
  [[nodiscard]] Value get_attr(const Value& object, std::string_view name);  // sandbox getattr
  [[nodiscard]] Value get_item(const Value& object, const Value& key);       // sandbox getitem
  [[nodiscard]] std::vector<Value> to_list(const Value& iterable);           // list(x); consumes iterators
  [[nodiscard]] std::int64_t length(const Value& value);                     // len(x)
  Value call(const Value& callee, CallArgs args);
  Value call_filter(std::string_view name, const Value& subject, CallArgs args);
  bool call_test(std::string_view name, const Value& subject, CallArgs args);
  // A new string; counts toward the render's string budget and size limit.
  [[nodiscard]] Value make_string(std::string text, bool markup = false);
  void charge_string(std::size_t bytes);
  // Counts a pass over `value` (a string's bytes, a list's or dict's items) toward the same
  // budget, so that repeating linear work in a loop cannot run for hours.
  void charge_scan(const Value& value);
  [[nodiscard]] std::optional<std::int64_t> now_unix_seconds() const noexcept { return now_; }
  [[nodiscard]] const RenderLimits& limits() const noexcept { return limits_; }

  template <typename T, typename... Args>
  T* make(Args&&... args) {
    if (objects_.size() >= limits_.max_objects) fault(Fault::kLimit, "the render created more than {} objects", limits_.max_objects);
    auto object = std::make_unique<T>(std::forward<Args>(args)...);
    T* raw = object.get();
    objects_.push_back(std::move(object));
    return raw;
  }

  // ---- used by the render-time objects ----
  struct MacroDefinition {
    std::string name;
    const std::vector<Parameter>* params;
    const Body* body;
    MacroUses uses;
    std::shared_ptr<Scope> closure;
  };
  Value invoke_macro(const MacroDefinition& macro, CallArgs args);
  std::string render_loop(const ForStmt& loop, const std::shared_ptr<Scope>& scope, const Value& iterable, int depth);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  class PositionGuard;
  class DepthGuard;

  Flow exec_body(const Body& body, const std::shared_ptr<Scope>& scope);
  Flow exec(const Stmt& stmt, const std::shared_ptr<Scope>& scope);
  void exec_output(const OutputStmt& node, const std::shared_ptr<Scope>& scope);
  Flow exec_if(const IfStmt& node, const std::shared_ptr<Scope>& scope);
  void exec_for(const ForStmt& node, const std::shared_ptr<Scope>& scope, const Value& iterable, int depth);
  void exec_call_block(const CallBlockStmt& node, const std::shared_ptr<Scope>& scope);
  std::string capture(const Body& body, const std::shared_ptr<Scope>& scope);
  void assign(const Expr& target, const Value& value, Scope& scope, const std::shared_ptr<Scope>& lookup);
  void emit(std::string_view text);

  Value eval(const Expr& expr, const std::shared_ptr<Scope>& scope);
  Value eval_inner(const Expr& expr, const std::shared_ptr<Scope>& scope);
  CallArgs eval_args(const Arguments& args, const std::shared_ptr<Scope>& scope);
  Value eval_filter_chain(const FilterExpr& filter, const std::shared_ptr<Scope>& scope, const Value* block_text);
  Value eval_compare(const CompareExpr& node, const std::shared_ptr<Scope>& scope);
  Value slice(const Value& object, const SliceExpr& slice, const std::shared_ptr<Scope>& scope);

  const TemplateAst& ast_;
  RenderLimits limits_;
  std::optional<std::int64_t> now_;
  std::vector<std::unique_ptr<Object>> objects_;
  std::string* out_ = nullptr;
  SourcePos position_;
  std::int64_t iterations_ = 0;
  std::size_t string_work_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
};

// Python's binary operators and membership on Values (with markupsafe's Markup rules).
[[nodiscard]] Value binary_op(Interpreter& interpreter, BinaryOp op, const Value& left, const Value& right);
[[nodiscard]] bool contains(Interpreter& interpreter, const Value& container, const Value& item);

}  // namespace sitsrt::chat
