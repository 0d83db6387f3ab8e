// The parser's second pass: filter and test names resolved against the builtins, with jinja2's
// rule for where an unknown name is an error at load and where only when evaluated.
#include "chat/builtins.hpp"
#include "chat/parser.hpp"

#include <fmt/format.h>

namespace sitsrt::chat {
namespace {

// Resolves filter and test names. `soft`: inside an {% if %} or an inline if-expression (and
// not in a loop, macro or block nested there), where jinja2 defers an unknown name's error to
// the moment it is evaluated.
class NameResolver {
 public:
  void body(Body& statements, bool soft) {
    for (StmtPtr& statement : statements) stmt(*statement, soft);
  }

 private:
  void stmt(Stmt& s, bool soft) {
    switch (s.kind) {
      case StmtKind::kOutput:
        for (auto& part : static_cast<OutputStmt&>(s).parts) expr(part.expr, soft);
        return;
      case StmtKind::kIf: {
        auto& node = static_cast<IfStmt&>(s);
        for (auto& [test, branch] : node.branches) {
          expr(test, true);
          body(branch, true);
        }
        body(node.otherwise, true);
        return;
      }
      case StmtKind::kFor: {
        auto& node = static_cast<ForStmt&>(s);
        expr(node.iterable, soft);
        expr(node.condition, false);
        body(node.body, false);
        body(node.otherwise, false);
        return;
      }
      case StmtKind::kSet: expr(static_cast<SetStmt&>(s).value, soft); return;
      case StmtKind::kSetBlock: {
        auto& node = static_cast<SetBlockStmt&>(s);
        expr(node.filter, false);
        body(node.body, false);
        return;
      }
      case StmtKind::kMacro: {
        auto& node = static_cast<MacroStmt&>(s);
        for (Parameter& param : node.params) expr(param.default_value, false);
        body(node.body, false);
        return;
      }
      case StmtKind::kCallBlock: {
        auto& node = static_cast<CallBlockStmt&>(s);
        expr(node.call, soft);
        for (Parameter& param : node.params) expr(param.default_value, false);
        body(node.body, false);
        return;
      }
      case StmtKind::kFilterBlock: {
        auto& node = static_cast<FilterBlockStmt&>(s);
        expr(node.filter, false);
        body(node.body, false);
        return;
      }
      case StmtKind::kGeneration: body(static_cast<GenerationStmt&>(s).body, false); return;
      case StmtKind::kBreak:
      case StmtKind::kContinue: return;
    }
  }

  void args(Arguments& a, bool soft) {
    for (ExprPtr& e : a.positional) expr(e, soft);
    for (auto& [name, e] : a.keywords) expr(e, soft);
  }

  void expr(ExprPtr& e, bool soft) {
    if (!e) return;
    switch (e->kind) {
      case ExprKind::kConst:
      case ExprKind::kName:
      case ExprKind::kNsRef: return;
      case ExprKind::kGetAttr: expr(static_cast<GetAttrExpr&>(*e).object, soft); return;
      case ExprKind::kGetItem: {
        auto& node = static_cast<GetItemExpr&>(*e);
        expr(node.object, soft);
        expr(node.key, soft);
        return;
      }
      case ExprKind::kSlice: {
        auto& node = static_cast<SliceExpr&>(*e);
        expr(node.start, soft);
        expr(node.stop, soft);
        expr(node.step, soft);
        return;
      }
      case ExprKind::kCall: {
        auto& node = static_cast<CallExpr&>(*e);
        expr(node.callee, soft);
        args(node.args, soft);
        return;
      }
      case ExprKind::kFilter: {
        auto& node = static_cast<FilterExpr&>(*e);
        expr(node.subject, soft);
        args(node.args, soft);
        node.function = find_filter(node.name);
        if (node.function == nullptr) {
          if (jinja_has_filter(node.name)) unsupported(fmt::format("the '{}' filter", node.name), node.pos);
          if (!soft) unsupported(fmt::format("the filter '{}' (jinja2 has no such filter)", node.name), node.pos);
        }
        return;
      }
      case ExprKind::kTest: {
        auto& node = static_cast<TestExpr&>(*e);
        expr(node.subject, soft);
        args(node.args, soft);
        node.function = find_test(node.name);
        if (node.function == nullptr) {
          if (jinja_has_test(node.name)) unsupported(fmt::format("the '{}' test", node.name), node.pos);
          if (!soft) unsupported(fmt::format("the test '{}' (jinja2 has no such test)", node.name), node.pos);
        }
        return;
      }
      case ExprKind::kBinary: {
        auto& node = static_cast<BinaryExpr&>(*e);
        expr(node.left, soft);
        expr(node.right, soft);
        return;
      }
      case ExprKind::kUnary: expr(static_cast<UnaryExpr&>(*e).operand, soft); return;
      case ExprKind::kNot:
      case ExprKind::kAnd:
      case ExprKind::kOr: {
        auto& node = static_cast<LogicalExpr&>(*e);
        expr(node.left, soft);
        expr(node.right, soft);
        return;
      }
      case ExprKind::kCompare: {
        auto& node = static_cast<CompareExpr&>(*e);
        expr(node.first, soft);
        for (auto& [op, operand] : node.rest) expr(operand, soft);
        return;
      }
      case ExprKind::kConcat:
        for (ExprPtr& part : static_cast<ConcatExpr&>(*e).parts) expr(part, soft);
        return;
      case ExprKind::kCondExpr: {
        auto& node = static_cast<CondExpr&>(*e);
        expr(node.test, true);
        expr(node.then, true);
        expr(node.otherwise, true);
        return;
      }
      case ExprKind::kList:
      case ExprKind::kTuple:
        for (ExprPtr& item : static_cast<SequenceExpr&>(*e).items) expr(item, soft);
        return;
      case ExprKind::kDict:
        for (auto& [key, value] : static_cast<DictExpr&>(*e).items) {
          expr(key, soft);
          expr(value, soft);
        }
        return;
    }
  }

  [[noreturn]] static void unsupported(std::string what, SourcePos pos) {
    throw ParseError{ErrorCode::kUnsupported, std::move(what) + " is not supported", pos};
  }
};

}  // namespace

void resolve_names(TemplateAst& ast) { NameResolver().body(ast.body, false); }

}  // namespace sitsrt::chat
