// The Python methods that templates call on values: str (startswith, strip, split, format,
// ...) and dict (items, keys, values, get). Methods that mutate (list.append, dict.update)
// are refused, as transformers' immutable sandbox refuses them.
// Thread-safety: pure functions; a bound method shares its receiver like any Value copy.
#ifndef TENSORGRID_SERVE_CHAT_TEMPLATE_METHODS_H_
#define TENSORGRID_SERVE_CHAT_TEMPLATE_METHODS_H_

#include <optional>

#include "absl/strings/string_view.h"
#include "serve/chat_template/value.h"

namespace tg::chat_template {

// Whether `name` is a method of some type (checked at parse time for obj.name(...)).
bool IsKnownMethod(absl::string_view name);

// obj.name as a callable bound to obj, or nullopt when obj's type has no such method.
std::optional<Value> BindMethod(const Value& obj, absl::string_view name);

}  // namespace tg::chat_template

#endif  // TENSORGRID_SERVE_CHAT_TEMPLATE_METHODS_H_
