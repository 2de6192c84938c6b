// The operators of the template language with Python's semantics: arithmetic (int stays int,
// / is true division, // and % floor), ~ concatenation, comparisons, `in`, and jinja2's
// attribute and item access (a missing key or attribute is undefined, not an error; anything
// done to an undefined value other than printing, testing or iterating it is an error).
// Errors carry no line: the evaluator adds it. Thread-safety: pure functions.
#ifndef TENSORGRID_SERVE_CHAT_TEMPLATE_OPERATORS_H_
#define TENSORGRID_SERVE_CHAT_TEMPLATE_OPERATORS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "serve/chat_template/value.h"

namespace tg::chat_template {

// a op b for op in + - * / // % ** ~.
absl::StatusOr<Value> BinaryOp(absl::string_view op, const Value& a, const Value& b);

// -a or +a.
absl::StatusOr<Value> UnaryOp(absl::string_view op, const Value& a);

// a op b for op in == != < <= > >= "in" "not in".
absl::StatusOr<bool> CompareOp(absl::string_view op, const Value& a, const Value& b);

// Python's ordering of two values (numbers, strings, lists): negative, zero or positive.
absl::StatusOr<int> Order(const Value& a, const Value& b);

// obj.name: a method of strings and dicts, else the dict's key, else undefined.
absl::StatusOr<Value> GetAttr(const Value& obj, absl::string_view name);

// obj[key]: a list or string index (negative from the end), a dict key, else undefined.
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);

// obj[start:stop:step] of a list or string; undefined or none parts are absent.
absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop,
                            const Value& step);

// What `for x in value` visits: list items, dict keys, string characters; nothing for
// undefined.
absl::StatusOr<std::vector<Value>> Iterate(const Value& value);

// The error of using an undefined value.
absl::Status UndefinedError(const Value& undefined);

}  // namespace tg::chat_template

#endif  // TENSORGRID_SERVE_CHAT_TEMPLATE_OPERATORS_H_
