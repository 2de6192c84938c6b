// Built-in chat templates for --chat-template NAME, written as Jinja in the style of each
// model family's official template: chatml, llama3, mistral (v7-tekken), gemma, phi3.
// Thread-safety: pure functions over constant data.
#ifndef TENSORGRID_SERVE_CHAT_TEMPLATE_BUILTINS_H_
#define TENSORGRID_SERVE_CHAT_TEMPLATE_BUILTINS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tg::chat_template {

// The source of the built-in template `name`; NOT_FOUND listing the known names.
absl::StatusOr<std::string> BuiltinTemplateSource(absl::string_view name);

// The names of the built-in templates.
std::vector<std::string> BuiltinTemplateNames();

}  // namespace tg::chat_template

#endif  // TENSORGRID_SERVE_CHAT_TEMPLATE_BUILTINS_H_
