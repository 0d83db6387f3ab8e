#include "chat/parser.hpp"


#include <fmt/format.h>

#include <array>
#include <initializer_list>

namespace sitsrt::chat {
namespace {

std::string describe(const Token& token) {
  switch (token.type) {
    case TokenType::kName: return token.text;
    case TokenType::kOperator: return token.text;
    case TokenType::kString: return "string";
    case TokenType::kInteger: return "integer";
    case TokenType::kFloat: return "float";
    case TokenType::kData: return "template data / text";
    case TokenType::kBlockBegin: return "begin of statement block";
    case TokenType::kBlockEnd: return "end of statement block";
    case TokenType::kVariableBegin: return "begin of print statement";
    case TokenType::kVariableEnd: return "end of print statement";
    case TokenType::kEof: return "end of template";
  }
  return "token";
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  TemplateAst parse() {
    TemplateAst ast;
    ast.body = subparse({});
    if (current().type != TokenType::kEof) fail(fmt::format("unexpected '{}'", describe(current())));
    return ast;
  }

 private:
  // ---- token stream ----
  const Token& current() const { return tokens_[position_]; }
  const Token& look() const { return tokens_[std::min(position_ + 1, tokens_.size() - 1)]; }
  const Token& advance() {
    const Token& token = tokens_[position_];
    if (position_ + 1 < tokens_.size()) ++position_;
    return token;
  }
  bool is_op(std::string_view op) const { return current().type == TokenType::kOperator && current().text == op; }
  bool is_name(std::string_view name) const { return current().type == TokenType::kName && current().text == name; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }

  [[noreturn]] void fail(std::string message) const { fail_at(std::move(message), current().pos); }
  [[noreturn]] static void fail_at(std::string message, SourcePos pos) {
    throw ParseError{ErrorCode::kInvalidArgument, std::move(message), pos};
  }
  [[noreturn]] static void unsupported(std::string what, SourcePos pos) {
    throw ParseError{ErrorCode::kUnsupported, std::move(what) + " is not supported", pos};
  }

  const Token& expect_op(std::string_view op) {
    if (!is_op(op)) {
      if (current().type == TokenType::kEof) fail(fmt::format("unexpected end of template, expected '{}'", op));
      fail(fmt::format("expected token '{}', got '{}'", op, describe(current())));
    }
    return advance();
  }
  const Token& expect_name() {
    if (current().type != TokenType::kName) fail(fmt::format("expected token 'name', got '{}'", describe(current())));
    return advance();
  }
  void expect_name(std::string_view name) {
    if (!is_name(name)) fail(fmt::format("expected token '{}', got '{}'", name, describe(current())));
    advance();
  }
  void expect_type(TokenType type) {
    if (current().type != type) {
      if (current().type == TokenType::kEof) fail("unexpected end of template");
      Token wanted;
      wanted.type = type;
      fail(fmt::format("expected token '{}', got '{}'", describe(wanted), describe(current())));
    }
    advance();
  }

  // Guards the recursion of the parser (and so of the interpreter) on hostile nesting.
  class DepthGuard {
   public:
    explicit DepthGuard(Parser& parser) : parser_(parser) {
      if (++parser_.depth_ > kMaxSyntaxNesting) {
        throw ParseError{ErrorCode::kInvalidArgument,
                         fmt::format("the template nests deeper than {} levels", kMaxSyntaxNesting),
                         parser_.current().pos};
      }
    }
    ~DepthGuard() { --parser_.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    Parser& parser_;
  };

  // ---- statements ----
  // Parses until a block tag whose name is in `end_tags` (left as the current token).
  Body subparse(std::initializer_list<std::string_view> end_tags) {
    DepthGuard guard(*this);
    Body body;
    OutputStmt* output = nullptr;
    const auto output_node = [&]() -> OutputStmt& {
      if (output == nullptr) {
        auto node = std::make_unique<OutputStmt>(current().pos);
        output = node.get();
        body.push_back(std::move(node));
      }
      return *output;
    };
    while (current().type != TokenType::kEof) {
      const Token& token = current();
      if (token.type == TokenType::kData) {
        output_node().parts.push_back({token.text, nullptr});
        advance();
      } else if (token.type == TokenType::kVariableBegin) {
        advance();
        ExprPtr expr = parse_tuple(/*simplified=*/false, /*with_condexpr=*/true, {}, /*explicit_parentheses=*/false);
        output_node().parts.push_back({"", std::move(expr)});
        expect_type(TokenType::kVariableEnd);
      } else if (token.type == TokenType::kBlockBegin) {
        output = nullptr;
        advance();
        for (const std::string_view tag : end_tags) {
          if (is_name(tag)) return body;
        }
        body.push_back(parse_statement());
        expect_type(TokenType::kBlockEnd);
      } else {
        fail(fmt::format("unexpected '{}'", describe(token)));
      }
    }
    if (end_tags.size() != 0) {
      std::string wanted;
      for (const std::string_view tag : end_tags) wanted += (wanted.empty() ? "'" : " or '") + std::string(tag) + "'";
      fail(fmt::format("unexpected end of template; jinja was looking for {}", wanted));
    }
    return body;
  }

  // The body of a statement: an optional ':' then the block end, then statements up to an end tag.
  Body parse_statements(std::initializer_list<std::string_view> end_tags, bool drop_needle) {
    skip_op(":");
    expect_type(TokenType::kBlockEnd);
    Body body = subparse(end_tags);
    if (current().type == TokenType::kEof) fail("unexpected end of template");
    if (drop_needle) advance();
    return body;
  }

  StmtPtr parse_statement() {
    DepthGuard guard(*this);
    const Token& token = current();
    if (token.type != TokenType::kName) fail("tag name expected");
    const std::string& tag = token.text;
    if (tag == "if") return parse_if();
    if (tag == "for") return parse_for();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "call") return parse_call_block();
    if (tag == "filter") return parse_filter_block();
    if (tag == "print") return parse_print();
    if (tag == "break" || tag == "continue") {
      const SourcePos pos = advance().pos;
      if (loop_depth_ == 0) fail_at(fmt::format("'{}' outside loop", tag), pos);
      return std::make_unique<LoopControlStmt>(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, pos);
    }
    if (tag == "generation") {
      auto node = std::make_unique<GenerationStmt>(advance().pos);
      const int saved_loop_depth = std::exchange(loop_depth_, 0);
      node->body = parse_statements({"endgeneration"}, true);
      loop_depth_ = saved_loop_depth;
      return node;
    }
    static constexpr std::array<std::string_view, 8> kUnsupportedTags = {
        "block", "extends", "include", "import", "from", "with", "autoescape", "trans"};
    for (const std::string_view name : kUnsupportedTags) {
      if (tag == name) unsupported(fmt::format("the '{{% {} %}}' statement", tag), token.pos);
    }
    fail(fmt::format("Encountered unknown tag '{}'", tag));
  }

  StmtPtr parse_if() {
    auto node = std::make_unique<IfStmt>(advance().pos);
    while (true) {
      ExprPtr test = parse_tuple(false, /*with_condexpr=*/false, {}, false);
      Body body = parse_statements({"elif", "else", "endif"}, false);
      node->branches.emplace_back(std::move(test), std::move(body));
      const Token& token = advance();
      if (token.text == "elif") continue;
      if (token.text == "else") node->otherwise = parse_statements({"endif"}, true);
      break;
    }
    return node;
  }

  StmtPtr parse_for() {
    auto node = std::make_unique<ForStmt>(advance().pos);
    node->target = parse_assign_target(/*with_tuple=*/true, /*name_only=*/false, {"in"}, /*with_namespace=*/false);
    expect_name("in");
    node->iterable = parse_tuple(false, /*with_condexpr=*/false, {"recursive"}, false);
    if (skip_name("if")) node->condition = parse_expression(true);
    node->recursive = skip_name("recursive");
    ++loop_depth_;
    node->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (advance().text == "else") node->otherwise = parse_statements({"endfor"}, true);
    return node;
  }

  StmtPtr parse_set() {
    const SourcePos pos = advance().pos;
    ExprPtr target = parse_assign_target(true, false, {}, /*with_namespace=*/true);
    if (skip_op("=")) {
      auto node = std::make_unique<SetStmt>(pos);
      node->target = std::move(target);
      node->value = parse_tuple(false, true, {}, false);
      return node;
    }
    auto node = std::make_unique<SetBlockStmt>(pos);
    node->target = std::move(target);
    node->filter = parse_filter(nullptr, false);
    const int saved_loop_depth = std::exchange(loop_depth_, 0);
    node->body = parse_statements({"endset"}, true);
    loop_depth_ = saved_loop_depth;
    return node;
  }

  std::vector<Parameter> parse_signature() {
    std::vector<Parameter> params;
    expect_op("(");
    bool has_default = false;
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      Parameter param;
      param.name = expect_name().text;
      if (skip_op("=")) {
        param.default_value = parse_expression(true);
        has_default = true;
      } else if (has_default) {
        fail("non-default argument follows default argument");
      }
      params.push_back(std::move(param));
    }
    expect_op(")");
    return params;
  }

  StmtPtr parse_macro() {
    auto node = std::make_unique<MacroStmt>(advance().pos);
    node->name = expect_name().text;
    node->params = parse_signature();
    const int saved_loop_depth = std::exchange(loop_depth_, 0);
    MacroUses* saved_uses = std::exchange(macro_uses_, &node->uses);
    node->body = parse_statements({"endmacro"}, true);
    macro_uses_ = saved_uses;
    loop_depth_ = saved_loop_depth;
    return node;
  }

  StmtPtr parse_call_block() {
    auto node = std::make_unique<CallBlockStmt>(advance().pos);
    if (is_op("(")) node->params = parse_signature();
    node->call = parse_expression(true);
    if (node->call->kind != ExprKind::kCall) fail_at("expected call", node->pos);
    const int saved_loop_depth = std::exchange(loop_depth_, 0);
    MacroUses* saved_uses = std::exchange(macro_uses_, &node->uses);
    node->body = parse_statements({"endcall"}, true);
    macro_uses_ = saved_uses;
    loop_depth_ = saved_loop_depth;
    return node;
  }

  StmtPtr parse_filter_block() {
    auto node = std::make_unique<FilterBlockStmt>(advance().pos);
    node->filter = parse_filter(nullptr, /*start_inline=*/true);
    const int saved_loop_depth = std::exchange(loop_depth_, 0);
    node->body = parse_statements({"endfilter"}, true);
    loop_depth_ = saved_loop_depth;
    return node;
  }

  StmtPtr parse_print() {
    auto node = std::make_unique<OutputStmt>(advance().pos);
    while (current().type != TokenType::kBlockEnd) {
      if (!node->parts.empty()) expect_op(",");
      node->parts.push_back({"", parse_expression(true)});
    }
    return node;
  }

  // ---- assignment targets ----
  static bool can_assign(const Expr& target) {
    if (target.kind == ExprKind::kName || target.kind == ExprKind::kNsRef) return true;
    if (target.kind == ExprKind::kTuple) {
      for (const ExprPtr& item : static_cast<const SequenceExpr&>(target).items) {
        if (!can_assign(*item)) return false;
      }
      return true;
    }
    return false;
  }

  ExprPtr parse_assign_target(bool with_tuple, bool name_only, std::initializer_list<std::string_view> extra_end,
                              bool with_namespace) {
    ExprPtr target;
    if (name_only) {
      const Token& token = expect_name();
      target = std::make_unique<NameExpr>(token.pos, token.text);
    } else if (with_tuple) {
      target = parse_tuple(/*simplified=*/true, true, extra_end, false, with_namespace);
    } else {
      target = parse_primary(with_namespace);
    }
    if (!can_assign(*target)) fail_at("can't assign to this expression", target->pos);
    return target;
  }

  // ---- expressions ----
  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    SourcePos pos = current().pos;
    ExprPtr expr1 = parse_or();
    while (skip_name("if")) {
      ExprPtr expr2 = parse_or();
      ExprPtr expr3 = skip_name("else") ? parse_condexpr() : nullptr;
      expr1 = std::make_unique<CondExpr>(pos, std::move(expr2), std::move(expr1), std::move(expr3));
      pos = current().pos;
    }
    return expr1;
  }

  ExprPtr parse_or() {
    SourcePos pos = current().pos;
    ExprPtr left = parse_and();
    while (skip_name("or")) {
      left = std::make_unique<LogicalExpr>(ExprKind::kOr, pos, std::move(left), parse_and());
      pos = current().pos;
    }
    return left;
  }

  ExprPtr parse_and() {
    SourcePos pos = current().pos;
    ExprPtr left = parse_not();
    while (skip_name("and")) {
      left = std::make_unique<LogicalExpr>(ExprKind::kAnd, pos, std::move(left), parse_not());
      pos = current().pos;
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const SourcePos pos = advance().pos;
      return std::make_unique<LogicalExpr>(ExprKind::kNot, pos, parse_not(), nullptr);
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const SourcePos pos = current().pos;
    ExprPtr expr = parse_math1();
    std::unique_ptr<CompareExpr> compare;
    while (true) {
      std::optional<CompareOp> op;
      if (current().type == TokenType::kOperator) {
        const std::string& t = current().text;
        if (t == "==") op = CompareOp::kEq;
        if (t == "!=") op = CompareOp::kNe;
        if (t == "<") op = CompareOp::kLt;
        if (t == "<=") op = CompareOp::kLe;
        if (t == ">") op = CompareOp::kGt;
        if (t == ">=") op = CompareOp::kGe;
        if (op) advance();
      } else if (is_name("in")) {
        advance();
        op = CompareOp::kIn;
      } else if (is_name("not") && look().type == TokenType::kName && look().text == "in") {
        advance();
        advance();
        op = CompareOp::kNotIn;
      }
      if (!op) break;
      if (!compare) compare = std::make_unique<CompareExpr>(pos, std::move(expr));
      compare->rest.emplace_back(*op, parse_math1());
    }
    if (compare) return compare;
    return expr;
  }

  ExprPtr parse_math1() {
    SourcePos pos = current().pos;
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const BinaryOp op = advance().text == "+" ? BinaryOp::kAdd : BinaryOp::kSub;
      left = std::make_unique<BinaryExpr>(pos, op, std::move(left), parse_concat());
      pos = current().pos;
    }
    return left;
  }

  ExprPtr parse_concat() {
    const SourcePos pos = current().pos;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto concat = std::make_unique<ConcatExpr>(pos);
    concat->parts.push_back(std::move(first));
    while (skip_op("~")) concat->parts.push_back(parse_math2());
    return concat;
  }

  ExprPtr parse_math2() {
    SourcePos pos = current().pos;
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string& t = advance().text;
      const BinaryOp op = t == "*"   ? BinaryOp::kMul
                          : t == "/" ? BinaryOp::kDiv
                          : t == "//" ? BinaryOp::kFloorDiv
                                      : BinaryOp::kMod;
      left = std::make_unique<BinaryExpr>(pos, op, std::move(left), parse_pow());
      pos = current().pos;
    }
    return left;
  }

  ExprPtr parse_pow() {
    SourcePos pos = current().pos;
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) {
      left = std::make_unique<BinaryExpr>(pos, BinaryOp::kPow, std::move(left), parse_unary(true));
      pos = current().pos;
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    const SourcePos pos = current().pos;
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const bool negate = advance().text == "-";
      node = std::make_unique<UnaryExpr>(pos, negate, parse_unary(false));
    } else {
      node = parse_primary(false);
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary(bool with_namespace) {
    DepthGuard guard(*this);
    const Token& token = current();
    if (token.type == TokenType::kName) {
      advance();
      if (token.text == "true" || token.text == "True") return std::make_unique<ConstExpr>(token.pos, Value::boolean(true));
      if (token.text == "false" || token.text == "False") {
        return std::make_unique<ConstExpr>(token.pos, Value::boolean(false));
      }
      if (token.text == "none" || token.text == "None") return std::make_unique<ConstExpr>(token.pos, Value::none());
      if (with_namespace && is_op(".")) {
        advance();
        const Token& attr = expect_name();
        return std::make_unique<NsRefExpr>(token.pos, token.text, attr.text);
      }
      note_name(token.text);
      return std::make_unique<NameExpr>(token.pos, token.text);
    }
    if (token.type == TokenType::kString) {
      std::string text = advance().text;
      while (current().type == TokenType::kString) text += advance().text;  // adjacent literals join
      return std::make_unique<ConstExpr>(token.pos, Value::string(std::move(text)));
    }
    if (token.type == TokenType::kInteger) {
      advance();
      return std::make_unique<ConstExpr>(token.pos, Value::integer(token.integer));
    }
    if (token.type == TokenType::kFloat) {
      advance();
      return std::make_unique<ConstExpr>(token.pos, Value::number(token.number));
    }
    if (is_op("(")) {
      advance();
      ExprPtr node = parse_tuple(false, true, {}, /*explicit_parentheses=*/true);
      expect_op(")");
      return node;
    }
    if (is_op("[")) return parse_list();
    if (is_op("{")) return parse_dict();
    if (token.type == TokenType::kEof) fail("unexpected end of template");
    fail(fmt::format("unexpected '{}'", describe(token)));
  }

  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
    if (current().type == TokenType::kVariableEnd || current().type == TokenType::kBlockEnd || is_op(")")) return true;
    for (const std::string_view name : extra_end) {
      if (is_name(name)) return true;
    }
    return false;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                      bool explicit_parentheses, bool with_namespace = false) {
    SourcePos pos = current().pos;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(simplified ? parse_primary(with_namespace) : parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
      pos = current().pos;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args.front());
      if (!explicit_parentheses) fail(fmt::format("Expected an expression, got '{}'", describe(current())));
    }
    auto tuple = std::make_unique<SequenceExpr>(ExprKind::kTuple, pos);
    tuple->items = std::move(args);
    return tuple;
  }

  ExprPtr parse_list() {
    auto node = std::make_unique<SequenceExpr>(ExprKind::kList, expect_op("[").pos);
    while (!is_op("]")) {
      if (!node->items.empty()) expect_op(",");
      if (is_op("]")) break;
      node->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return node;
  }

  ExprPtr parse_dict() {
    auto node = std::make_unique<DictExpr>(expect_op("{").pos);
    while (!is_op("}")) {
      if (!node->items.empty()) expect_op(",");
      if (is_op("}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      node->items.emplace_back(std::move(key), parse_expression(true));
    }
    expect_op("}");
    return node;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    DepthGuard guard(*this);
    const Token& token = advance();
    if (token.text == ".") {
      const Token& attr = current();
      advance();
      if (attr.type == TokenType::kName) return std::make_unique<GetAttrExpr>(token.pos, std::move(node), attr.text);
      if (attr.type != TokenType::kInteger) fail_at("expected name or number", attr.pos);
      return std::make_unique<GetItemExpr>(token.pos, std::move(node),
                                           std::make_unique<ConstExpr>(attr.pos, Value::integer(attr.integer)));
    }
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    ExprPtr key;
    if (args.size() == 1) {
      key = std::move(args.front());
    } else {
      auto tuple = std::make_unique<SequenceExpr>(ExprKind::kTuple, token.pos);
      tuple->items = std::move(args);
      key = std::move(tuple);
    }
    return std::make_unique<GetItemExpr>(token.pos, std::move(node), std::move(key));
  }

  ExprPtr parse_subscribed() {
    const SourcePos pos = current().pos;
    auto slice = std::make_unique<SliceExpr>(pos);
    if (is_op(":")) {
      advance();
    } else {
      ExprPtr node = parse_expression(true);
      if (!is_op(":")) return node;
      advance();
      slice->start = std::move(node);
    }
    if (!is_op(":") && !is_op("]") && !is_op(",")) slice->stop = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) slice->step = parse_expression(true);
    }
    return slice;
  }

  Arguments parse_call_args() {
    const SourcePos pos = expect_op("(").pos;
    Arguments args;
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;  // trailing comma
      }
      if (is_op("*") || is_op("**")) unsupported("*args and **kwargs in a call", current().pos);
      if (current().type == TokenType::kName && look().type == TokenType::kOperator && look().text == "=") {
        std::string key = advance().text;
        advance();
        args.keywords.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!args.keywords.empty()) fail_at("invalid syntax for function call expression", pos);
        args.positional.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
    return args;
  }

  ExprPtr parse_call(ExprPtr node) {
    DepthGuard guard(*this);
    const SourcePos pos = node->pos;  // errors of a call point at what is called
    auto call = std::make_unique<CallExpr>(pos, std::move(node));
    call->args = parse_call_args();
    return call;
  }

  std::string dotted_name() {
    std::string name = expect_name().text;
    while (is_op(".")) {
      advance();
      name += "." + expect_name().text;
    }
    return name;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      DepthGuard guard(*this);
      if (!start_inline) advance();
      const SourcePos pos = current().pos;
      auto filter = std::make_unique<FilterExpr>(pos, std::move(node), dotted_name());
      if (is_op("(")) filter->args = parse_call_args();
      node = std::move(filter);
      start_inline = false;
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    DepthGuard guard(*this);
    const SourcePos pos = advance().pos;
    const bool negated = skip_name("not");
    const SourcePos name_pos = current().pos;
    auto test = std::make_unique<TestExpr>(name_pos, std::move(node), dotted_name());
    const Token& token = current();
    const bool argument_start = token.type == TokenType::kName || token.type == TokenType::kString ||
                                token.type == TokenType::kInteger || token.type == TokenType::kFloat ||
                                is_op("(") || is_op("[") || is_op("{");
    if (is_op("(")) {
      test->args = parse_call_args();
    } else if (argument_start && !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      test->args.positional.push_back(parse_postfix(parse_primary(false)));
    }
    if (negated) return std::make_unique<LogicalExpr>(ExprKind::kNot, pos, std::move(test), nullptr);
    return test;
  }

  // A macro body that reads caller, varargs or kwargs gets them (jinja2 decides this the same
  // way, from the names the body uses).
  void note_name(const std::string& name) {
    if (macro_uses_ == nullptr) return;
    if (name == "caller") macro_uses_->caller = true;
    if (name == "varargs") macro_uses_->varargs = true;
    if (name == "kwargs") macro_uses_->kwargs = true;
  }

  std::vector<Token> tokens_;
  std::size_t position_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  MacroUses* macro_uses_ = nullptr;
};

}  // namespace

TemplateAst parse_template(std::string_view source) {
  TemplateAst ast = Parser(tokenize(source)).parse();
  resolve_names(ast);
  return ast;
}

}  // namespace sitsrt::chat
