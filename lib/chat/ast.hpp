// The syntax tree of a parsed template, after jinja2/nodes.py. Nodes are immutable once parsed
// and shared by concurrent renders. Each node records where it starts, for error messages.
#pragma once

#include "chat/source.hpp"
#include "chat/value.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sitsrt::chat {

class Interpreter;
using FilterFunction = Value (*)(Interpreter& interpreter, const Value& subject, CallArgs& args);
using TestFunction = bool (*)(Interpreter& interpreter, const Value& subject, CallArgs& args);

enum class ExprKind {
  kConst,
  kName,
  kNsRef,  // ns.attr as an assignment target
  kGetAttr,
  kGetItem,
  kSlice,
  kCall,
  kFilter,
  kTest,
  kBinary,
  kUnary,
  kNot,
  kAnd,
  kOr,
  kCompare,
  kConcat,
  kCondExpr,
  kList,
  kTuple,
  kDict,
};

struct Expr {
  Expr(ExprKind kind_, SourcePos pos_) : kind(kind_), pos(pos_) {}
  virtual ~Expr() = default;
  ExprKind kind;
  SourcePos pos;
};
using ExprPtr = std::unique_ptr<Expr>;

struct ConstExpr final : Expr {
  ConstExpr(SourcePos p, Value v) : Expr(ExprKind::kConst, p), value(std::move(v)) {}
  Value value;
};

struct NameExpr final : Expr {
  NameExpr(SourcePos p, std::string n) : Expr(ExprKind::kName, p), name(std::move(n)) {}
  std::string name;
};

struct NsRefExpr final : Expr {
  NsRefExpr(SourcePos p, std::string n, std::string a) : Expr(ExprKind::kNsRef, p), name(std::move(n)), attr(std::move(a)) {}
  std::string name;
  std::string attr;
};

struct GetAttrExpr final : Expr {
  GetAttrExpr(SourcePos p, ExprPtr o, std::string a) : Expr(ExprKind::kGetAttr, p), object(std::move(o)), attr(std::move(a)) {}
  ExprPtr object;
  std::string attr;
};

struct GetItemExpr final : Expr {
  GetItemExpr(SourcePos p, ExprPtr o, ExprPtr k) : Expr(ExprKind::kGetItem, p), object(std::move(o)), key(std::move(k)) {}
  ExprPtr object;
  ExprPtr key;
};

struct SliceExpr final : Expr {
  explicit SliceExpr(SourcePos p) : Expr(ExprKind::kSlice, p) {}
  ExprPtr start;  // each may be null
  ExprPtr stop;
  ExprPtr step;
};

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
};

struct CallExpr final : Expr {
  CallExpr(SourcePos p, ExprPtr c) : Expr(ExprKind::kCall, p), callee(std::move(c)) {}
  ExprPtr callee;
  Arguments args;
};

struct FilterExpr final : Expr {
  FilterExpr(SourcePos p, ExprPtr s, std::string n) : Expr(ExprKind::kFilter, p), subject(std::move(s)), name(std::move(n)) {}
  ExprPtr subject;  // null in a {% filter %} block or {% set x | f %}: the block's text
  std::string name;
  Arguments args;
  FilterFunction function = nullptr;  // null: jinja2 has no such filter (raises when reached)
};

struct TestExpr final : Expr {
  TestExpr(SourcePos p, ExprPtr s, std::string n) : Expr(ExprKind::kTest, p), subject(std::move(s)), name(std::move(n)) {}
  ExprPtr subject;
  std::string name;
  Arguments args;
  TestFunction function = nullptr;  // null: jinja2 has no such test (raises when reached)
};

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };

struct BinaryExpr final : Expr {
  BinaryExpr(SourcePos p, BinaryOp o, ExprPtr l, ExprPtr r)
      : Expr(ExprKind::kBinary, p), op(o), left(std::move(l)), right(std::move(r)) {}
  BinaryOp op;
  ExprPtr left;
  ExprPtr right;
};

struct UnaryExpr final : Expr {
  UnaryExpr(SourcePos p, bool neg, ExprPtr o) : Expr(ExprKind::kUnary, p), negate(neg), operand(std::move(o)) {}
  bool negate;  // false: unary plus
  ExprPtr operand;
};

// not, and, or share one node type.
struct LogicalExpr final : Expr {
  LogicalExpr(ExprKind k, SourcePos p, ExprPtr l, ExprPtr r) : Expr(k, p), left(std::move(l)), right(std::move(r)) {}
  ExprPtr left;
  ExprPtr right;  // null for not
};

enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct CompareExpr final : Expr {
  CompareExpr(SourcePos p, ExprPtr f) : Expr(ExprKind::kCompare, p), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;  // a < b < c: two pairs
};

struct ConcatExpr final : Expr {
  explicit ConcatExpr(SourcePos p) : Expr(ExprKind::kConcat, p) {}
  std::vector<ExprPtr> parts;
};

struct CondExpr final : Expr {
  CondExpr(SourcePos p, ExprPtr t, ExprPtr y, ExprPtr n)
      : Expr(ExprKind::kCondExpr, p), test(std::move(t)), then(std::move(y)), otherwise(std::move(n)) {}
  ExprPtr test;
  ExprPtr then;
  ExprPtr otherwise;  // null: Undefined when the test is false
};

// List and tuple literals (and tuple assignment targets).
struct SequenceExpr final : Expr {
  SequenceExpr(ExprKind k, SourcePos p) : Expr(k, p) {}
  std::vector<ExprPtr> items;
};

struct DictExpr final : Expr {
  explicit DictExpr(SourcePos p) : Expr(ExprKind::kDict, p) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

enum class StmtKind { kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kFilterBlock, kBreak, kContinue, kGeneration };

struct Stmt {
  Stmt(StmtKind kind_, SourcePos pos_) : kind(kind_), pos(pos_) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  SourcePos pos;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// Template text and {{ expressions }} between two statements.
struct OutputStmt final : Stmt {
  explicit OutputStmt(SourcePos p) : Stmt(StmtKind::kOutput, p) {}
  struct Part {
    std::string text;  // printed as is when expr is null
    ExprPtr expr;
  };
  std::vector<Part> parts;
};

struct IfStmt final : Stmt {
  explicit IfStmt(SourcePos p) : Stmt(StmtKind::kIf, p) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, then each elif
  Body otherwise;
};

struct ForStmt final : Stmt {
  explicit ForStmt(SourcePos p) : Stmt(StmtKind::kFor, p) {}
  ExprPtr target;
  ExprPtr iterable;
  ExprPtr condition;  // for x in y if condition; may be null
  bool recursive = false;
  Body body;
  Body otherwise;
};

struct SetStmt final : Stmt {
  explicit SetStmt(SourcePos p) : Stmt(StmtKind::kSet, p) {}
  ExprPtr target;
  ExprPtr value;
};

// {% set x %}...{% endset %}, optionally {% set x | filter %}.
struct SetBlockStmt final : Stmt {
  explicit SetBlockStmt(SourcePos p) : Stmt(StmtKind::kSetBlock, p) {}
  ExprPtr target;
  ExprPtr filter;  // a FilterExpr chain whose innermost subject is null, or null
  Body body;
};

struct Parameter {
  std::string name;
  ExprPtr default_value;  // may be null
};

// What a macro body reads of jinja2's implicit macro variables.
struct MacroUses {
  bool caller = false;
  bool varargs = false;
  bool kwargs = false;
};

struct MacroStmt final : Stmt {
  explicit MacroStmt(SourcePos p) : Stmt(StmtKind::kMacro, p) {}
  std::string name;
  std::vector<Parameter> params;
  MacroUses uses;
  Body body;
};

// {% call(params) macro(args) %}body{% endcall %}: body becomes the macro's caller().
struct CallBlockStmt final : Stmt {
  explicit CallBlockStmt(SourcePos p) : Stmt(StmtKind::kCallBlock, p) {}
  std::vector<Parameter> params;
  MacroUses uses;
  ExprPtr call;  // a CallExpr
  Body body;
};

struct FilterBlockStmt final : Stmt {
  explicit FilterBlockStmt(SourcePos p) : Stmt(StmtKind::kFilterBlock, p) {}
  ExprPtr filter;  // FilterExpr chain, innermost subject null
  Body body;
};

struct LoopControlStmt final : Stmt {
  LoopControlStmt(StmtKind k, SourcePos p) : Stmt(k, p) {}
};

// transformers' {% generation %}: renders its body (the assistant-mask tracking is not needed
// to produce the text).
struct GenerationStmt final : Stmt {
  explicit GenerationStmt(SourcePos p) : Stmt(StmtKind::kGeneration, p) {}
  Body body;
};

struct TemplateAst {
  Body body;
};

}  // namespace sitsrt::chat
