// Lexer: splits a template into text, {{ expression }} and {% statement %} segments, and the
// tags into tokens, exactly as jinja2's lexer does with trim_blocks and lstrip_blocks: a
// statement or comment tag eats the newline after it and the indentation before it on its
// line, '-' strips all whitespace on that side, '+' keeps it; comments are dropped,
// {% raw %} bodies become text, one trailing newline of the source is dropped and newlines
// are normalised to '\n'. Thread-safety: a pure function.
#ifndef TENSORGRID_SERVE_CHAT_TEMPLATE_LEXER_H_
#define TENSORGRID_SERVE_CHAT_TEMPLATE_LEXER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tg::chat_template {

struct Token {
  enum class Kind { kName, kString, kInt, kFloat, kOperator };
  Kind kind;
  // The name, the operator, or the string literal's value with its escapes decoded.
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 0;
};

struct Segment {
  enum class Kind { kText, kExpression, kStatement };
  Kind kind;
  std::string text;           // kText only.
  std::vector<Token> tokens;  // the tag's tokens, without its delimiters.
  int line = 0;               // where the segment starts (1-based).
};

// INVALID_ARGUMENT naming the line for an unclosed tag or comment, an unterminated string,
// an unexpected character or unbalanced brackets.
absl::StatusOr<std::vector<Segment>> Lex(absl::string_view source);

}  // namespace tg::chat_template

#endif  // TENSORGRID_SERVE_CHAT_TEMPLATE_LEXER_H_
