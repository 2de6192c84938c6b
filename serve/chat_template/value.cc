#include "serve/chat_template/value.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "serve/chat_template/py_format.h"

namespace tg::chat_template {

const Value* ObjectData::Find(absl::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void ObjectData::Set(absl::string_view key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::string(key), std::move(value));
}

Value Value::Undefined(std::string name) { return Value(UndefinedName{std::move(name)}); }
Value Value::None() { return Value(nullptr); }
Value Value::Bool(bool b) { return Value(b); }
Value Value::Int(int64_t i) { return Value(i); }
Value Value::Float(double d) { return Value(d); }
Value Value::String(std::string s) { return Value(std::move(s)); }
Value Value::Array(std::vector<Value> items, bool is_tuple) {
  auto data = std::make_shared<ArrayData>();
  data->items = std::move(items);
  data->is_tuple = is_tuple;
  return Value(std::move(data));
}
Value Value::Object(std::shared_ptr<ObjectData> data) { return Value(std::move(data)); }
Value Value::EmptyObject() { return Value(std::make_shared<ObjectData>()); }
Value Value::Callable(Function f) { return Value(std::make_shared<Function>(std::move(f))); }

Value Value::FromJson(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Int(static_cast<int64_t>(json.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJson(item));
      return Array(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto data = std::make_shared<ObjectData>();
      for (const auto& [k, v] : json.items()) data->entries.emplace_back(k, FromJson(v));
      return Object(std::move(data));
    }
    default:
      return None();  // binary and discarded values do not occur in parsed JSON.
  }
}

double Value::AsDouble() const {
  if (is_float()) return float_value();
  return static_cast<double>(AsInt());
}

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return bool_value();
    case Kind::kInt:
      return int_value() != 0;
    case Kind::kFloat:
      return float_value() != 0.0;
    case Kind::kString:
      return !string().empty();
    case Kind::kArray:
      return !items().empty();
    case Kind::kObject:
      return is_namespace() || !object().entries.empty();
    case Kind::kFunction:
      return true;
  }
  return false;
}

bool Value::Equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_float() || other.is_float()) return AsDouble() == other.AsDouble();
    return AsInt() == other.AsInt();
  }
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return string() == other.string();
    case Kind::kArray: {
      if (items().size() != other.items().size()) return false;
      for (size_t i = 0; i < items().size(); ++i) {
        if (!items()[i].Equals(other.items()[i])) return false;
      }
      return true;
    }
    case Kind::kObject: {
      if (is_namespace() || other.is_namespace()) return &object() == &other.object();
      if (object().entries.size() != other.object().entries.size()) return false;
      for (const auto& [k, v] : object().entries) {
        const Value* o = other.object().Find(k);
        if (o == nullptr || !v.Equals(*o)) return false;
      }
      return true;
    }
    case Kind::kFunction:
      return &function() == &other.function();
    default:
      return false;  // numbers were handled above.
  }
}

std::string Value::Str() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return string();
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return bool_value() ? "True" : "False";
    case Kind::kInt:
      return absl::StrCat(int_value());
    case Kind::kFloat:
      return PyFloatRepr(float_value());
    case Kind::kString:
      return PyStringRepr(string());
    case Kind::kArray: {
      std::string out = array().is_tuple ? "(" : "[";
      for (size_t i = 0; i < items().size(); ++i) {
        if (i > 0) out += ", ";
        out += items()[i].Repr();
      }
      if (array().is_tuple && items().size() == 1) out += ",";
      out += array().is_tuple ? ")" : "]";
      return out;
    }
    case Kind::kObject: {
      std::string out = is_namespace() ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : object().entries) {
        absl::StrAppend(&out, first ? "" : ", ", PyStringRepr(k), ": ", v.Repr());
        first = false;
      }
      return out + (is_namespace() ? "}>" : "}");
    }
    case Kind::kFunction:
      return "<function>";
  }
  return "";
}

std::string Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kArray:
      return array().is_tuple ? "tuple" : "list";
    case Kind::kObject:
      return is_namespace() ? "Namespace" : "dict";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

}  // namespace tg::chat_template
