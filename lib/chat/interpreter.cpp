#include "chat/interpreter.hpp"

#include "chat/builtins.hpp"
#include "chat/objects.hpp"
#include "chat/unicode.hpp"

#include <exception>

namespace sitsrt::chat {
namespace {

// Nested evaluation frames a render may use (expressions, statements, calls together): bounds
// the interpreter's stack use whatever the template does.
constexpr int kMaxEvalDepth = 1500;

std::string object_type_repr(const Value& object) {
  if (object.is_none()) return "None";
  return type_name(object) + " object";
}

Value missing_attribute(const Value& object, std::string_view name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(object), name));
}

Value missing_item(const Value& object, const Value& key) {
  if (key.is_string()) return missing_attribute(object, key.as_string());
  return Value::undefined(fmt::format("{} has no element {}", object_type_repr(object), to_repr(key)));
}

bool is_dunder(std::string_view name) {
  return name.size() > 4 && name.substr(0, 2) == "__" && name.substr(name.size() - 2) == "__";
}

}  // namespace

const Value* Scope::find(std::string_view name) const {
  for (const Scope* scope = this; scope != nullptr; scope = scope->parent_.get()) {
    const auto it = scope->vars_.find(name);
    if (it != scope->vars_.end()) return &it->second;
  }
  return nullptr;
}

void Scope::set(std::string_view name, Value value) {
  const auto it = vars_.find(name);
  if (it != vars_.end()) {
    it->second = std::move(value);
  } else {
    vars_.emplace(std::string(name), std::move(value));
  }
}

// Keeps the position of the innermost node being evaluated; on an exception it is left in
// place, so the error names the node that failed.
class Interpreter::PositionGuard {
 public:
  PositionGuard(Interpreter& interpreter, SourcePos pos)
      : interpreter_(interpreter), saved_(interpreter.position_), uncaught_(std::uncaught_exceptions()) {
    interpreter.position_ = pos;
  }
  ~PositionGuard() {
    if (std::uncaught_exceptions() == uncaught_) interpreter_.position_ = saved_;
  }
  PositionGuard(const PositionGuard&) = delete;
  PositionGuard& operator=(const PositionGuard&) = delete;

 private:
  Interpreter& interpreter_;
  SourcePos saved_;
  int uncaught_;
};

class Interpreter::DepthGuard {
 public:
  explicit DepthGuard(Interpreter& interpreter) : interpreter_(interpreter) {
    if (++interpreter.eval_depth_ > kMaxEvalDepth) {
      --interpreter.eval_depth_;
      fault(Fault::kLimit, "the render nests deeper than {} evaluation levels", kMaxEvalDepth);
    }
  }
  ~DepthGuard() { --interpreter_.eval_depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  Interpreter& interpreter_;
};

Interpreter::Interpreter(const TemplateAst& ast, RenderLimits limits, std::optional<std::int64_t> now_unix_seconds)
    : ast_(ast), limits_(limits), now_(now_unix_seconds) {}

Interpreter::~Interpreter() = default;

std::string Interpreter::render(const DictData& variables) {
  auto globals = std::make_shared<Scope>(nullptr);
  install_globals(*this, *globals);
  auto root = std::make_shared<Scope>(globals);
  for (const auto& [key, value] : variables.entries) {
    if (key.is_string()) root->set(key.as_string(), value);
  }
  std::string out;
  out_ = &out;
  exec_body(ast_.body, root);
  out_ = nullptr;
  return out;
}

void Interpreter::emit(std::string_view text) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    fault(Fault::kLimit, "the rendering exceeds {} bytes", limits_.max_output_bytes);
  }
  out_->append(text);
}

void Interpreter::charge_string(std::size_t bytes) {
  if (bytes > limits_.max_output_bytes) fault(Fault::kLimit, "a string exceeds {} bytes", limits_.max_output_bytes);
  string_work_ += bytes;
  if (string_work_ > limits_.max_string_work_bytes) {
    fault(Fault::kLimit, "the render built more than {} bytes of strings", limits_.max_string_work_bytes);
  }
}

void Interpreter::charge_scan(const Value& value) {
  std::size_t cost = 0;
  if (value.is_string()) cost = value.as_string().size();
  if (value.is_sequence()) cost = value.list().items.size() * 16;
  if (value.is_dict()) cost = value.dict().size() * 32;
  string_work_ += cost;
  if (string_work_ > limits_.max_string_work_bytes) {
    fault(Fault::kLimit, "the render built or scanned more than {} bytes of strings and lists", limits_.max_string_work_bytes);
  }
}

Value Interpreter::make_string(std::string text, bool markup) {
  charge_string(text.size());
  return Value::string(std::move(text), markup);
}

// ---- statements ----

Interpreter::Flow Interpreter::exec_body(const Body& body, const std::shared_ptr<Scope>& scope) {
  for (const StmtPtr& stmt : body) {
    const Flow flow = exec(*stmt, scope);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

std::string Interpreter::capture(const Body& body, const std::shared_ptr<Scope>& scope) {
  std::string buffer;
  std::string* const saved = std::exchange(out_, &buffer);
  struct Restore {
    std::string*& target;
    std::string* value;
    ~Restore() { target = value; }
  } restore{out_, saved};
  exec_body(body, scope);
  return buffer;
}

Interpreter::Flow Interpreter::exec(const Stmt& stmt, const std::shared_ptr<Scope>& scope) {
  DepthGuard depth(*this);
  PositionGuard position(*this, stmt.pos);
  switch (stmt.kind) {
    case StmtKind::kOutput: exec_output(static_cast<const OutputStmt&>(stmt), scope); return Flow::kNormal;
    case StmtKind::kIf: return exec_if(static_cast<const IfStmt&>(stmt), scope);
    case StmtKind::kFor: {
      const auto& node = static_cast<const ForStmt&>(stmt);
      exec_for(node, scope, eval(*node.iterable, scope), 0);
      return Flow::kNormal;
    }
    case StmtKind::kSet: {
      const auto& node = static_cast<const SetStmt&>(stmt);
      assign(*node.target, eval(*node.value, scope), *scope, scope);
      return Flow::kNormal;
    }
    case StmtKind::kSetBlock: {
      const auto& node = static_cast<const SetBlockStmt&>(stmt);
      auto inner = std::make_shared<Scope>(scope);
      Value value = make_string(capture(node.body, inner));
      if (node.filter) value = eval_filter_chain(static_cast<const FilterExpr&>(*node.filter), inner, &value);
      assign(*node.target, value, *scope, scope);
      return Flow::kNormal;
    }
    case StmtKind::kMacro: {
      const auto& node = static_cast<const MacroStmt&>(stmt);
      MacroObject* macro = make<MacroObject>(MacroDefinition{node.name, &node.params, &node.body, node.uses, scope});
      scope->set(node.name, Value::object(macro));
      return Flow::kNormal;
    }
    case StmtKind::kCallBlock: exec_call_block(static_cast<const CallBlockStmt&>(stmt), scope); return Flow::kNormal;
    case StmtKind::kFilterBlock: {
      const auto& node = static_cast<const FilterBlockStmt&>(stmt);
      auto inner = std::make_shared<Scope>(scope);
      const Value text = make_string(capture(node.body, inner));
      const Value result = eval_filter_chain(static_cast<const FilterExpr&>(*node.filter), inner, &text);
      std::string printed;
      append_str(printed, result);
      emit(printed);
      return Flow::kNormal;
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
    case StmtKind::kGeneration: {
      // transformers renders the body as a caller() macro: its assignments stay inside.
      exec_body(static_cast<const GenerationStmt&>(stmt).body, std::make_shared<Scope>(scope));
      return Flow::kNormal;
    }
  }
  return Flow::kNormal;
}

void Interpreter::exec_output(const OutputStmt& node, const std::shared_ptr<Scope>& scope) {
  for (const OutputStmt::Part& part : node.parts) {
    if (!part.expr) {
      emit(part.text);
      continue;
    }
    const Value value = eval(*part.expr, scope);
    if (value.is_string()) {
      emit(value.as_string());
    } else {
      std::string printed;
      append_str(printed, value);
      emit(printed);
    }
  }
}

Interpreter::Flow Interpreter::exec_if(const IfStmt& node, const std::shared_ptr<Scope>& scope) {
  for (const auto& [test, body] : node.branches) {
    if (truthy(eval(*test, scope))) return exec_body(body, scope);
  }
  return exec_body(node.otherwise, scope);
}

void Interpreter::exec_for(const ForStmt& node, const std::shared_ptr<Scope>& scope, const Value& iterable, int depth) {
  std::vector<Value> items = to_list(iterable);
  if (node.condition) {
    std::vector<Value> kept;
    for (Value& item : items) {
      auto test_scope = std::make_shared<Scope>(scope);
      assign(*node.target, item, *test_scope, test_scope);
      if (truthy(eval(*node.condition, test_scope))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const std::size_t count = items.size();
  LoopObject* loop = make<LoopObject>(items, depth, node.recursive ? &node : nullptr, scope);
  // jinja2 clears its "no iteration" flag at the end of an iteration's body, so an iteration
  // left by break or continue does not count for {% else %}.
  bool completed_iteration = false;
  for (std::size_t i = 0; i < count; ++i) {
    if (++iterations_ > limits_.max_loop_iterations) {
      fault(Fault::kLimit, "the render ran more than {} loop iterations", limits_.max_loop_iterations);
    }
    auto iteration = std::make_shared<Scope>(scope);
    assign(*node.target, items[i], *iteration, iteration);
    loop->set_index0(i);
    iteration->set("loop", Value::object(loop));
    const Flow flow = exec_body(node.body, iteration);
    if (flow == Flow::kBreak) break;
    if (flow == Flow::kNormal) completed_iteration = true;
  }
  if (!completed_iteration && !node.otherwise.empty()) exec_body(node.otherwise, std::make_shared<Scope>(scope));
}

std::string Interpreter::render_loop(const ForStmt& loop, const std::shared_ptr<Scope>& scope, const Value& iterable,
                                     int depth) {
  if (++call_depth_ > limits_.max_call_depth) {
    --call_depth_;
    fault(Fault::kLimit, "recursive loops nest deeper than {} levels", limits_.max_call_depth);
  }
  std::string buffer;
  std::string* const saved = std::exchange(out_, &buffer);
  struct Restore {
    Interpreter& self;
    std::string* value;
    ~Restore() {
      self.out_ = value;
      --self.call_depth_;
    }
  } restore{*this, saved};
  exec_for(loop, scope, iterable, depth);
  return buffer;
}

void Interpreter::exec_call_block(const CallBlockStmt& node, const std::shared_ptr<Scope>& scope) {
  const auto& call = static_cast<const CallExpr&>(*node.call);
  MacroObject* caller = make<MacroObject>(MacroDefinition{"caller", &node.params, &node.body, node.uses, scope});
  const Value callee = eval(*call.callee, scope);
  CallArgs args = eval_args(call.args, scope);
  args.keywords.emplace_back("caller", Value::object(caller));
  const Value result = this->call(callee, std::move(args));
  std::string printed;
  append_str(printed, result);
  emit(printed);
}

void Interpreter::assign(const Expr& target, const Value& value, Scope& scope, const std::shared_ptr<Scope>& lookup) {
  switch (target.kind) {
    case ExprKind::kName: scope.set(static_cast<const NameExpr&>(target).name, value); return;
    case ExprKind::kTuple: {
      const auto& names = static_cast<const SequenceExpr&>(target).items;
      const std::vector<Value> items = to_list(value);
      if (items.size() < names.size()) {
        fault(Fault::kType, "not enough values to unpack (expected {}, got {})", names.size(), items.size());
      }
      if (items.size() > names.size()) fault(Fault::kType, "too many values to unpack (expected {})", names.size());
      for (std::size_t i = 0; i < names.size(); ++i) assign(*names[i], items[i], scope, lookup);
      return;
    }
    case ExprKind::kNsRef: {
      const auto& ref = static_cast<const NsRefExpr&>(target);
      const Value* object = lookup->find(ref.name);
      auto* ns = object != nullptr && object->is_object() ? dynamic_cast<NamespaceObject*>(object->object()) : nullptr;
      if (ns == nullptr) fault(Fault::kType, "cannot assign attribute on non-namespace object");
      ns->set(Value::string(ref.attr), value);
      return;
    }
    default: fault(Fault::kType, "can't assign to this expression");
  }
}

// ---- expressions ----

Value Interpreter::eval(const Expr& expr, const std::shared_ptr<Scope>& scope) {
  DepthGuard depth(*this);
  PositionGuard position(*this, expr.pos);
  return eval_inner(expr, scope);
}

CallArgs Interpreter::eval_args(const Arguments& args, const std::shared_ptr<Scope>& scope) {
  CallArgs out;
  out.positional.reserve(args.positional.size());
  for (const ExprPtr& arg : args.positional) out.positional.push_back(eval(*arg, scope));
  for (const auto& [name, arg] : args.keywords) out.keywords.emplace_back(name, eval(*arg, scope));
  return out;
}

Value Interpreter::eval_filter_chain(const FilterExpr& filter, const std::shared_ptr<Scope>& scope,
                                     const Value* block_text) {
  PositionGuard position(*this, filter.pos);
  Value subject;
  if (filter.subject) {
    const auto& inner = *filter.subject;
    subject = inner.kind == ExprKind::kFilter && block_text != nullptr
                  ? eval_filter_chain(static_cast<const FilterExpr&>(inner), scope, block_text)
                  : eval(inner, scope);
  } else if (block_text != nullptr) {
    subject = *block_text;
  }
  CallArgs args = eval_args(filter.args, scope);
  position_ = filter.pos;
  charge_scan(subject);
  if (filter.function == nullptr) fault(Fault::kUnsupported, "No filter named '{}' found (jinja2 has no such filter)", filter.name);
  return filter.function(*this, subject, args);
}

Value Interpreter::eval_inner(const Expr& expr, const std::shared_ptr<Scope>& scope) {
  switch (expr.kind) {
    case ExprKind::kConst: return static_cast<const ConstExpr&>(expr).value;
    case ExprKind::kName: {
      const auto& name = static_cast<const NameExpr&>(expr).name;
      const Value* value = scope->find(name);
      if (value != nullptr) return *value;
      return Value::undefined(fmt::format("'{}' is undefined", name));
    }
    case ExprKind::kNsRef: fault(Fault::kType, "a namespace reference is only an assignment target");
    case ExprKind::kGetAttr: {
      const auto& node = static_cast<const GetAttrExpr&>(expr);
      const Value object = eval(*node.object, scope);
      position_ = node.pos;
      return get_attr(object, node.attr);
    }
    case ExprKind::kGetItem: {
      const auto& node = static_cast<const GetItemExpr&>(expr);
      const Value object = eval(*node.object, scope);
      if (node.key->kind == ExprKind::kSlice) return slice(object, static_cast<const SliceExpr&>(*node.key), scope);
      const Value key = eval(*node.key, scope);
      position_ = node.pos;
      return get_item(object, key);
    }
    case ExprKind::kSlice: fault(Fault::kType, "a slice is only a subscript");
    case ExprKind::kCall: {
      const auto& node = static_cast<const CallExpr&>(expr);
      const Value callee = eval(*node.callee, scope);
      CallArgs args = eval_args(node.args, scope);
      position_ = node.pos;
      return call(callee, std::move(args));
    }
    case ExprKind::kFilter: return eval_filter_chain(static_cast<const FilterExpr&>(expr), scope, nullptr);
    case ExprKind::kTest: {
      const auto& node = static_cast<const TestExpr&>(expr);
      const Value subject = eval(*node.subject, scope);
      CallArgs args = eval_args(node.args, scope);
      position_ = node.pos;
      if (node.function == nullptr) fault(Fault::kUnsupported, "No test named '{}' found (jinja2 has no such test)", node.name);
      return Value::boolean(node.function(*this, subject, args));
    }
    case ExprKind::kBinary: {
      const auto& node = static_cast<const BinaryExpr&>(expr);
      const Value left = eval(*node.left, scope);
      const Value right = eval(*node.right, scope);
      position_ = node.pos;
      return binary_op(*this, node.op, left, right);
    }
    case ExprKind::kUnary: {
      const auto& node = static_cast<const UnaryExpr&>(expr);
      const Value operand = eval(*node.operand, scope);
      position_ = node.pos;
      if (operand.is_undefined()) operand.raise_undefined();
      if (operand.is_float()) return Value::number(node.negate ? -operand.as_float() : operand.as_float());
      if (operand.is_int() || operand.is_bool()) {
        const std::int64_t v = operand.int_value();
        if (node.negate && v == INT64_MIN) fault(Fault::kUnsupported, "integer overflow (Python integers are unbounded)");
        return Value::integer(node.negate ? -v : v);
      }
      fault(Fault::kType, "bad operand type for unary {}: '{}'", node.negate ? "-" : "+", type_name(operand));
    }
    case ExprKind::kNot: return Value::boolean(!truthy(eval(*static_cast<const LogicalExpr&>(expr).left, scope)));
    case ExprKind::kAnd: {
      const auto& node = static_cast<const LogicalExpr&>(expr);
      Value left = eval(*node.left, scope);
      if (!truthy(left)) return left;
      return eval(*node.right, scope);
    }
    case ExprKind::kOr: {
      const auto& node = static_cast<const LogicalExpr&>(expr);
      Value left = eval(*node.left, scope);
      if (truthy(left)) return left;
      return eval(*node.right, scope);
    }
    case ExprKind::kCompare: return eval_compare(static_cast<const CompareExpr&>(expr), scope);
    case ExprKind::kConcat: {
      std::string text;
      for (const ExprPtr& part : static_cast<const ConcatExpr&>(expr).parts) append_str(text, eval(*part, scope));
      return make_string(std::move(text));
    }
    case ExprKind::kCondExpr: {
      const auto& node = static_cast<const CondExpr&>(expr);
      if (truthy(eval(*node.test, scope))) return eval(*node.then, scope);
      if (node.otherwise) return eval(*node.otherwise, scope);
      return Value::undefined(fmt::format("the inline if-expression on line {} evaluated to false and no else section was defined.", node.pos.line));
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      const auto& node = static_cast<const SequenceExpr&>(expr);
      std::vector<Value> items;
      items.reserve(node.items.size());
      for (const ExprPtr& item : node.items) items.push_back(eval(*item, scope));
      return Value::sequence(std::move(items), expr.kind == ExprKind::kList ? SeqKind::kList : SeqKind::kTuple);
    }
    case ExprKind::kDict: {
      DictData dict;
      for (const auto& [key, value] : static_cast<const DictExpr&>(expr).items) {
        Value k = eval(*key, scope);
        Value v = eval(*value, scope);
        position_ = key->pos;
        dict.set(std::move(k), std::move(v));
      }
      return Value::mapping(std::move(dict));
    }
  }
  fault(Fault::kType, "unknown expression");
}

Value Interpreter::eval_compare(const CompareExpr& node, const std::shared_ptr<Scope>& scope) {
  Value left = eval(*node.first, scope);
  for (const auto& [op, operand] : node.rest) {
    Value right = eval(*operand, scope);
    position_ = node.pos;
    charge_scan(op == CompareOp::kIn || op == CompareOp::kNotIn ? right : left);
    bool result = false;
    switch (op) {
      case CompareOp::kEq: result = equals(left, right); break;
      case CompareOp::kNe: result = !equals(left, right); break;
      case CompareOp::kLt: result = less(left, right, "<"); break;
      case CompareOp::kGt: result = less(right, left, ">"); break;
      case CompareOp::kLe: result = less(left, right, "<=") || equals(left, right); break;
      case CompareOp::kGe: result = less(right, left, ">=") || equals(left, right); break;
      case CompareOp::kIn: result = contains(*this, right, left); break;
      case CompareOp::kNotIn: result = !contains(*this, right, left); break;
    }
    if (!result) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interpreter::slice(const Value& object, const SliceExpr& node, const std::shared_ptr<Scope>& scope) {
  const auto bound = [&](const ExprPtr& e) -> std::optional<Value> {
    if (!e) return std::nullopt;
    return eval(*e, scope);
  };
  const std::optional<Value> start_v = bound(node.start);
  const std::optional<Value> stop_v = bound(node.stop);
  const std::optional<Value> step_v = bound(node.step);
  position_ = node.pos;
  if (object.is_undefined()) object.raise_undefined();
  const bool sliceable = object.is_string() || object.is_indexable();
  const auto integral = [](const std::optional<Value>& v) { return !v || v->is_none() || v->is_int() || v->is_bool(); };
  if (!sliceable || !integral(start_v) || !integral(stop_v) || !integral(step_v)) {
    return Value::undefined(fmt::format("{} has no element slice", object_type_repr(object)));  // TypeError, caught
  }
  const auto get = [](const std::optional<Value>& v) -> std::optional<std::int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    return v->int_value();
  };
  const std::int64_t step = get(step_v).value_or(1);
  if (step == 0) fault(Fault::kType, "slice step cannot be zero");
  std::u32string code_points;
  const std::vector<Value>* items = nullptr;
  std::int64_t length = 0;
  charge_scan(object);
  if (object.is_string()) {
    code_points = unicode::decode(object.as_string());
    length = static_cast<std::int64_t>(code_points.size());
  } else {
    items = &object.list().items;
    length = static_cast<std::int64_t>(items->size());
  }
  // Python's slice.indices().
  const auto clamp = [&](std::optional<std::int64_t> v, std::int64_t fallback) {
    if (!v) return fallback;
    std::int64_t x = *v;
    if (x < 0) {
      x += length;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= length) {
      x = step < 0 ? length - 1 : length;
    }
    return x;
  };
  const std::int64_t start = clamp(get(start_v), step < 0 ? length - 1 : 0);
  const std::int64_t stop = clamp(get(stop_v), step < 0 ? -1 : length);
  std::vector<std::int64_t> picked;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picked.push_back(i);
  if (object.is_string()) {
    std::u32string out;
    for (const std::int64_t i : picked) out.push_back(code_points[static_cast<std::size_t>(i)]);
    return make_string(unicode::encode(out), object.is_markup());
  }
  if (object.is_range()) {  // a slice of a range is a range
    const ListData& r = object.list();
    return Value::range(r.range_start + start * r.range_step, r.range_start + stop * r.range_step, r.range_step * step);
  }
  std::vector<Value> out;
  out.reserve(picked.size());
  for (const std::int64_t i : picked) out.push_back((*items)[static_cast<std::size_t>(i)]);
  return Value::sequence(std::move(out), object.is_tuple() ? SeqKind::kTuple : SeqKind::kList);
}

// ---- attribute and item access (jinja2.sandbox.SandboxedEnvironment.getattr / getitem) ----

Value Interpreter::get_attr(const Value& object, std::string_view name) {
  if (object.is_undefined()) object.raise_undefined();
  if (is_dunder(name)) {
    return Value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(object)), true);
  }
  if (object.is_object()) {
    if (std::optional<Value> value = object.object()->attribute(*this, name)) return *value;
    return missing_attribute(object, name);
  }
  if (std::optional<Value> value = builtin_attribute(*this, object, name)) return *value;
  if (object.is_dict()) {
    if (const Value* value = object.dict().find(name)) return *value;
  }
  return missing_attribute(object, name);
}

Value Interpreter::get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) object.raise_undefined();
  if (object.is_dict()) {
    const bool hashable = !(key.is_dict() || key.is_list() || (key.is_sequence() && !key.is_tuple()));
    if (hashable) {
      if (const Value* value = object.dict().find(key)) return *value;
    }
  } else if ((object.is_indexable() || object.is_string()) && (key.is_int() || key.is_bool())) {
    std::int64_t index = key.int_value();
    if (object.is_string()) {
      charge_scan(object);
      const std::string& text = object.as_string();
      if (index < 0) index += static_cast<std::int64_t>(unicode::length(text));
      // Walk to the code point without decoding the whole string.
      for (std::size_t at = 0; index >= 0 && at < text.size(); ++at) {
        if ((static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) continue;
        if (index-- == 0) return Value::string(text.substr(at, unicode::decode_at(text, at).bytes), object.is_markup());
      }
    } else {
      const auto& items = object.list().items;
      const auto n = static_cast<std::int64_t>(items.size());
      if (index < 0) index += n;
      if (index >= 0 && index < n) return items[static_cast<std::size_t>(index)];
    }
    return missing_item(object, key);
  }
  if (key.is_string()) {  // obj[name] failed: jinja2 falls back to the attribute
    const std::string& name = key.as_string();
    if (is_dunder(name)) {
      return Value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(object)), true);
    }
    if (object.is_object()) {
      if (std::optional<Value> value = object.object()->attribute(*this, name)) return *value;
    } else if (std::optional<Value> value = builtin_attribute(*this, object, name)) {
      return *value;
    }
  }
  return missing_item(object, key);
}

std::vector<Value> Interpreter::to_list(const Value& iterable) {
  charge_scan(iterable);
  switch (iterable.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return iterable.list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(iterable.dict().size());
      for (const auto& [key, value] : iterable.dict().entries) keys.push_back(key);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      const std::string& text = iterable.as_string();
      for (std::size_t i = 0; i < text.size();) {
        const unicode::Decoded d = unicode::decode_at(text, i);
        chars.push_back(Value::string(text.substr(i, d.bytes)));
        i += d.bytes;
      }
      return chars;
    }
    case Value::Kind::kObject:
      if (auto* iterator = dynamic_cast<IteratorObject*>(iterable.object())) return iterator->drain();
      break;
    default: break;
  }
  fault(Fault::kType, "'{}' object is not iterable", type_name(iterable));
}

std::int64_t Interpreter::length(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<std::int64_t>(unicode::length(value.as_string()));
    case Value::Kind::kList: return static_cast<std::int64_t>(value.list().items.size());
    case Value::Kind::kDict: return static_cast<std::int64_t>(value.dict().size());
    case Value::Kind::kObject:
      if (auto* loop = dynamic_cast<LoopObject*>(value.object())) return static_cast<std::int64_t>(loop->size());
      break;
    default: break;
  }
  fault(Fault::kType, "object of type '{}' has no len()", type_name(value));
}

Value Interpreter::call(const Value& callee, CallArgs args) {
  if (callee.is_undefined()) callee.raise_undefined();
  if (callee.is_object() && callee.object()->callable()) {
    DepthGuard depth(*this);
    return callee.object()->call(*this, std::move(args));
  }
  fault(Fault::kType, "'{}' object is not callable", type_name(callee));
}

Value Interpreter::call_filter(std::string_view name, const Value& subject, CallArgs args) {
  const FilterFunction function = find_filter(name);
  if (function == nullptr) {
    if (jinja_has_filter(name)) fault(Fault::kUnsupported, "the '{}' filter is not supported", name);
    fault(Fault::kType, "No filter named '{}'.", name);
  }
  return function(*this, subject, args);
}

bool Interpreter::call_test(std::string_view name, const Value& subject, CallArgs args) {
  const TestFunction function = find_test(name);
  if (function == nullptr) {
    if (jinja_has_test(name)) fault(Fault::kUnsupported, "the '{}' test is not supported", name);
    fault(Fault::kType, "No test named '{}'.", name);
  }
  return function(*this, subject, args);
}

// ---- macros (jinja2.runtime.Macro.__call__) ----

Value Interpreter::invoke_macro(const MacroDefinition& macro, CallArgs args) {
  if (++call_depth_ > limits_.max_call_depth) {
    --call_depth_;
    fault(Fault::kLimit, "macro calls nest deeper than {} levels", limits_.max_call_depth);
  }
  struct Leave {
    int& depth;
    ~Leave() { --depth; }
  } leave{call_depth_};
  const std::vector<Parameter>& params = *macro.params;
  auto scope = std::make_shared<Scope>(macro.closure);
  std::vector<std::optional<Value>> bound(params.size());
  bool explicit_caller = false;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i].name == "caller") explicit_caller = true;
    if (i < args.positional.size()) {
      bound[i] = args.positional[i];
      continue;
    }
    for (auto it = args.keywords.begin(); it != args.keywords.end(); ++it) {
      if (it->first == params[i].name) {
        bound[i] = std::move(it->second);
        args.keywords.erase(it);
        break;
      }
    }
  }
  if (macro.uses.caller && !explicit_caller) {
    Value caller = Value::undefined("No caller defined");
    for (auto it = args.keywords.begin(); it != args.keywords.end(); ++it) {
      if (it->first == "caller") {
        caller = std::move(it->second);
        args.keywords.erase(it);
        break;
      }
    }
    scope->set("caller", caller);
  }
  if (macro.uses.kwargs) {
    DictData kwargs;
    for (auto& [name, value] : args.keywords) kwargs.set(Value::string(name), std::move(value));
    scope->set("kwargs", Value::mapping(std::move(kwargs)));
  } else if (!args.keywords.empty()) {
    if (args.keywords.front().first == "caller") {
      fault(Fault::kType, "macro '{}' was invoked with two values for the special caller argument. This is most likely a bug.", macro.name);
    }
    fault(Fault::kType, "macro '{}' takes no keyword argument '{}'", macro.name, args.keywords.front().first);
  }
  if (macro.uses.varargs) {
    std::vector<Value> rest;
    for (std::size_t i = params.size(); i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
    scope->set("varargs", Value::tuple(std::move(rest)));
  } else if (args.positional.size() > params.size()) {
    fault(Fault::kType, "macro '{}' takes not more than {} argument(s)", macro.name, params.size());
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (bound[i]) {
      scope->set(params[i].name, *bound[i]);
    } else if (params[i].default_value) {
      scope->set(params[i].name, eval(*params[i].default_value, scope));
    } else {
      scope->set(params[i].name, Value::undefined(fmt::format("parameter '{}' was not provided", params[i].name)));
    }
  }
  return make_string(capture(*macro.body, scope));
}

}  // namespace sitsrt::chat
