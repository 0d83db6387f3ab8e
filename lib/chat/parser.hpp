// Parses tokens into a TemplateAst with jinja2's grammar and operator precedence
// (jinja2/parser.py), then resolves every filter and test name against the builtins.
//
// Rejected at parse time: syntax errors (ParseError kInvalidArgument), constructs jinja2 has
// but this implementation does not (kUnsupported: template inheritance, include/import, with,
// autoescape, *args/**kwargs in calls, jinja2 filters and tests not implemented here), and
// filters or tests jinja2 does not have. Like jinja2, an unknown filter or test inside an
// {% if %} or an inline if-expression is only an error when it is evaluated.
#pragma once

#include "chat/ast.hpp"
#include "chat/lexer.hpp"

#include <string_view>

namespace sitsrt::chat {

// Deepest nesting of statements and expressions a template may have (the parser and the
// interpreter recurse on it).
inline constexpr int kMaxSyntaxNesting = 128;

// `source` is the normalized template text (normalize_template_source). Throws ParseError.
[[nodiscard]] TemplateAst parse_template(std::string_view source);

// Sets every FilterExpr/TestExpr function (parse_template does this). Throws ParseError
// kUnsupported for a name that may not stay unresolved there.
void resolve_names(TemplateAst& ast);

}  // namespace sitsrt::chat
