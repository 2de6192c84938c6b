#include "serve/chat_template/call_args.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tg::chat_template {

absl::StatusOr<std::vector<Value>> BindArgs(const CallArgs& args,
                                            std::initializer_list<absl::string_view> params,
                                            absl::string_view callee) {
  std::vector<Value> out(params.size());
  if (args.positional.size() > params.size()) {
    return absl::InvalidArgumentError(absl::StrCat(callee, "() takes at most ", params.size(),
                                                   " arguments (", args.positional.size(),
                                                   " given)"));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (const auto& [name, value] : args.keyword) {
    size_t i = 0;
    for (absl::string_view p : params) {
      if (p == name) break;
      ++i;
    }
    if (i == params.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(callee, "() got an unexpected keyword argument '", name, "'"));
    }
    out[i] = value;
  }
  return out;
}

}  // namespace tg::chat_template
