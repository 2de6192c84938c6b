// jinja2's tests, the right-hand side of `value is name(args)`: defined, none, string,
// mapping, iterable, equalto, ... with jinja2 3.1's definitions (a bool is a number but not
// an integer; undefined is iterable). Thread-safety: pure functions.
#ifndef TENSORGRID_SERVE_CHAT_TEMPLATE_PREDICATES_H_
#define TENSORGRID_SERVE_CHAT_TEMPLATE_PREDICATES_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "serve/chat_template/value.h"

namespace tg::chat_template {

// Whether `name` is a test this engine has.
bool IsKnownTest(absl::string_view name);

// `value is name(args...)`. INVALID_ARGUMENT (no line) for a wrong argument count or type.
absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& value,
                               const std::vector<Value>& args);

}  // namespace tg::chat_template

#endif  // TENSORGRID_SERVE_CHAT_TEMPLATE_PREDICATES_H_
