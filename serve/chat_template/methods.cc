#include "serve/chat_template/methods.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "serve/chat_template/call_args.h"
#include "serve/chat_template/py_string.h"

namespace tg::chat_template {
namespace {

constexpr absl::string_view kStringMethods[] = {
    "startswith", "endswith", "strip",      "lstrip",  "rstrip", "split", "upper",
    "lower",      "title",    "capitalize", "replace", "format", "join",  "find",
    "count",      "isdigit",  "isspace",    "isalpha", "isalnum"};
constexpr absl::string_view kDictMethods[] = {"items", "keys", "values", "get"};

absl::Status Fail(const CallArgs& args, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("line ", args.line, ": ", what));
}

std::optional<std::string> OptString(const Value& v) {
  if (v.is_string()) return v.string();
  return std::nullopt;
}

int64_t OptInt(const Value& v, int64_t dflt) { return v.is_int() ? v.int_value() : dflt; }

// str.format with {} / {0} / {name} fields and no format specs.
absl::StatusOr<Value> Format(const std::string& s, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((s[i] == '{' || s[i] == '}') && i + 1 < s.size() && s[i + 1] == s[i]) {
      out.push_back(s[i++]);
      continue;
    }
    if (s[i] != '{') {
      out.push_back(s[i]);
      continue;
    }
    size_t close = s.find('}', i);
    if (close == std::string::npos) return Fail(args, "format(): unmatched '{'");
    std::string field = s.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos) {
      return Fail(args, absl::StrCat("format(): unsupported field '{", field, "}'"));
    }
    const Value* v = nullptr;
    if (field.empty() || std::isdigit(static_cast<unsigned char>(field[0]))) {
      size_t index = field.empty() ? auto_index++ : std::stoul(field);
      if (index < args.positional.size()) v = &args.positional[index];
    } else {
      for (const auto& [k, kv] : args.keyword) {
        if (k == field) v = &kv;
      }
    }
    if (v == nullptr) return Fail(args, absl::StrCat("format(): no argument for '{", field, "}'"));
    out += v->Str();
    i = close;
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> CallStringMethod(const std::string& s, absl::string_view name,
                                       const CallArgs& args) {
  auto bind = [&](std::initializer_list<absl::string_view> params) {
    return BindArgs(args, params, name);
  };
  if (name == "startswith" || name == "endswith") {
    TG_ASSIGN_OR_RETURN(std::vector<Value> a, bind({"prefix"}));
    std::vector<Value> options = a[0].is_array() ? a[0].items() : std::vector<Value>{a[0]};
    for (const Value& o : options) {
      if (!o.is_string()) return Fail(args, absl::StrCat(name, "() needs a string"));
      const std::string& p = o.string();
      bool hit = p.size() <= s.size() &&
                 (name == "startswith" ? s.compare(0, p.size(), p) == 0
                                       : s.compare(s.size() - p.size(), p.size(), p) == 0);
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    TG_ASSIGN_OR_RETURN(std::vector<Value> a, bind({"chars"}));
    return Value::String(PyStrip(s, OptString(a[0]), name != "rstrip", name != "lstrip"));
  }
  if (name == "split") {
    TG_ASSIGN_OR_RETURN(std::vector<Value> a, bind({"sep", "maxsplit"}));
    if (a[0].is_string() && a[0].string().empty()) return Fail(args, "split(): empty separator");
    std::vector<Value> parts;
    for (std::string& p : PySplit(s, OptString(a[0]), OptInt(a[1], -1))) {
      parts.push_back(Value::String(std::move(p)));
    }
    return Value::Array(std::move(parts));
  }
  if (name == "replace") {
    TG_ASSIGN_OR_RETURN(std::vector<Value> a, bind({"old", "new", "count"}));
    if (!a[0].is_string() || !a[1].is_string()) return Fail(args, "replace() needs strings");
    return Value::String(PyReplace(s, a[0].string(), a[1].string(), OptInt(a[2], -1)));
  }
  if (name == "find" || name == "count") {
    TG_ASSIGN_OR_RETURN(std::vector<Value> a, bind({"sub"}));
    if (!a[0].is_string()) return Fail(args, absl::StrCat(name, "() needs a string"));
    if (name == "find") {
      size_t pos = s.find(a[0].string());
      return Value::Int(pos == std::string::npos ? -1 : PyLength(s.substr(0, pos)));
    }
    if (a[0].string().empty()) return Value::Int(PyLength(s) + 1);
    int64_t n = 0;
    for (size_t p = s.find(a[0].string()); p != std::string::npos;
         p = s.find(a[0].string(), p + a[0].string().size())) {
      ++n;
    }
    return Value::Int(n);
  }
  if (name == "format") return Format(s, args);
  if (name == "join") {
    TG_ASSIGN_OR_RETURN(std::vector<Value> a, bind({"iterable"}));
    if (!a[0].is_array()) return Fail(args, "join() needs a list");
    std::string out;
    for (size_t i = 0; i < a[0].items().size(); ++i) {
      if (!a[0].items()[i].is_string()) return Fail(args, "join() needs a list of strings");
      absl::StrAppend(&out, i > 0 ? s : "", a[0].items()[i].string());
    }
    return Value::String(std::move(out));
  }
  if (!args.positional.empty() || !args.keyword.empty()) {
    return Fail(args, absl::StrCat(name, "() takes no arguments"));
  }
  if (name == "upper") return Value::String(PyUpper(s));
  if (name == "lower") return Value::String(PyLower(s));
  if (name == "title") return Value::String(PyTitle(s));
  if (name == "capitalize") return Value::String(PyCapitalize(s));
  auto all = [&](auto pred) {
    if (s.empty()) return false;
    for (char c : s) {
      if (!pred(static_cast<unsigned char>(c))) return false;
    }
    return true;
  };
  if (name == "isdigit") return Value::Bool(all([](unsigned char c) { return std::isdigit(c); }));
  if (name == "isspace") return Value::Bool(all([](unsigned char c) { return PyIsSpace(c); }));
  if (name == "isalpha") return Value::Bool(all([](unsigned char c) { return std::isalpha(c); }));
  return Value::Bool(all([](unsigned char c) { return std::isalnum(c); }));
}

absl::StatusOr<Value> CallDictMethod(const Value& d, absl::string_view name, const CallArgs& args) {
  if (name == "get") {
    TG_ASSIGN_OR_RETURN(std::vector<Value> a, BindArgs(args, {"key", "default"}, name));
    const Value* v = a[0].is_string() ? d.object().Find(a[0].string()) : nullptr;
    if (v != nullptr) return *v;
    return a[1].is_undefined() ? Value::None() : a[1];
  }
  if (!args.positional.empty() || !args.keyword.empty()) {
    return Fail(args, absl::StrCat(name, "() takes no arguments"));
  }
  std::vector<Value> out;
  for (const auto& [k, v] : d.object().entries) {
    if (name == "items") {
      out.push_back(Value::Array({Value::String(k), v}, /*is_tuple=*/true));
    } else {
      out.push_back(name == "keys" ? Value::String(k) : v);
    }
  }
  return Value::Array(std::move(out));
}

template <size_t N>
bool Contains(const absl::string_view (&names)[N], absl::string_view name) {
  for (absl::string_view n : names) {
    if (n == name) return true;
  }
  return false;
}

}  // namespace

bool IsKnownMethod(absl::string_view name) {
  return Contains(kStringMethods, name) || Contains(kDictMethods, name);
}

std::optional<Value> BindMethod(const Value& obj, absl::string_view name) {
  std::string method(name);
  if (obj.is_string() && Contains(kStringMethods, name)) {
    std::string s = obj.string();
    return Value::Callable(
        [s, method](const CallArgs& args) { return CallStringMethod(s, method, args); });
  }
  if (obj.is_object() && !obj.is_namespace() && Contains(kDictMethods, name)) {
    return Value::Callable(
        [obj, method](const CallArgs& args) { return CallDictMethod(obj, method, args); });
  }
  return std::nullopt;
}

}  // namespace tg::chat_template
