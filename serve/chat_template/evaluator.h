// Evaluator: renders a parsed template against a context, with jinja2's scoping (a for loop
// iteration and a macro call are scopes of their own; if is not; namespace() objects carry
// values out of loops), loop variables, macros, call blocks and loop controls.
// Thread-safety: reads the tree only; each call has its own state, so concurrent calls on one
// tree are safe.
#ifndef TENSORGRID_SERVE_CHAT_TEMPLATE_EVALUATOR_H_
#define TENSORGRID_SERVE_CHAT_TEMPLATE_EVALUATOR_H_

#include <ctime>
#include <string>

#include "absl/status/statusor.h"
#include "serve/chat_template/ast.h"
#include "serve/chat_template/value.h"

namespace tg::chat_template {

// Renders `body` with the keys of `context` (an object) as its variables; strftime_now()
// formats `now`. INVALID_ARGUMENT naming the line for runtime errors, and with the template's
// own message for raise_exception().
absl::StatusOr<std::string> Evaluate(const Body& body, const Value& context, const std::tm& now);

}  // namespace tg::chat_template

#endif  // TENSORGRID_SERVE_CHAT_TEMPLATE_EVALUATOR_H_
