// Binding of call arguments to named parameters, as Python binds a call to a function's
// signature: positional first, then keywords by name. Used by filters, tests, methods and
// global functions. Thread-safety: pure functions.
#ifndef TENSORGRID_SERVE_CHAT_TEMPLATE_CALL_ARGS_H_
#define TENSORGRID_SERVE_CHAT_TEMPLATE_CALL_ARGS_H_

#include <initializer_list>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "serve/chat_template/value.h"

namespace tg::chat_template {

// The arguments in the order of `params`; undefined where not passed. INVALID_ARGUMENT naming
// `callee` for too many positional arguments or an unknown keyword.
absl::StatusOr<std::vector<Value>> BindArgs(const CallArgs& args,
                                            std::initializer_list<absl::string_view> params,
                                            absl::string_view callee);

}  // namespace tg::chat_template

#endif  // TENSORGRID_SERVE_CHAT_TEMPLATE_CALL_ARGS_H_
