// ChatTemplate: a model's Jinja2 chat template (GGUF tokenizer.chat_template, or a built-in
// one by name), rendered byte for byte as Hugging Face transformers' apply_chat_template does:
// jinja2 with trim_blocks, lstrip_blocks and loop controls, transformers' tojson,
// raise_exception and strftime_now, undefined values printing as "". The context carries
// messages, add_generation_prompt, bos_token, eos_token, tools and any extra keys.
// Thread-safety: a parsed template is immutable; Render may be called from many threads.
#ifndef TENSORGRID_SERVE_CHAT_TEMPLATE_CHAT_TEMPLATE_H_
#define TENSORGRID_SERVE_CHAT_TEMPLATE_CHAT_TEMPLATE_H_

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "serve/chat_template/ast.h"

namespace tg::chat_template {

// Options of one render.
struct RenderOptions {
  // What strftime_now() formats, as local time; unset means the current time.
  std::optional<std::tm> now;
};

class ChatTemplate {
 public:
  // Parses once. INVALID_ARGUMENT naming the construct and its line for anything malformed
  // or unsupported (an unknown filter, test, method, function or statement).
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Parse(absl::string_view source);

  // Renders with the keys of `context` (a JSON object) as variables. INVALID_ARGUMENT with the
  // template's message for raise_exception(), naming the line for runtime type errors.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context,
                                     const RenderOptions& options = {}) const;

  // The Jinja source of a built-in template (--chat-template NAME); NOT_FOUND listing the
  // names otherwise.
  static absl::StatusOr<std::string> BuiltinSource(absl::string_view name);
  // The names BuiltinSource knows.
  static std::vector<std::string> BuiltinNames();

 private:
  explicit ChatTemplate(Body body) : body_(std::move(body)) {}
  const Body body_;
};

}  // namespace tg::chat_template

#endif  // TENSORGRID_SERVE_CHAT_TEMPLATE_CHAT_TEMPLATE_H_
