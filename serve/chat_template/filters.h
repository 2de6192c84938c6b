// jinja2's filters, `value | name(args)`, as jinja2 3.1 defines them, except tojson, which is
// transformers' (json.dumps with ensure_ascii=False and no HTML escaping), and escape, which
// HTML-escapes as markupsafe does. Thread-safety: pure functions.
#ifndef TENSORGRID_SERVE_CHAT_TEMPLATE_FILTERS_H_
#define TENSORGRID_SERVE_CHAT_TEMPLATE_FILTERS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "serve/chat_template/value.h"

namespace tg::chat_template {

// Whether `name` is a filter this engine has (checked at parse time).
bool IsKnownFilter(absl::string_view name);

// `value | name(args)`. INVALID_ARGUMENT (no line) for bad arguments or operand types.
absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& value, const CallArgs& args);

}  // namespace tg::chat_template

#endif  // TENSORGRID_SERVE_CHAT_TEMPLATE_FILTERS_H_
