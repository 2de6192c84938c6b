// The global functions a template can call: jinja2's range, namespace and dict, and
// transformers' raise_exception(message) and strftime_now(format).
// Thread-safety: pure functions; the values they make belong to one render.
#ifndef TENSORGRID_SERVE_CHAT_TEMPLATE_GLOBALS_H_
#define TENSORGRID_SERVE_CHAT_TEMPLATE_GLOBALS_H_

#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "serve/chat_template/value.h"

namespace tg::chat_template {

// Whether `name` is one of the global functions (checked at parse time).
bool IsKnownGlobal(absl::string_view name);

// The globals of one render; strftime_now formats `now` (local time).
std::vector<std::pair<std::string, Value>> MakeGlobals(const std::tm& now);

// Whether `status` came from raise_exception: its message is the template's, unprefixed.
bool IsRaisedByTemplate(const absl::Status& status);

}  // namespace tg::chat_template

#endif  // TENSORGRID_SERVE_CHAT_TEMPLATE_GLOBALS_H_
