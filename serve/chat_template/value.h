// Value: the dynamic value of the chat-template language, with the semantics of the Python
// objects that jinja2 manipulates (None, bool, int, float, str, list/tuple, insertion-ordered
// dict, callables, jinja2's namespace and its default Undefined). Arrays and objects are
// shared by reference, as Python's are, so a namespace can be assigned through any copy.
// Thread-safety: a Value is not synchronised; values that share data (copies of one array,
// object or namespace) must stay on one thread. The values of one Render call never leave it.
#ifndef TENSORGRID_SERVE_CHAT_TEMPLATE_VALUE_H_
#define TENSORGRID_SERVE_CHAT_TEMPLATE_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace tg::chat_template {

class Value;

// The arguments of a call: positional, then keyword (in call order), and the caller's line.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  int line = 0;
};

// A callable: a global function, a bound method, a macro, namespace().
using Function = std::function<absl::StatusOr<Value>(const CallArgs&)>;

// A Python list (or tuple: printed with parentheses, otherwise the same).
struct ArrayData {
  std::vector<Value> items;
  bool is_tuple = false;
};

// A Python dict with string keys in insertion order, or a jinja2 namespace() object.
struct ObjectData {
  std::vector<std::pair<std::string, Value>> entries;
  bool is_namespace = false;

  // The value of `key`, or nullptr.
  const Value* Find(absl::string_view key) const;
  // Sets `key`, keeping its position when it exists.
  void Set(absl::string_view key, Value value);
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kFunction };

  // Undefined; `name` is what an error about it names ("'name' is undefined").
  Value() = default;
  static Value Undefined(std::string name);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value String(std::string s);
  static Value Array(std::vector<Value> items, bool is_tuple = false);
  static Value Object(std::shared_ptr<ObjectData> data);
  static Value EmptyObject();
  static Value Callable(Function f);
  // Converts JSON: integers stay integers, objects keep their key order.
  static Value FromJson(const nlohmann::ordered_json& json);

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // Python's numbers.Number: bool, int and float.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_array() const { return kind() == Kind::kArray; }
  bool is_object() const { return kind() == Kind::kObject; }
  bool is_namespace() const { return is_object() && object().is_namespace; }
  bool is_callable() const { return kind() == Kind::kFunction; }

  bool bool_value() const { return std::get<bool>(data_); }
  int64_t int_value() const { return std::get<int64_t>(data_); }
  double float_value() const { return std::get<double>(data_); }
  // A number as a double (bools are 0 and 1, as in Python).
  double AsDouble() const;
  // A bool or int as an integer.
  int64_t AsInt() const { return is_bool() ? bool_value() : int_value(); }
  const std::string& string() const { return std::get<std::string>(data_); }
  const ArrayData& array() const { return *std::get<std::shared_ptr<ArrayData>>(data_); }
  const std::vector<Value>& items() const { return array().items; }
  ObjectData& object() const { return *std::get<std::shared_ptr<ObjectData>>(data_); }
  const Function& function() const { return *std::get<std::shared_ptr<Function>>(data_); }
  // The name an undefined value was looked up as.
  const std::string& undefined_name() const { return std::get<UndefinedName>(data_).name; }

  // Python's bool(): empty strings, lists and dicts, 0, None and undefined are false.
  bool Truthy() const;
  // Python's ==: 1 == 1.0 == True; lists and dicts compare deeply; undefined equals undefined.
  bool Equals(const Value& other) const;
  // Python's str(): what {{ value }} prints (undefined prints nothing).
  std::string Str() const;
  // Python's repr(): how a value prints inside a list or dict.
  std::string Repr() const;
  // The Python type name used in error messages ("str", "int", "list", ...).
  std::string TypeName() const;

 private:
  struct UndefinedName {
    std::string name;
  };
  using Data = std::variant<UndefinedName, std::nullptr_t, bool, int64_t, double, std::string,
                            std::shared_ptr<ArrayData>, std::shared_ptr<ObjectData>,
                            std::shared_ptr<Function>>;
  explicit Value(Data data) : data_(std::move(data)) {}
  Data data_;
};

}  // namespace tg::chat_template

#endif  // TENSORGRID_SERVE_CHAT_TEMPLATE_VALUE_H_
