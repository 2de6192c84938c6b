#include "serve/chat_template/filters.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "serve/chat_template/call_args.h"
#include "serve/chat_template/operators.h"
#include "serve/chat_template/predicates.h"
#include "serve/chat_template/py_format.h"
#include "serve/chat_template/py_string.h"

namespace tg::chat_template {
namespace {

using FilterFn = absl::StatusOr<Value> (*)(const Value&, const CallArgs&);

absl::Status Error(absl::string_view filter, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("filter '", filter, "': ", what));
}

bool IsTrue(const Value& v) { return v.Truthy(); }

// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
absl::StatusOr<Value> GetPath(const Value& item, const Value& path) {
  if (path.is_int()) return GetItem(item, path);
  Value v = item;
  for (absl::string_view part : absl::StrSplit(path.Str(), '.')) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    Value key = digits ? Value::Int(std::atoll(std::string(part).c_str()))
                       : Value::String(std::string(part));
    TG_ASSIGN_OR_RETURN(v, GetItem(v, key));
  }
  return v;
}

// The sort key of jinja2's sort/unique/min/max: strings lower-cased unless case-sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  return (v.is_string() && !case_sensitive) ? Value::String(PyLower(v.string())) : v;
}

absl::StatusOr<Value> Trim(const Value& v, const CallArgs& a) {
  TG_ASSIGN_OR_RETURN(auto p, BindArgs(a, {"chars"}, "trim"));
  std::optional<std::string> chars;
  if (p[0].is_string()) chars = p[0].string();
  return Value::String(PyStrip(v.Str(), chars, true, true));
}

absl::StatusOr<Value> ToJson(const Value& v, const CallArgs& a) {
  TG_ASSIGN_OR_RETURN(auto p,
                      BindArgs(a, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson"));
  if (!p[2].is_undefined() && !p[2].is_none())
    return Error("tojson", "separators are not supported");
  JsonDumpsOptions o;
  o.ensure_ascii = p[0].Truthy();
  o.sort_keys = p[3].Truthy();
  if (p[1].is_int()) {
    o.indent = static_cast<int>(std::max<int64_t>(0, p[1].int_value()));
  } else if (!p[1].is_undefined() && !p[1].is_none()) {
    return Error("tojson", "indent must be an integer");
  }
  TG_ASSIGN_OR_RETURN(std::string s, PyJsonDumps(v, o));
  return Value::String(std::move(s));
}

absl::StatusOr<Value> Length(const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value::Int(0);
  if (v.is_string()) return Value::Int(PyLength(v.string()));
  if (v.is_array()) return Value::Int(v.items().size());
  if (v.is_object() && !v.is_namespace()) return Value::Int(v.object().entries.size());
  return Error("length", absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
}

absl::StatusOr<Value> First(const Value& v, const CallArgs&) {
  TG_ASSIGN_OR_RETURN(auto items, Iterate(v));
  if (items.empty()) return Value::Undefined("first item");
  return items.front();
}

absl::StatusOr<Value> Last(const Value& v, const CallArgs&) {
  TG_ASSIGN_OR_RETURN(auto items, Iterate(v));
  if (items.empty()) return Value::Undefined("last item");
  return items.back();
}

absl::StatusOr<Value> Join(const Value& v, const CallArgs& a) {
  TG_ASSIGN_OR_RETURN(auto p, BindArgs(a, {"d", "attribute"}, "join"));
  TG_ASSIGN_OR_RETURN(auto items, Iterate(v));
  std::string sep = p[0].is_undefined() ? "" : p[0].Str();
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (!p[1].is_undefined() && !p[1].is_none()) {
      TG_ASSIGN_OR_RETURN(item, GetPath(item, p[1]));
    }
    absl::StrAppend(&out, i > 0 ? sep : "", item.Str());
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Default(const Value& v, const CallArgs& a) {
  TG_ASSIGN_OR_RETURN(auto p, BindArgs(a, {"default_value", "boolean"}, "default"));
  if (v.is_undefined() || (p[1].Truthy() && !v.Truthy())) {
    return p[0].is_undefined() ? Value::String("") : p[0];
  }
  return v;
}

absl::StatusOr<Value> Lower(const Value& v, const CallArgs&) {
  return Value::String(PyLower(v.Str()));
}
absl::StatusOr<Value> Upper(const Value& v, const CallArgs&) {
  return Value::String(PyUpper(v.Str()));
}
absl::StatusOr<Value> Title(const Value& v, const CallArgs&) {
  return Value::String(JinjaTitle(v.Str()));
}
absl::StatusOr<Value> Capitalize(const Value& v, const CallArgs&) {
  return Value::String(PyCapitalize(v.Str()));
}
absl::StatusOr<Value> Identity(const Value& v, const CallArgs&) { return v; }
absl::StatusOr<Value> String(const Value& v, const CallArgs&) { return Value::String(v.Str()); }

absl::StatusOr<Value> Escape(const Value& v, const CallArgs&) {
  std::string out;
  for (char c : v.Str()) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Replace(const Value& v, const CallArgs& a) {
  TG_ASSIGN_OR_RETURN(auto p, BindArgs(a, {"old", "new", "count"}, "replace"));
  int64_t count = p[2].is_int() ? p[2].int_value() : -1;
  return Value::String(PyReplace(v.Str(), p[0].Str(), p[1].Str(), count));
}

absl::StatusOr<Value> Items(const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value::Array({});
  if (!v.is_object() || v.is_namespace())
    return Error("items", "can only get item pairs from a mapping");
  std::vector<Value> out;
  for (const auto& [k, val] : v.object().entries) {
    out.push_back(Value::Array({Value::String(k), val}, /*is_tuple=*/true));
  }
  return Value::Array(std::move(out));
}

absl::StatusOr<Value> List(const Value& v, const CallArgs&) {
  TG_ASSIGN_OR_RETURN(auto items, Iterate(v));
  return Value::Array(std::move(items));
}

// select / reject / selectattr / rejectattr.
absl::StatusOr<Value> Select(const Value& v, const CallArgs& a, bool by_attribute, bool keep) {
  if (!v.Truthy()) return Value::Array({});  // jinja2 yields nothing for a falsy sequence.
  TG_ASSIGN_OR_RETURN(auto items, Iterate(v));
  size_t first_test_arg = by_attribute ? 1 : 0;
  if (by_attribute && a.positional.empty()) return Error("selectattr", "needs an attribute");
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attribute) {
      TG_ASSIGN_OR_RETURN(subject, GetPath(item, a.positional[0]));
    }
    bool pass;
    if (a.positional.size() <= first_test_arg) {
      pass = subject.Truthy();
    } else {
      std::vector<Value> test_args(a.positional.begin() + first_test_arg + 1, a.positional.end());
      TG_ASSIGN_OR_RETURN(pass, ApplyTest(a.positional[first_test_arg].Str(), subject, test_args));
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::Array(std::move(out));
}
absl::StatusOr<Value> SelectF(const Value& v, const CallArgs& a) {
  return Select(v, a, false, true);
}
absl::StatusOr<Value> RejectF(const Value& v, const CallArgs& a) {
  return Select(v, a, false, false);
}
absl::StatusOr<Value> SelectAttr(const Value& v, const CallArgs& a) {
  return Select(v, a, true, true);
}
absl::StatusOr<Value> RejectAttr(const Value& v, const CallArgs& a) {
  return Select(v, a, true, false);
}

absl::StatusOr<Value> Map(const Value& v, const CallArgs& a) {
  if (!v.Truthy()) return Value::Array({});  // jinja2 yields nothing for a falsy sequence.
  TG_ASSIGN_OR_RETURN(auto items, Iterate(v));
  std::vector<Value> out;
  if (a.positional.empty()) {
    TG_ASSIGN_OR_RETURN(auto p, BindArgs(a, {"attribute", "default"}, "map"));
    for (const Value& item : items) {
      TG_ASSIGN_OR_RETURN(Value x, GetPath(item, p[0]));
      out.push_back(x.is_undefined() && !p[1].is_undefined() ? p[1] : x);
    }
    return Value::Array(std::move(out));
  }
  CallArgs rest{{a.positional.begin() + 1, a.positional.end()}, a.keyword, a.line};
  for (const Value& item : items) {
    TG_ASSIGN_OR_RETURN(Value x, ApplyFilter(a.positional[0].Str(), item, rest));
    out.push_back(std::move(x));
  }
  return Value::Array(std::move(out));
}

// Python's int(str): optional sign, digits and underscores, surrounding whitespace.
std::optional<int64_t> ParseInt(const std::string& s) {
  std::string t = PyStrip(s, std::nullopt, true, true);
  std::string digits;
  for (char c : t) {
    if (c != '_') digits.push_back(c);
  }
  if (digits.empty()) return std::nullopt;
  char* end = nullptr;
  int64_t r = std::strtoll(digits.c_str(), &end, 10);
  if (*end != '\0' || !(std::isdigit(static_cast<unsigned char>(digits.back()))))
    return std::nullopt;
  return r;
}

std::optional<double> ParseFloat(const std::string& s) {
  std::string t = PyStrip(s, std::nullopt, true, true);
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  double r = std::strtod(t.c_str(), &end);
  if (*end != '\0') return std::nullopt;
  return r;
}

absl::StatusOr<Value> Int(const Value& v, const CallArgs& a) {
  TG_ASSIGN_OR_RETURN(auto p, BindArgs(a, {"default", "base"}, "int"));
  Value dflt = p[0].is_undefined() ? Value::Int(0) : p[0];
  if (v.is_bool() || v.is_int()) return Value::Int(v.AsInt());
  if (v.is_float())
    return std::isfinite(v.float_value()) ? Value::Int(static_cast<int64_t>(v.float_value()))
                                          : dflt;
  if (v.is_string()) {
    if (auto i = ParseInt(v.string())) return Value::Int(*i);
    if (auto d = ParseFloat(v.string()); d && std::isfinite(*d))
      return Value::Int(static_cast<int64_t>(*d));
  }
  return dflt;
}

absl::StatusOr<Value> Float(const Value& v, const CallArgs& a) {
  TG_ASSIGN_OR_RETURN(auto p, BindArgs(a, {"default"}, "float"));
  Value dflt = p[0].is_undefined() ? Value::Float(0) : p[0];
  if (v.is_number()) return Value::Float(v.AsDouble());
  if (v.is_string()) {
    if (auto d = ParseFloat(v.string())) return Value::Float(*d);
  }
  return dflt;
}

absl::StatusOr<Value> Abs(const Value& v, const CallArgs&) {
  if (v.is_float()) return Value::Float(std::fabs(v.float_value()));
  if (v.is_int() || v.is_bool()) return Value::Int(std::llabs(v.AsInt()));
  return Error("abs", absl::StrCat("bad operand type '", v.TypeName(), "'"));
}

absl::StatusOr<Value> Round(const Value& v, const CallArgs& a) {
  TG_ASSIGN_OR_RETURN(auto p, BindArgs(a, {"precision", "method"}, "round"));
  int64_t precision = p[0].is_int() ? p[0].int_value() : 0;
  std::string method = p[1].is_undefined() ? "common" : p[1].Str();
  if (!v.is_number()) return Error("round", absl::StrCat("cannot round '", v.TypeName(), "'"));
  if (method == "common") {
    if (!v.is_float()) return Value::Int(v.AsInt());
    // printf rounds the exact binary value half-to-even, as Python's round() does.
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::max<int64_t>(0, precision)),
                  v.float_value());
    return Value::Float(std::strtod(buf, nullptr));
  }
  if (method != "floor" && method != "ceil")
    return Error("round", "method must be common, floor or ceil");
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.AsDouble() * scale;
  return Value::Float((method == "floor" ? std::floor(x) : std::ceil(x)) / scale);
}

absl::StatusOr<Value> Reverse(const Value& v, const CallArgs&) {
  if (v.is_string()) {
    std::vector<std::string> cps = SplitCodePoints(v.string());
    std::string out;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
    return Value::String(std::move(out));
  }
  TG_ASSIGN_OR_RETURN(auto items, Iterate(v));
  std::reverse(items.begin(), items.end());
  return Value::Array(std::move(items));
}

absl::StatusOr<Value> Sort(const Value& v, const CallArgs& a) {
  TG_ASSIGN_OR_RETURN(auto p, BindArgs(a, {"reverse", "case_sensitive", "attribute"}, "sort"));
  TG_ASSIGN_OR_RETURN(auto items, Iterate(v));
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) {
    Value key = item;
    if (!p[2].is_undefined() && !p[2].is_none()) {
      TG_ASSIGN_OR_RETURN(key, GetPath(item, p[2]));
    }
    keyed.emplace_back(SortKey(key, p[1].Truthy()), item);
  }
  absl::Status error;
  bool reverse = p[0].Truthy();
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    absl::StatusOr<int> o = Order(x.first, y.first);
    if (!o.ok()) error = o.status();
    return o.ok() && (reverse ? *o > 0 : *o < 0);
  });
  if (!error.ok()) return error;
  std::vector<Value> out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return Value::Array(std::move(out));
}

absl::StatusOr<Value> Unique(const Value& v, const CallArgs& a) {
  TG_ASSIGN_OR_RETURN(auto p, BindArgs(a, {"case_sensitive", "attribute"}, "unique"));
  TG_ASSIGN_OR_RETURN(auto items, Iterate(v));
  std::vector<Value> seen, out;
  for (const Value& item : items) {
    Value key = item;
    if (!p[1].is_undefined() && !p[1].is_none()) {
      TG_ASSIGN_OR_RETURN(key, GetPath(item, p[1]));
    }
    key = SortKey(key, p[0].Truthy());
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return s.Equals(key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::Array(std::move(out));
}

// str.splitlines() for the line breaks of ASCII.
std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> lines;
  std::string cur;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1C && c <= 0x1E)) {
      if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      lines.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) lines.push_back(std::move(cur));
  return lines;
}

absl::StatusOr<Value> Indent(const Value& v, const CallArgs& a) {
  TG_ASSIGN_OR_RETURN(auto p, BindArgs(a, {"width", "first", "blank"}, "indent"));
  std::string indention =
      p[0].is_string() ? p[0].string() : std::string(p[0].is_int() ? p[0].int_value() : 4, ' ');
  std::vector<std::string> lines = SplitLines(v.Str() + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    bool pad = i > 0 && (p[2].Truthy() || !lines[i].empty());
    absl::StrAppend(&out, pad ? indention : "", lines[i]);
  }
  if (p[1].Truthy()) out = indention + out;
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Sum(const Value& v, const CallArgs& a) {
  TG_ASSIGN_OR_RETURN(auto p, BindArgs(a, {"attribute", "start"}, "sum"));
  TG_ASSIGN_OR_RETURN(auto items, Iterate(v));
  Value total = p[1].is_undefined() ? Value::Int(0) : p[1];
  for (const Value& item : items) {
    Value x = item;
    if (!p[0].is_undefined() && !p[0].is_none()) {
      TG_ASSIGN_OR_RETURN(x, GetPath(item, p[0]));
    }
    TG_ASSIGN_OR_RETURN(total, BinaryOp("+", total, x));
  }
  return total;
}

absl::StatusOr<Value> MinMax(const Value& v, const CallArgs& a, bool max) {
  TG_ASSIGN_OR_RETURN(auto p, BindArgs(a, {"case_sensitive", "attribute"}, max ? "max" : "min"));
  TG_ASSIGN_OR_RETURN(auto items, Iterate(v));
  if (items.empty()) return Value::Undefined(max ? "max" : "min");
  Value best = items[0], best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    Value key = items[i];
    if (!p[1].is_undefined() && !p[1].is_none()) {
      TG_ASSIGN_OR_RETURN(key, GetPath(items[i], p[1]));
    }
    key = SortKey(key, p[0].Truthy());
    if (i == 0) {
      best_key = key;
      continue;
    }
    TG_ASSIGN_OR_RETURN(int o, Order(key, best_key));
    if (max ? o > 0 : o < 0) best = items[i], best_key = key;
  }
  return best;
}
absl::StatusOr<Value> Min(const Value& v, const CallArgs& a) { return MinMax(v, a, false); }
absl::StatusOr<Value> Max(const Value& v, const CallArgs& a) { return MinMax(v, a, true); }

absl::StatusOr<Value> DictSort(const Value& v, const CallArgs& a) {
  TG_ASSIGN_OR_RETURN(auto p, BindArgs(a, {"case_sensitive", "by", "reverse"}, "dictsort"));
  TG_ASSIGN_OR_RETURN(Value pairs, Items(v, CallArgs{}));
  if (v.is_undefined()) return pairs;
  int pos = 0;
  if (p[1].is_string() && p[1].string() == "value") {
    pos = 1;
  } else if (!p[1].is_undefined() && !(p[1].is_string() && p[1].string() == "key")) {
    return Error("dictsort", "'by' must be 'key' or 'value'");
  }
  CallArgs sort_args;
  sort_args.keyword = {{"reverse", p[2]}, {"case_sensitive", p[0]}, {"attribute", Value::Int(pos)}};
  return Sort(pairs, sort_args);
}

constexpr std::pair<absl::string_view, FilterFn> kFilters[] = {{"dictsort", DictSort},
                                                               {"trim", Trim},
                                                               {"tojson", ToJson},
                                                               {"length", Length},
                                                               {"count", Length},
                                                               {"first", First},
                                                               {"last", Last},
                                                               {"join", Join},
                                                               {"default", Default},
                                                               {"d", Default},
                                                               {"lower", Lower},
                                                               {"upper", Upper},
                                                               {"title", Title},
                                                               {"capitalize", Capitalize},
                                                               {"replace", Replace},
                                                               {"items", Items},
                                                               {"list", List},
                                                               {"selectattr", SelectAttr},
                                                               {"rejectattr", RejectAttr},
                                                               {"select", SelectF},
                                                               {"reject", RejectF},
                                                               {"map", Map},
                                                               {"string", String},
                                                               {"int", Int},
                                                               {"float", Float},
                                                               {"abs", Abs},
                                                               {"round", Round},
                                                               {"reverse", Reverse},
                                                               {"sort", Sort},
                                                               {"unique", Unique},
                                                               {"indent", Indent},
                                                               {"safe", Identity},
                                                               {"e", Escape},
                                                               {"escape", Escape},
                                                               {"sum", Sum},
                                                               {"min", Min},
                                                               {"max", Max}};

}  // namespace

bool IsKnownFilter(absl::string_view name) {
  for (const auto& [n, fn] : kFilters) {
    if (n == name) return true;
  }
  return false;
}

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& value,
                                  const CallArgs& args) {
  for (const auto& [n, fn] : kFilters) {
    if (n == name) return fn(value, args);
  }
  return Error(name, "no such filter");
}

}  // namespace tg::chat_template
