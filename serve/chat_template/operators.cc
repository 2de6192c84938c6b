#include "serve/chat_template/operators.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "serve/chat_template/methods.h"
#include "serve/chat_template/py_string.h"

namespace tg::chat_template {
namespace {

absl::Status OperandError(absl::string_view op, const Value& a, const Value& b) {
  return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ", op, ": '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

absl::StatusOr<Value> Arithmetic(absl::string_view op, const Value& a, const Value& b) {
  bool as_float = a.is_float() || b.is_float();
  if (op == "/" || op == "//" || op == "%") {
    if (b.AsDouble() == 0) return absl::InvalidArgumentError("division by zero");
  }
  if (op == "/") return Value::Float(a.AsDouble() / b.AsDouble());
  if (as_float) {
    double x = a.AsDouble(), y = b.AsDouble();
    if (op == "+") return Value::Float(x + y);
    if (op == "-") return Value::Float(x - y);
    if (op == "*") return Value::Float(x * y);
    if (op == "//") return Value::Float(std::floor(x / y));
    if (op == "%") {
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::Float(m);
    }
    return Value::Float(std::pow(x, y));
  }
  int64_t x = a.AsInt(), y = b.AsInt();
  if (op == "+") return Value::Int(x + y);
  if (op == "-") return Value::Int(x - y);
  if (op == "*") return Value::Int(x * y);
  if (op == "//") return Value::Int(FloorDiv(x, y));
  if (op == "%") return Value::Int(x - FloorDiv(x, y) * y);
  if (y < 0) return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
  int64_t r = 1;
  for (int64_t i = 0; i < y; ++i) r *= x;
  return Value::Int(r);
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.string();
    return Value::String(std::move(out));
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::Array(std::move(out));
}

// Python's slice.indices(): clamps start and stop for a sequence of `len` items.
void AdjustSlice(int64_t len, const Value& v_start, const Value& v_stop, int64_t step,
                 int64_t* start, int64_t* stop) {
  auto given = [](const Value& v) { return v.is_int() || v.is_bool(); };
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (!given(v)) return dflt;
    int64_t i = v.AsInt();
    if (i < 0) {
      i += len;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= len) {
      i = step < 0 ? len - 1 : len;
    }
    return i;
  };
  *start = clamp(v_start, step < 0 ? len - 1 : 0);
  *stop = clamp(v_stop, step < 0 ? -1 : len);
}

}  // namespace

absl::Status UndefinedError(const Value& undefined) {
  return absl::InvalidArgumentError(
      absl::StrCat("'", undefined.undefined_name(), "' is undefined"));
}

absl::StatusOr<Value> BinaryOp(absl::string_view op, const Value& a, const Value& b) {
  if (op == "~") return Value::String(a.Str() + b.Str());
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (a.is_number() && b.is_number()) return Arithmetic(op, a, b);
  if (op == "+" && a.is_string() && b.is_string()) return Value::String(a.string() + b.string());
  if (op == "+" && a.is_array() && b.is_array()) {
    std::vector<Value> out = a.items();
    out.insert(out.end(), b.items().begin(), b.items().end());
    return Value::Array(std::move(out), a.array().is_tuple);
  }
  if (op == "*" && (a.is_string() || a.is_array()) && (b.is_int() || b.is_bool())) {
    return Repeat(a, b.AsInt());
  }
  if (op == "*" && (b.is_string() || b.is_array()) && (a.is_int() || a.is_bool())) {
    return Repeat(b, a.AsInt());
  }
  if (op == "%" && a.is_string()) {
    return absl::InvalidArgumentError("unsupported printf-style string formatting with '%'");
  }
  return OperandError(op, a, b);
}

absl::StatusOr<Value> UnaryOp(absl::string_view op, const Value& a) {
  if (a.is_undefined()) return UndefinedError(a);
  if (!a.is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad operand type for unary ", op, ": '", a.TypeName(), "'"));
  }
  if (op == "+") return a.is_float() ? a : Value::Int(a.AsInt());
  return a.is_float() ? Value::Float(-a.float_value()) : Value::Int(-a.AsInt());
}

absl::StatusOr<int> Order(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      return a.AsDouble() < b.AsDouble() ? -1 : a.AsDouble() > b.AsDouble() ? 1 : 0;
    }
    return a.AsInt() < b.AsInt() ? -1 : a.AsInt() > b.AsInt() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.string().compare(b.string());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_array() && b.is_array()) {
    for (size_t i = 0; i < a.items().size() && i < b.items().size(); ++i) {
      if (a.items()[i].Equals(b.items()[i])) continue;
      return Order(a.items()[i], b.items()[i]);
    }
    return a.items().size() < b.items().size() ? -1 : a.items().size() > b.items().size() ? 1 : 0;
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::StatusOr<bool> CompareOp(absl::string_view op, const Value& a, const Value& b) {
  if (op == "==") return a.Equals(b);
  if (op == "!=") return !a.Equals(b);
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'in <string>' requires string as left operand, not ", a.TypeName()));
      }
      found = b.string().find(a.string()) != std::string::npos;
    } else if (b.is_array()) {
      for (const Value& v : b.items()) found = found || a.Equals(v);
    } else if (b.is_object() && !b.is_namespace()) {
      found = a.is_string() && b.object().Find(a.string()) != nullptr;
    } else if (!b.is_undefined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("argument of type '", b.TypeName(), "' is not iterable"));
    }
    return op == "in" ? found : !found;
  }
  absl::StatusOr<int> order = Order(a, b);
  if (!order.ok()) return order.status();
  if (op == "<") return *order < 0;
  if (op == "<=") return *order <= 0;
  if (op == ">") return *order > 0;
  return *order >= 0;
}

absl::StatusOr<Value> GetAttr(const Value& obj, absl::string_view name) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (std::optional<Value> method = BindMethod(obj, name)) return *method;
  if (obj.is_object()) {
    if (const Value* v = obj.object().Find(name)) return *v;
  }
  return Value::Undefined(std::string(name));
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_object() && key.is_string()) {
    if (const Value* v = obj.object().Find(key.string())) return *v;
    return GetAttr(obj, key.string());
  }
  if ((obj.is_array() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.AsInt();
    if (obj.is_array()) {
      int64_t n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::Undefined(absl::StrCat("[", key.AsInt(), "]"));
      return obj.items()[i];
    }
    std::vector<std::string> cps = SplitCodePoints(obj.string());
    int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::Undefined(absl::StrCat("[", key.AsInt(), "]"));
    return Value::String(cps[i]);
  }
  if (key.is_string()) return GetAttr(obj, key.string());
  return Value::Undefined(key.Str());
}

absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop,
                            const Value& step) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (!obj.is_array() && !obj.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", obj.TypeName(), "' object is not subscriptable"));
  }
  int64_t st = (step.is_int() || step.is_bool()) ? step.AsInt() : 1;
  if (st == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  std::vector<std::string> cps;
  if (obj.is_string()) cps = SplitCodePoints(obj.string());
  int64_t len = obj.is_string() ? cps.size() : obj.items().size();
  int64_t b, e;
  AdjustSlice(len, start, stop, st, &b, &e);
  std::vector<Value> items;
  std::string text;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (obj.is_string()) {
      text += cps[i];
    } else {
      items.push_back(obj.items()[i]);
    }
  }
  if (obj.is_string()) return Value::String(std::move(text));
  return Value::Array(std::move(items), obj.array().is_tuple);
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>();
    case Value::Kind::kArray:
      return value.items();
    case Value::Kind::kString: {
      std::vector<Value> out;
      for (std::string& cp : SplitCodePoints(value.string()))
        out.push_back(Value::String(std::move(cp)));
      return out;
    }
    case Value::Kind::kObject:
      if (!value.is_namespace()) {
        std::vector<Value> out;
        for (const auto& [k, v] : value.object().entries) out.push_back(Value::String(k));
        return out;
      }
      [[fallthrough]];
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("'", value.TypeName(), "' object is not iterable"));
  }
}

}  // namespace tg::chat_template
