#include "serve/chat_template/globals.h"

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "serve/chat_template/call_args.h"

namespace tg::chat_template {
namespace {

constexpr absl::string_view kRaisedPayload = "tensorgrid/chat_template/raise_exception";
// Python refuses ranges this long in the sandbox (MAX_RANGE); so do we.
constexpr int64_t kMaxRange = 100000;

absl::Status Fail(const CallArgs& args, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("line ", args.line, ": ", what));
}

absl::StatusOr<Value> Range(const CallArgs& args) {
  if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3) {
    return Fail(args, "range() takes 1 to 3 positional arguments");
  }
  int64_t v[3] = {0, 0, 1};
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (!args.positional[i].is_int() && !args.positional[i].is_bool()) {
      return Fail(args, "range() arguments must be integers");
    }
  }
  if (args.positional.size() == 1) {
    v[1] = args.positional[0].AsInt();
  } else {
    for (size_t i = 0; i < args.positional.size(); ++i) v[i] = args.positional[i].AsInt();
  }
  if (v[2] == 0) return Fail(args, "range() step must not be zero");
  std::vector<Value> out;
  for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange) return Fail(args, "range() too big");
    out.push_back(Value::Int(i));
  }
  return Value::Array(std::move(out));
}

// namespace(...) and dict(...): an optional mapping, then keyword arguments.
absl::StatusOr<Value> MakeObject(const CallArgs& args, bool is_namespace) {
  auto data = std::make_shared<ObjectData>();
  data->is_namespace = is_namespace;
  if (args.positional.size() > 1) return Fail(args, "expected at most 1 positional argument");
  if (!args.positional.empty()) {
    if (!args.positional[0].is_object()) return Fail(args, "expected a mapping");
    data->entries = args.positional[0].object().entries;
  }
  for (const auto& [k, v] : args.keyword) data->Set(k, v);
  return Value::Object(std::move(data));
}

absl::StatusOr<Value> RaiseException(const CallArgs& args) {
  TG_ASSIGN_OR_RETURN(auto p, BindArgs(args, {"message"}, "raise_exception"));
  absl::Status status = absl::InvalidArgumentError(p[0].Str());
  status.SetPayload(kRaisedPayload, absl::Cord("1"));
  return status;
}

}  // namespace

bool IsKnownGlobal(absl::string_view name) {
  return name == "range" || name == "namespace" || name == "dict" || name == "raise_exception" ||
         name == "strftime_now";
}

std::vector<std::pair<std::string, Value>> MakeGlobals(const std::tm& now) {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back("range", Value::Callable(Range));
  g.emplace_back("namespace",
                 Value::Callable([](const CallArgs& a) { return MakeObject(a, true); }));
  g.emplace_back("dict", Value::Callable([](const CallArgs& a) { return MakeObject(a, false); }));
  g.emplace_back("raise_exception", Value::Callable(RaiseException));
  g.emplace_back("strftime_now",
                 Value::Callable([now](const CallArgs& args) -> absl::StatusOr<Value> {
                   TG_ASSIGN_OR_RETURN(auto p, BindArgs(args, {"format"}, "strftime_now"));
                   if (!p[0].is_string()) return Fail(args, "strftime_now() needs a format string");
                   char buf[256];
                   size_t n = std::strftime(buf, sizeof(buf), p[0].string().c_str(), &now);
                   return Value::String(std::string(buf, n));
                 }));
  return g;
}

bool IsRaisedByTemplate(const absl::Status& status) {
  return status.GetPayload(kRaisedPayload).has_value();
}

}  // namespace tg::chat_template
