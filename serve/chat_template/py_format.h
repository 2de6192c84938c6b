// Python's text formats for values, byte for byte: repr() of floats and strings, and
// json.dumps as transformers' tojson filter calls it (ensure_ascii=False: non-ASCII kept,
// nothing HTML-escaped). Thread-safety: pure functions.
#ifndef TENSORGRID_SERVE_CHAT_TEMPLATE_PY_FORMAT_H_
#define TENSORGRID_SERVE_CHAT_TEMPLATE_PY_FORMAT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "serve/chat_template/value.h"

namespace tg::chat_template {

// repr(float): the shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string PyFloatRepr(double d);

// repr(str): quoted with ' unless the text holds ' and no ", control characters escaped.
std::string PyStringRepr(absl::string_view s);

// Options of json.dumps that tojson exposes.
struct JsonDumpsOptions {
  // Spaces per level; negative means None (one line, separators ", " and ": ").
  int indent = -1;
  // Sort the keys of objects.
  bool sort_keys = false;
  // Escape non-ASCII as \uXXXX (ensure_ascii=True).
  bool ensure_ascii = false;
};

// json.dumps(value): INVALID_ARGUMENT for undefined values and callables, which Python
// cannot serialise.
absl::StatusOr<std::string> PyJsonDumps(const Value& value, const JsonDumpsOptions& options);

}  // namespace tg::chat_template

#endif  // TENSORGRID_SERVE_CHAT_TEMPLATE_PY_FORMAT_H_
