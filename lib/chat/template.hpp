// A parsed chat template, ready to render many times (immutable, thread-safe): the entry point
// of the chat layer. Errors are sitsrt::Error naming the template's origin and line:column.
#pragma once

#include "chat/ast.hpp"
#include "chat/interpreter.hpp"
#include "chat/value.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sitsrt::chat {

class Template {
 public:
  // Throws Error kInvalidArgument (syntax error) or kUnsupported (construct not supported),
  // with "origin:line:column: " before the message.
  Template(std::string_view source, std::string origin);

  // Renders with `variables` (a dict with str keys) as the context. Throws Error: kUnsupported
  // where jinja2 would do something not reproduced here, kInvalidArgument for every error
  // jinja2 raises (undefined attribute, type error, sandbox refusal, raise_exception()) and for
  // exceeded limits.
  [[nodiscard]] std::string render(const DictData& variables, const RenderLimits& limits = {},
                                   std::optional<std::int64_t> now_unix_seconds = std::nullopt) const;

  [[nodiscard]] const std::string& origin() const noexcept { return origin_; }

 private:
  std::string origin_;
  TemplateAst ast_;
};

// A JSON document as Python's json.loads gives it to a template (objects keep their key
// order). Throws Error kInvalidArgument naming `what` for malformed JSON, nesting deeper than
// kMaxNesting, or integers beyond 64 bits.
[[nodiscard]] Value value_from_json(std::string_view json_text, std::string_view what);

}  // namespace sitsrt::chat
