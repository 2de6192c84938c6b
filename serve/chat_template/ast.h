// The syntax tree of a parsed template: expressions (Expr) and statements (Node). Built once
// by the parser, then only read. Thread-safety: immutable after parsing, so any number of
// threads may render one tree.
#ifndef TENSORGRID_SERVE_CHAT_TEMPLATE_AST_H_
#define TENSORGRID_SERVE_CHAT_TEMPLATE_AST_H_

#include <memory>
#include <string>
#include <vector>

#include "serve/chat_template/value.h"

namespace tg::chat_template {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // literal
    kName,       // name
    kList,       // args: the items
    kTuple,      // args: the items
    kDict,       // args: key, value, key, value, ...
    kGetAttr,    // args[0].name
    kGetItem,    // args[0][args[1]]
    kSlice,      // args[0][args[1]:args[2]:args[3]]; absent parts are null
    kCall,       // args[0](args[1:], kwargs)
    kFilter,     // args[0] | name(args[1:], kwargs)
    kTest,       // args[0] is [not] name(args[1:])
    kUnary,      // name ("not", "-", "+") args[0]
    kBinary,     // args[0] name args[1]; name is an operator, "and", "or", "in", "not in"
    kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ... (chained)
    kCondition,  // args[0] if args[1] else args[2] (args[2] null: undefined)
  };
  Kind kind;
  int line = 0;
  std::string name;
  Value literal;
  std::vector<ExprPtr> args;
  std::vector<std::string> kwarg_names;
  std::vector<ExprPtr> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

// One branch of an if statement; the else branch has no condition.
struct IfBranch {
  ExprPtr condition;
  Body body;
};

// A macro parameter: its name and default (null: undefined when not passed).
struct Param {
  std::string name;
  ExprPtr default_value;
};

// The variable that holds a {% filter %} block's rendered body while its filters run.
inline constexpr char kFilterBlockVar[] = "__filter_block_body__";

struct Node {
  enum class Kind {
    kText,       // text
    kOutput,     // {{ expr }}
    kIf,         // branches
    kFor,        // for targets in expr [if filter]: body [else else_body]
    kSet,        // set targets = expr; a target "ns.attr" is attribute (ns = name, attr)
    kSetBlock,   // set targets[0] %} body {% endset
    kMacro,      // macro name(params): body
    kCallBlock,  // call[(params)] expr: body (caller())
    kBreak,
    kContinue,
    kBlock,        // a transparent block: body ({% generation %} of transformers)
    kFilterBlock,  // filter ...: body; expr applies the filters to the variable kFilterBlockVar
  };
  Kind kind;
  int line = 0;
  std::string text;  // kText; kMacro: the name.
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attribute;  // kSet on a namespace: the attribute of targets[0].
  std::vector<IfBranch> branches;
  std::vector<Param> params;
  Body body;
  Body else_body;
};

}  // namespace tg::chat_template

#endif  // TENSORGRID_SERVE_CHAT_TEMPLATE_AST_H_
