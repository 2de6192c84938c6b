// Parser: turns the lexer's segments into the syntax tree, with jinja2's grammar and operator
// precedence. Everything the renderer cannot do is refused here rather than rendered wrong:
// an unknown statement, filter, test, method or function is INVALID_ARGUMENT naming it and
// its line, as is malformed syntax and an unclosed block. Thread-safety: a pure function.
#ifndef TENSORGRID_SERVE_CHAT_TEMPLATE_PARSER_H_
#define TENSORGRID_SERVE_CHAT_TEMPLATE_PARSER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "serve/chat_template/ast.h"

namespace tg::chat_template {

// Parses a whole template source.
absl::StatusOr<Body> ParseTemplate(absl::string_view source);

}  // namespace tg::chat_template

#endif  // TENSORGRID_SERVE_CHAT_TEMPLATE_PARSER_H_
