#include "serve/chat_template/evaluator.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "serve/chat_template/filters.h"
#include "serve/chat_template/globals.h"
#include "serve/chat_template/operators.h"
#include "serve/chat_template/predicates.h"

namespace tg::chat_template {
namespace {

// Variables of one frame; lookups walk to the enclosing frames.
struct Scope {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* Find(absl::string_view name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent) {
      for (auto it = s->vars.rbegin(); it != s->vars.rend(); ++it) {
        if (it->first == name) return &it->second;
      }
    }
    return nullptr;
  }
  void Set(absl::string_view name, Value value) {
    for (auto& [k, v] : vars) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    vars.emplace_back(std::string(name), std::move(value));
  }
};

enum class Flow { kNormal, kBreak, kContinue };

// Prefixes the line to an error that has none yet (raise_exception's message stays as is).
absl::Status AtLine(int line, const absl::Status& s) {
  if (s.ok() || IsRaisedByTemplate(s) || absl::StartsWith(s.message(), "line ")) return s;
  return absl::Status(s.code(), absl::StrCat("line ", line, ": ", s.message()));
}

template <typename T>
absl::StatusOr<T> AtLine(int line, absl::StatusOr<T> v) {
  if (v.ok()) return v;
  return AtLine(line, v.status());
}

class Renderer {
 public:
  absl::StatusOr<Flow> Exec(const Body& body, Scope* scope, std::string* out) {
    for (const NodePtr& node : body) {
      TG_ASSIGN_OR_RETURN(Flow flow, ExecNode(*node, scope, out));
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

 private:
  absl::StatusOr<Flow> ExecNode(const Node& n, Scope* scope, std::string* out) {
    switch (n.kind) {
      case Node::Kind::kText:
        *out += n.text;
        return Flow::kNormal;
      case Node::Kind::kOutput: {
        TG_ASSIGN_OR_RETURN(Value v, Eval(*n.expr, scope));
        *out += v.Str();
        return Flow::kNormal;
      }
      case Node::Kind::kIf:
        for (const IfBranch& b : n.branches) {
          if (b.condition) {
            TG_ASSIGN_OR_RETURN(Value c, Eval(*b.condition, scope));
            if (!c.Truthy()) continue;
          }
          return Exec(b.body, scope, out);
        }
        return Flow::kNormal;
      case Node::Kind::kFor:
        TG_RETURN_IF_ERROR(ExecFor(n, scope, out));
        return Flow::kNormal;
      case Node::Kind::kSet:
      case Node::Kind::kSetBlock:
        TG_RETURN_IF_ERROR(ExecSet(n, scope));
        return Flow::kNormal;
      case Node::Kind::kMacro:
        scope->Set(n.text, MakeMacro(n, scope));
        return Flow::kNormal;
      case Node::Kind::kCallBlock:
        TG_RETURN_IF_ERROR(ExecCallBlock(n, scope, out));
        return Flow::kNormal;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kBlock:
        return Exec(n.body, scope, out);
      case Node::Kind::kFilterBlock: {
        Scope tmp{scope, {}};
        std::string body;
        TG_RETURN_IF_ERROR(Exec(n.body, &tmp, &body).status());
        tmp.Set(kFilterBlockVar, Value::String(std::move(body)));
        TG_ASSIGN_OR_RETURN(Value v, Eval(*n.expr, &tmp));
        *out += v.Str();
        return Flow::kNormal;
      }
    }
    return Flow::kNormal;
  }

  absl::Status Assign(const std::vector<std::string>& targets, const Value& v, Scope* scope,
                      int line) {
    if (targets.size() == 1) {
      scope->Set(targets[0], v);
      return absl::OkStatus();
    }
    TG_ASSIGN_OR_RETURN(std::vector<Value> items, AtLine(line, Iterate(v)));
    if (items.size() != targets.size()) {
      return AtLine(line, absl::InvalidArgumentError(absl::StrCat(
                              items.size() > targets.size() ? "too many" : "not enough",
                              " values to unpack (expected ", targets.size(), ")")));
    }
    for (size_t i = 0; i < items.size(); ++i) scope->Set(targets[i], items[i]);
    return absl::OkStatus();
  }

  static Value LoopObject(const std::vector<Value>& items, size_t i) {
    auto loop = std::make_shared<ObjectData>();
    int64_t n = static_cast<int64_t>(items.size()), k = static_cast<int64_t>(i);
    loop->entries = {{"index", Value::Int(k + 1)},    {"index0", Value::Int(k)},
                     {"revindex", Value::Int(n - k)}, {"revindex0", Value::Int(n - k - 1)},
                     {"first", Value::Bool(k == 0)},  {"last", Value::Bool(k == n - 1)},
                     {"length", Value::Int(n)},       {"depth", Value::Int(1)},
                     {"depth0", Value::Int(0)}};
    if (k > 0) loop->entries.emplace_back("previtem", items[i - 1]);
    if (k + 1 < n) loop->entries.emplace_back("nextitem", items[i + 1]);
    loop->entries.emplace_back("cycle",
                               Value::Callable([k](const CallArgs& a) -> absl::StatusOr<Value> {
                                 if (a.positional.empty())
                                   return absl::InvalidArgumentError("no items for cycling given");
                                 return a.positional[k % a.positional.size()];
                               }));
    return Value::Object(std::move(loop));
  }

  absl::Status ExecFor(const Node& n, Scope* scope, std::string* out) {
    TG_ASSIGN_OR_RETURN(Value iterable, Eval(*n.expr, scope));
    TG_ASSIGN_OR_RETURN(std::vector<Value> items, AtLine(n.line, Iterate(iterable)));
    if (n.filter) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        Scope tmp{scope, {}};
        TG_RETURN_IF_ERROR(Assign(n.targets, item, &tmp, n.line));
        TG_ASSIGN_OR_RETURN(Value keep, Eval(*n.filter, &tmp));
        if (keep.Truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      Scope tmp{scope, {}};
      return Exec(n.else_body, &tmp, out).status();
    }
    for (size_t i = 0; i < items.size(); ++i) {
      Scope iteration{scope, {}};
      iteration.Set("loop", LoopObject(items, i));
      TG_RETURN_IF_ERROR(Assign(n.targets, items[i], &iteration, n.line));
      TG_ASSIGN_OR_RETURN(Flow flow, Exec(n.body, &iteration, out));
      if (flow == Flow::kBreak) break;
    }
    return absl::OkStatus();
  }

  absl::Status ExecSet(const Node& n, Scope* scope) {
    Value v;
    if (n.kind == Node::Kind::kSetBlock) {
      std::string text;
      Scope tmp{scope, {}};
      TG_RETURN_IF_ERROR(Exec(n.body, &tmp, &text).status());
      v = Value::String(std::move(text));
    } else {
      TG_ASSIGN_OR_RETURN(v, Eval(*n.expr, scope));
    }
    if (n.attribute.empty()) return Assign(n.targets, v, scope, n.line);
    const Value* ns = scope->Find(n.targets[0]);
    if (ns == nullptr || !ns->is_namespace()) {
      return AtLine(n.line, absl::InvalidArgumentError(
                                absl::StrCat("cannot assign attribute '", n.attribute, "' on '",
                                             n.targets[0], "': not a namespace object")));
    }
    ns->object().Set(n.attribute, std::move(v));
    return absl::OkStatus();
  }

  // A callable that renders `body` with `params` bound from a call's arguments.
  Value MakeCallable(const std::string& name, const std::vector<Param>& params, const Body& body,
                     Scope* defining) {
    return Value::Callable([this, name, &params, &body,
                            defining](const CallArgs& args) -> absl::StatusOr<Value> {
      Scope local{defining, {}};
      if (args.positional.size() > params.size()) {
        return AtLine(args.line, absl::InvalidArgumentError(
                                     absl::StrCat("macro '", name, "' takes not more than ",
                                                  params.size(), " argument(s)")));
      }
      for (const auto& [k, v] : args.keyword) {
        bool known = k == "caller";
        for (const Param& p : params) known = known || p.name == k;
        if (!known) {
          return AtLine(args.line, absl::InvalidArgumentError(absl::StrCat(
                                       "macro '", name, "' takes no keyword argument '", k, "'")));
        }
        if (k == "caller") local.Set(k, v);
      }
      for (size_t i = 0; i < params.size(); ++i) {
        const Param& p = params[i];
        Value v = Value::Undefined(p.name);
        bool given = i < args.positional.size();
        if (given) v = args.positional[i];
        for (const auto& [k, kv] : args.keyword) {
          if (k == p.name) v = kv, given = true;
        }
        if (!given && p.default_value) {
          TG_ASSIGN_OR_RETURN(v, Eval(*p.default_value, &local));
        }
        local.Set(p.name, std::move(v));
      }
      std::string out;
      TG_RETURN_IF_ERROR(Exec(body, &local, &out).status());
      return Value::String(std::move(out));
    });
  }

  Value MakeMacro(const Node& n, Scope* scope) {
    return MakeCallable(n.text, n.params, n.body, scope);
  }

  absl::Status ExecCallBlock(const Node& n, Scope* scope, std::string* out) {
    const Expr& call = *n.expr;
    TG_ASSIGN_OR_RETURN(Value callee, Eval(*call.args[0], scope));
    TG_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call, scope));
    args.keyword.emplace_back("caller", MakeCallable("caller", n.params, n.body, scope));
    TG_ASSIGN_OR_RETURN(Value result, Invoke(callee, args, call.line));
    *out += result.Str();
    return absl::OkStatus();
  }

  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, Scope* scope) {
    CallArgs args;
    args.line = e.line;
    for (size_t i = 1; i < e.args.size(); ++i) {
      TG_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i], scope));
      args.positional.push_back(std::move(v));
    }
    for (size_t i = 0; i < e.kwargs.size(); ++i) {
      TG_ASSIGN_OR_RETURN(Value v, Eval(*e.kwargs[i], scope));
      args.keyword.emplace_back(e.kwarg_names[i], std::move(v));
    }
    return args;
  }

  absl::StatusOr<Value> Invoke(const Value& callee, const CallArgs& args, int line) {
    if (callee.is_undefined()) return AtLine(line, UndefinedError(callee));
    if (!callee.is_callable()) {
      return AtLine(line, absl::InvalidArgumentError(
                              absl::StrCat("'", callee.TypeName(), "' object is not callable")));
    }
    return AtLine(line, callee.function()(args));
  }

  absl::StatusOr<Value> Eval(const Expr& e, Scope* scope) {
    return AtLine(e.line, EvalUnprefixed(e, scope));
  }

  absl::StatusOr<Value> EvalUnprefixed(const Expr& e, Scope* scope) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName: {
        const Value* v = scope->Find(e.name);
        return v != nullptr ? *v : Value::Undefined(e.name);
      }
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        std::vector<Value> items;
        for (const ExprPtr& a : e.args) {
          TG_ASSIGN_OR_RETURN(Value v, Eval(*a, scope));
          items.push_back(std::move(v));
        }
        return Value::Array(std::move(items), e.kind == Expr::Kind::kTuple);
      }
      case Expr::Kind::kDict: {
        auto data = std::make_shared<ObjectData>();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          TG_ASSIGN_OR_RETURN(Value k, Eval(*e.args[i], scope));
          if (!k.is_string()) return absl::InvalidArgumentError("dict keys must be strings");
          TG_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1], scope));
          data->Set(k.string(), std::move(v));
        }
        return Value::Object(std::move(data));
      }
      case Expr::Kind::kGetAttr: {
        TG_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
        return GetAttr(obj, e.name);
      }
      case Expr::Kind::kGetItem: {
        TG_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
        TG_ASSIGN_OR_RETURN(Value key, Eval(*e.args[1], scope));
        return GetItem(obj, key);
      }
      case Expr::Kind::kSlice: {
        Value parts[4];
        for (int i = 0; i < 4; ++i) {
          if (e.args[i]) {
            TG_ASSIGN_OR_RETURN(parts[i], Eval(*e.args[i], scope));
          }
        }
        return Slice(parts[0], parts[1], parts[2], parts[3]);
      }
      case Expr::Kind::kCall: {
        TG_ASSIGN_OR_RETURN(Value callee, Eval(*e.args[0], scope));
        TG_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, scope));
        return Invoke(callee, args, e.line);
      }
      case Expr::Kind::kFilter: {
        TG_ASSIGN_OR_RETURN(Value subject, Eval(*e.args[0], scope));
        TG_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, scope));
        return ApplyFilter(e.name, subject, args);
      }
      case Expr::Kind::kTest: {
        TG_ASSIGN_OR_RETURN(Value subject, Eval(*e.args[0], scope));
        TG_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, scope));
        TG_ASSIGN_OR_RETURN(bool pass, ApplyTest(e.name, subject, args.positional));
        return Value::Bool(pass != e.negated);
      }
      case Expr::Kind::kUnary: {
        TG_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], scope));
        if (e.name == "not") return Value::Bool(!v.Truthy());
        return UnaryOp(e.name, v);
      }
      case Expr::Kind::kBinary: {
        TG_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0], scope));
        if (e.name == "and") return a.Truthy() ? Eval(*e.args[1], scope) : a;
        if (e.name == "or") return a.Truthy() ? a : Eval(*e.args[1], scope);
        TG_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1], scope));
        return BinaryOp(e.name, a, b);
      }
      case Expr::Kind::kCompare: {
        TG_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0], scope));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          TG_ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1], scope));
          TG_ASSIGN_OR_RETURN(bool pass, CompareOp(e.ops[i], left, right));
          if (!pass) return Value::Bool(false);
          left = std::move(right);
        }
        return Value::Bool(true);
      }
      case Expr::Kind::kCondition: {
        TG_ASSIGN_OR_RETURN(Value cond, Eval(*e.args[1], scope));
        if (cond.Truthy()) return Eval(*e.args[0], scope);
        if (e.args[2]) return Eval(*e.args[2], scope);
        return Value::Undefined("conditional expression");
      }
    }
    return absl::InternalError("unknown expression kind");
  }
};

}  // namespace

absl::StatusOr<std::string> Evaluate(const Body& body, const Value& context, const std::tm& now) {
  Scope globals;
  for (auto& [name, value] : MakeGlobals(now)) globals.Set(name, std::move(value));
  Scope root{&globals, {}};
  if (context.is_object()) {
    for (const auto& [k, v] : context.object().entries) root.Set(k, v);
  }
  Renderer renderer;
  std::string out;
  TG_RETURN_IF_ERROR(renderer.Exec(body, &root, &out).status());
  return out;
}

}  // namespace tg::chat_template
