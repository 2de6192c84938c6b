#include "serve/chat_template/chat_template.h"

#include <chrono>

#include "absl/status/status.h"
#include "core/status_macros.h"
#include "serve/chat_template/builtins.h"
#include "serve/chat_template/evaluator.h"
#include "serve/chat_template/parser.h"

namespace tg::chat_template {

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Parse(absl::string_view source) {
  TG_ASSIGN_OR_RETURN(Body body, ParseTemplate(source));
  return std::unique_ptr<ChatTemplate>(new ChatTemplate(std::move(body)));
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context,
                                                 const RenderOptions& options) const {
  if (!context.is_object()) return absl::InvalidArgumentError("the context must be a JSON object");
  std::tm now{};
  if (options.now) {
    now = *options.now;
  } else {
    std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    localtime_r(&t, &now);
  }
  return Evaluate(body_, Value::FromJson(context), now);
}

absl::StatusOr<std::string> ChatTemplate::BuiltinSource(absl::string_view name) {
  return BuiltinTemplateSource(name);
}

std::vector<std::string> ChatTemplate::BuiltinNames() { return BuiltinTemplateNames(); }

}  // namespace tg::chat_template
