#include "serve/chat_template/predicates.h"

#include <cctype>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "serve/chat_template/filters.h"
#include "serve/chat_template/operators.h"

namespace tg::chat_template {
namespace {

constexpr absl::string_view kNoArgTests[] = {
    "defined", "undefined", "none",     "string",  "number", "integer", "float",
    "mapping", "iterable",  "sequence", "boolean", "true",   "false",   "odd",
    "even",    "callable",  "lower",    "upper",   "escaped"};
// Tests with one argument, and the comparison each stands for ("" when special).
constexpr std::pair<absl::string_view, absl::string_view> kOneArgTests[] = {
    {"equalto", "=="}, {"eq", "=="},         {"==", "=="},        {"ne", "!="},   {"!=", "!="},
    {"lt", "<"},       {"lessthan", "<"},    {"<", "<"},          {"le", "<="},   {"<=", "<="},
    {"gt", ">"},       {"greaterthan", ">"}, {">", ">"},          {"ge", ">="},   {">=", ">="},
    {"in", "in"},      {"sameas", ""},       {"divisibleby", ""}, {"filter", ""}, {"test", ""}};

bool AllChars(const Value& v, int (*pred)(int), int (*other)(int)) {
  if (!v.is_string()) return false;
  bool any = false;
  for (unsigned char c : v.string()) {
    if (other(c)) return false;
    any = any || pred(c);
  }
  return any;
}

absl::StatusOr<bool> NoArgTest(absl::string_view name, const Value& v) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "mapping") return v.is_object() && !v.is_namespace();
  if (name == "iterable" || name == "sequence") {
    return v.is_undefined() || v.is_string() || v.is_array() ||
           (v.is_object() && !v.is_namespace());
  }
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.bool_value();
  if (name == "false") return v.is_bool() && !v.bool_value();
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return false;
  if (name == "lower") return AllChars(v, std::islower, std::isupper);
  if (name == "upper") return AllChars(v, std::isupper, std::islower);
  if (v.is_undefined()) return UndefinedError(v);
  if (!v.is_int() && !v.is_bool()) {
    return absl::InvalidArgumentError(absl::StrCat("test '", name, "' needs an integer"));
  }
  bool odd = (v.AsInt() % 2) != 0;
  return name == "odd" ? odd : !odd;
}

}  // namespace

bool IsKnownTest(absl::string_view name) {
  for (absl::string_view n : kNoArgTests) {
    if (n == name) return true;
  }
  for (const auto& [n, op] : kOneArgTests) {
    if (n == name) return true;
  }
  return false;
}

absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& value,
                               const std::vector<Value>& args) {
  for (absl::string_view n : kNoArgTests) {
    if (n != name) continue;
    if (!args.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("test '", name, "' takes no arguments"));
    }
    return NoArgTest(name, value);
  }
  if (args.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("test '", name, "' takes one argument"));
  }
  const Value& arg = args[0];
  for (const auto& [n, op] : kOneArgTests) {
    if (n == name && !op.empty()) return CompareOp(op, value, arg);
  }
  if (name == "sameas") {
    if (value.is_object() || value.is_array() || arg.is_object() || arg.is_array()) {
      return value.kind() == arg.kind() && value.Equals(arg) &&
             (value.is_object() ? &value.object() == &arg.object()
                                : &value.array() == &arg.array());
    }
    return value.kind() == arg.kind() && value.Equals(arg);
  }
  if (name == "divisibleby") {
    if (!value.is_number() || !arg.is_number() || arg.AsDouble() == 0) {
      return absl::InvalidArgumentError("test 'divisibleby' needs non-zero numbers");
    }
    absl::StatusOr<Value> rem = BinaryOp("%", value, arg);
    if (!rem.ok()) return rem.status();
    return rem->AsDouble() == 0;
  }
  if (!arg.is_string()) return false;
  return name == "filter" ? IsKnownFilter(arg.string()) : IsKnownTest(arg.string());
}

}  // namespace tg::chat_template
