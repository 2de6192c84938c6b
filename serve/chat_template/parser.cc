#include "serve/chat_template/parser.h"

#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "serve/chat_template/filters.h"
#include "serve/chat_template/globals.h"
#include "serve/chat_template/lexer.h"
#include "serve/chat_template/methods.h"
#include "serve/chat_template/predicates.h"

namespace tg::chat_template {
namespace {

ExprPtr MakeExpr(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

ExprPtr MakeBinary(std::string op, ExprPtr left, ExprPtr right, int line) {
  ExprPtr e = MakeExpr(Expr::Kind::kBinary, line);
  e->name = std::move(op);
  e->args.push_back(std::move(left));
  e->args.push_back(std::move(right));
  return e;
}

// Parses the tokens of one tag.
class ExprParser {
 public:
  ExprParser(const std::vector<Token>& tokens, int line,
             std::vector<std::pair<std::string, int>>* calls)
      : toks_(tokens), line_(line), calls_(calls) {}

  bool AtEnd() const { return pos_ >= toks_.size(); }
  int line() const {
    return AtEnd() ? (toks_.empty() ? line_ : toks_.back().line) : toks_[pos_].line;
  }
  bool IsOp(absl::string_view op) const {
    return !AtEnd() && toks_[pos_].kind == Token::Kind::kOperator && toks_[pos_].text == op;
  }
  bool IsName(absl::string_view name) const {
    return !AtEnd() && toks_[pos_].kind == Token::Kind::kName && toks_[pos_].text == name;
  }
  bool IsAnyName() const { return !AtEnd() && toks_[pos_].kind == Token::Kind::kName; }
  const Token& Next() { return toks_[pos_++]; }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", line(), ": ", what));
  }
  absl::Status Unexpected(absl::string_view wanted) const {
    if (AtEnd()) return Error(absl::StrCat("expected ", wanted, ", got the end of the tag"));
    return Error(absl::StrCat("expected ", wanted, ", got '", toks_[pos_].text, "'"));
  }
  absl::Status ExpectOp(absl::string_view op) {
    if (!IsOp(op)) return Unexpected(absl::StrCat("'", op, "'"));
    ++pos_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (!IsAnyName()) return Unexpected("a name");
    return Next().text;
  }
  absl::Status ExpectEnd() const {
    if (!AtEnd()) return Error(absl::StrCat("unexpected '", toks_[pos_].text, "'"));
    return absl::OkStatus();
  }

  // An expression, or a tuple when commas follow (as in {{ a, b }} or set x = 1, 2).
  absl::StatusOr<ExprPtr> ParseTuple(bool with_condexpr) {
    int line = this->line();
    TG_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(with_condexpr));
    if (!IsOp(",")) return first;
    ExprPtr tuple = MakeExpr(Expr::Kind::kTuple, line);
    tuple->args.push_back(std::move(first));
    while (IsOp(",")) {
      ++pos_;
      if (AtEnd()) break;
      TG_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(with_condexpr));
      tuple->args.push_back(std::move(item));
    }
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr = true) {
    if (!with_condexpr) return ParseOr();
    TG_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (IsName("if")) {
      int line = Next().line;
      TG_ASSIGN_OR_RETURN(ExprPtr cond, ParseOr());
      ExprPtr e = MakeExpr(Expr::Kind::kCondition, line);
      e->args.push_back(std::move(expr));
      e->args.push_back(std::move(cond));
      if (IsName("else")) {
        ++pos_;
        TG_ASSIGN_OR_RETURN(ExprPtr other, ParseExpression());
        e->args.push_back(std::move(other));
      } else {
        e->args.push_back(nullptr);
      }
      expr = std::move(e);
    }
    return expr;
  }

 private:
  absl::StatusOr<ExprPtr> ParseOr() {
    TG_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      int line = Next().line;
      TG_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      left = MakeBinary("or", std::move(left), std::move(right), line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    TG_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      int line = Next().line;
      TG_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      left = MakeBinary("and", std::move(left), std::move(right), line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      ExprPtr e = MakeExpr(Expr::Kind::kUnary, Next().line);
      e->name = "not";
      TG_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      e->args.push_back(std::move(operand));
      return e;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    int line = this->line();
    TG_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        ++pos_;
        op = "in";
      } else if (IsName("not") && pos_ + 1 < toks_.size() &&
                 toks_[pos_ + 1].kind == Token::Kind::kName && toks_[pos_ + 1].text == "in") {
        pos_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = MakeExpr(Expr::Kind::kCompare, line);
        cmp->args.push_back(std::move(first));
      }
      TG_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
      cmp->ops.push_back(std::move(op));
      cmp->args.push_back(std::move(operand));
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    TG_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const Token& op = Next();
      TG_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      left = MakeBinary(op.text, std::move(left), std::move(right), op.line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseConcat() {
    TG_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
    while (IsOp("~")) {
      int line = Next().line;
      TG_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
      left = MakeBinary("~", std::move(left), std::move(right), line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseMath2() {
    TG_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& op = Next();
      TG_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      left = MakeBinary(op.text, std::move(left), std::move(right), op.line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParsePow() {
    TG_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (IsOp("**")) {
      int line = Next().line;
      TG_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      left = MakeBinary("**", std::move(left), std::move(right), line);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const Token& op = Next();
      node = MakeExpr(Expr::Kind::kUnary, op.line);
      node->name = op.text;
      TG_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node->args.push_back(std::move(operand));
    } else {
      TG_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    TG_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) return ParseFilterExpr(std::move(node));
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    if (AtEnd()) return Unexpected("an expression");
    const Token& tok = Next();
    switch (tok.kind) {
      case Token::Kind::kName: {
        ExprPtr e = MakeExpr(Expr::Kind::kLiteral, tok.line);
        if (tok.text == "true" || tok.text == "True") {
          e->literal = Value::Bool(true);
        } else if (tok.text == "false" || tok.text == "False") {
          e->literal = Value::Bool(false);
        } else if (tok.text == "none" || tok.text == "None") {
          e->literal = Value::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = tok.text;
        }
        return e;
      }
      case Token::Kind::kString: {
        std::string s = tok.text;
        while (!AtEnd() && toks_[pos_].kind == Token::Kind::kString) s += Next().text;
        ExprPtr e = MakeExpr(Expr::Kind::kLiteral, tok.line);
        e->literal = Value::String(std::move(s));
        return e;
      }
      case Token::Kind::kInt: {
        ExprPtr e = MakeExpr(Expr::Kind::kLiteral, tok.line);
        e->literal = Value::Int(tok.int_value);
        return e;
      }
      case Token::Kind::kFloat: {
        ExprPtr e = MakeExpr(Expr::Kind::kLiteral, tok.line);
        e->literal = Value::Float(tok.float_value);
        return e;
      }
      case Token::Kind::kOperator:
        break;
    }
    if (tok.text == "(") return ParseParenthesized(tok.line);
    if (tok.text == "[" || tok.text == "{") return ParseCollection(tok.text == "{", tok.line);
    --pos_;
    return Unexpected("an expression");
  }

  absl::StatusOr<ExprPtr> ParseParenthesized(int line) {
    if (IsOp(")")) {
      ++pos_;
      return MakeExpr(Expr::Kind::kTuple, line);
    }
    TG_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression());
    if (IsOp(")")) {
      ++pos_;
      return first;
    }
    ExprPtr tuple = MakeExpr(Expr::Kind::kTuple, line);
    tuple->args.push_back(std::move(first));
    while (IsOp(",")) {
      ++pos_;
      if (IsOp(")")) break;
      TG_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
      tuple->args.push_back(std::move(item));
    }
    TG_RETURN_IF_ERROR(ExpectOp(")"));
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseCollection(bool is_dict, int line) {
    ExprPtr e = MakeExpr(is_dict ? Expr::Kind::kDict : Expr::Kind::kList, line);
    absl::string_view close = is_dict ? "}" : "]";
    while (!IsOp(close)) {
      if (!e->args.empty()) {
        TG_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(close)) break;
      }
      TG_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
      if (is_dict && item->kind == Expr::Kind::kLiteral && !item->literal.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", item->line, ": unsupported non-string dict key ", item->literal.Repr()));
      }
      e->args.push_back(std::move(item));
      if (is_dict) {
        TG_RETURN_IF_ERROR(ExpectOp(":"));
        TG_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        e->args.push_back(std::move(value));
      }
    }
    ++pos_;
    return e;
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".")) {
        int line = Next().line;
        if (!AtEnd() && toks_[pos_].kind == Token::Kind::kInt) {
          ExprPtr e = MakeExpr(Expr::Kind::kGetItem, line);
          e->args.push_back(std::move(node));
          ExprPtr index = MakeExpr(Expr::Kind::kLiteral, line);
          index->literal = Value::Int(Next().int_value);
          e->args.push_back(std::move(index));
          node = std::move(e);
          continue;
        }
        TG_ASSIGN_OR_RETURN(std::string attr, ExpectName());
        ExprPtr e = MakeExpr(Expr::Kind::kGetAttr, line);
        e->name = attr;
        e->args.push_back(std::move(node));
        node = std::move(e);
        if (IsOp("(") && !IsKnownMethod(attr)) {
          return Error(absl::StrCat("unsupported method '", attr, "'"));
        }
      } else if (IsOp("[")) {
        TG_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node), Next().line));
      } else if (IsOp("(")) {
        TG_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node, int line) {
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!IsOp("]")) {
      if (IsOp(":")) {
        ++pos_;
        if (++part > 2) return Error("too many ':' in a slice");
        is_slice = true;
        continue;
      }
      if (parts[part]) return Unexpected("']'");
      TG_ASSIGN_OR_RETURN(parts[part], ParseExpression());
    }
    ++pos_;
    ExprPtr e = MakeExpr(is_slice ? Expr::Kind::kSlice : Expr::Kind::kGetItem, line);
    e->args.push_back(std::move(node));
    if (!is_slice && !parts[0]) return Error("empty subscript []");
    for (int i = 0; i < (is_slice ? 3 : 1); ++i) e->args.push_back(std::move(parts[i]));
    return e;
  }

  // Reads "(a, b, k=v)" into e->args (after what is there) and e->kwargs.
  absl::Status ParseCallArgs(Expr* e) {
    TG_RETURN_IF_ERROR(ExpectOp("("));
    for (int parsed = 0; !IsOp(")"); ++parsed) {
      if (parsed > 0) {
        TG_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(")")) break;
      }
      if (IsOp("*") || IsOp("**")) return Error("unsupported *args or **kwargs in a call");
      if (IsAnyName() && pos_ + 1 < toks_.size() &&
          toks_[pos_ + 1].kind == Token::Kind::kOperator && toks_[pos_ + 1].text == "=") {
        e->kwarg_names.push_back(Next().text);
        ++pos_;
        TG_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        e->kwargs.push_back(std::move(value));
      } else {
        if (!e->kwargs.empty()) return Error("positional argument after a keyword argument");
        TG_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
        e->args.push_back(std::move(value));
      }
    }
    ++pos_;
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    ExprPtr e = MakeExpr(Expr::Kind::kCall, line());
    if (callee->kind == Expr::Kind::kName) calls_->emplace_back(callee->name, callee->line);
    e->args.push_back(std::move(callee));
    TG_RETURN_IF_ERROR(ParseCallArgs(e.get()));
    return e;
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        int line = Next().line;
        TG_ASSIGN_OR_RETURN(std::string name, ExpectName());
        if (!IsKnownFilter(name)) {
          return absl::InvalidArgumentError(
              absl::StrCat("line ", line, ": unknown filter '", name, "'"));
        }
        ExprPtr e = MakeExpr(Expr::Kind::kFilter, line);
        e->name = name;
        e->args.push_back(std::move(node));
        if (IsOp("(")) TG_RETURN_IF_ERROR(ParseCallArgs(e.get()));
        node = std::move(e);
      } else if (IsName("is")) {
        TG_ASSIGN_OR_RETURN(node, ParseTest(std::move(node), Next().line));
      } else if (IsOp("(")) {
        TG_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseTest(ExprPtr subject, int line) {
    ExprPtr e = MakeExpr(Expr::Kind::kTest, line);
    if (IsName("not")) {
      ++pos_;
      e->negated = true;
    }
    TG_ASSIGN_OR_RETURN(e->name, ExpectName());
    if (!IsKnownTest(e->name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line, ": unknown test '", e->name, "'"));
    }
    e->args.push_back(std::move(subject));
    if (IsOp("(")) {
      TG_RETURN_IF_ERROR(ParseCallArgs(e.get()));
    } else if (!AtEnd() && !IsName("else") && !IsName("or") && !IsName("and") &&
               (toks_[pos_].kind != Token::Kind::kOperator || IsOp("[") || IsOp("{"))) {
      if (IsName("is")) return Error("cannot chain tests with 'is'");
      TG_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
      TG_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      e->args.push_back(std::move(arg));
    }
    return e;
  }

  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  int line_;
  std::vector<std::pair<std::string, int>>* calls_;
};

absl::string_view StatementName(const Segment& seg) {
  if (seg.tokens.empty() || seg.tokens[0].kind != Token::Kind::kName) return "";
  return seg.tokens[0].text;
}

class TemplateParser {
 public:
  explicit TemplateParser(std::vector<Segment> segments) : segs_(std::move(segments)) {}

  absl::StatusOr<Body> Run() {
    std::string end;
    TG_ASSIGN_OR_RETURN(Body body, ParseBody({}, "", 0, &end));
    for (const auto& [name, line] : calls_) {
      if (!IsKnownGlobal(name) && !macros_.count(name) && name != "caller") {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", line, ": unknown function '", name, "'"));
      }
    }
    return body;
  }

 private:
  // Parses nodes until a statement named in `ends` (stored in *end, its segment left at i_).
  absl::StatusOr<Body> ParseBody(std::set<absl::string_view> ends, absl::string_view opener,
                                 int open_line, std::string* end) {
    Body body;
    while (i_ < segs_.size()) {
      const Segment& seg = segs_[i_];
      if (seg.kind == Segment::Kind::kText) {
        auto n = NewNode(Node::Kind::kText, seg.line);
        n->text = seg.text;
        body.push_back(std::move(n));
        ++i_;
        continue;
      }
      if (seg.kind == Segment::Kind::kExpression) {
        ExprParser p(seg.tokens, seg.line, &calls_);
        auto n = NewNode(Node::Kind::kOutput, seg.line);
        TG_ASSIGN_OR_RETURN(n->expr, p.ParseTuple(true));
        TG_RETURN_IF_ERROR(p.ExpectEnd());
        body.push_back(std::move(n));
        ++i_;
        continue;
      }
      absl::string_view name = StatementName(seg);
      if (ends.count(name)) {
        *end = std::string(name);
        return body;
      }
      TG_ASSIGN_OR_RETURN(NodePtr n, ParseStatement());
      body.push_back(std::move(n));
    }
    if (!ends.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("line ", open_line, ": unclosed {% ", opener,
                                                     " %} (expected {% ", *ends.rbegin(), " %})"));
    }
    return body;
  }

  static NodePtr NewNode(Node::Kind kind, int line) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = line;
    return n;
  }

  absl::StatusOr<NodePtr> ParseStatement() {
    const Segment& seg = segs_[i_++];
    std::string name(StatementName(seg));
    ExprParser p(seg.tokens, seg.line, &calls_);
    if (!name.empty()) p.Next();
    if (name == "if") return ParseIf(p, seg.line);
    if (name == "for") return ParseFor(p, seg.line);
    if (name == "set") return ParseSet(p, seg.line);
    if (name == "macro") return ParseMacro(p, seg.line);
    if (name == "call") return ParseCallBlock(p, seg.line);
    if (name == "break" || name == "continue") {
      TG_RETURN_IF_ERROR(p.ExpectEnd());
      return NewNode(name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, seg.line);
    }
    if (name == "filter") {
      std::vector<Token> tokens = seg.tokens;
      tokens[0].text = kFilterBlockVar;
      tokens.insert(tokens.begin() + 1, Token{Token::Kind::kOperator, "|", 0, 0, seg.line});
      ExprParser head(tokens, seg.line, &calls_);
      auto n = NewNode(Node::Kind::kFilterBlock, seg.line);
      TG_ASSIGN_OR_RETURN(n->expr, head.ParseExpression());
      TG_RETURN_IF_ERROR(head.ExpectEnd());
      TG_ASSIGN_OR_RETURN(n->body, ParseClosedBody("filter", "endfilter", seg.line));
      return n;
    }
    if (name == "generation") {
      TG_RETURN_IF_ERROR(p.ExpectEnd());
      auto n = NewNode(Node::Kind::kBlock, seg.line);
      TG_ASSIGN_OR_RETURN(n->body, ParseClosedBody("generation", "endgeneration", seg.line));
      return n;
    }
    bool stray = name == "elif" || name == "else" || name.rfind("end", 0) == 0;
    return absl::InvalidArgumentError(
        absl::StrCat("line ", seg.line, stray ? ": unexpected {% " : ": unsupported statement {% ",
                     name, " %}"));
  }

  // Parses a body ending with {% end %} (which must be bare), consuming it.
  absl::StatusOr<Body> ParseClosedBody(absl::string_view opener, absl::string_view end_name,
                                       int line) {
    std::string end;
    TG_ASSIGN_OR_RETURN(Body body, ParseBody({end_name}, opener, line, &end));
    TG_RETURN_IF_ERROR(ExpectBareEnd());
    return body;
  }

  absl::Status ExpectBareEnd() {
    const Segment& seg = segs_[i_++];
    if (seg.tokens.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", seg.line, ": unexpected '", seg.tokens[1].text, "'"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<NodePtr> ParseIf(ExprParser& p, int line) {
    auto n = NewNode(Node::Kind::kIf, line);
    IfBranch branch;
    TG_ASSIGN_OR_RETURN(branch.condition, p.ParseTuple(false));
    TG_RETURN_IF_ERROR(p.ExpectEnd());
    while (true) {
      std::string end;
      TG_ASSIGN_OR_RETURN(branch.body, ParseBody({"elif", "else", "endif"}, "if", line, &end));
      n->branches.push_back(std::move(branch));
      const Segment& seg = segs_[i_++];
      ExprParser q(seg.tokens, seg.line, &calls_);
      q.Next();
      if (end == "endif") {
        TG_RETURN_IF_ERROR(q.ExpectEnd());
        return n;
      }
      branch = IfBranch();
      if (end == "elif") {
        TG_ASSIGN_OR_RETURN(branch.condition, q.ParseTuple(false));
      }
      TG_RETURN_IF_ERROR(q.ExpectEnd());
      if (end == "else") {
        TG_ASSIGN_OR_RETURN(branch.body, ParseClosedBody("if", "endif", line));
        n->branches.push_back(std::move(branch));
        return n;
      }
    }
  }

  absl::StatusOr<NodePtr> ParseFor(ExprParser& p, int line) {
    auto n = NewNode(Node::Kind::kFor, line);
    bool parenthesized = p.IsOp("(");
    if (parenthesized) p.Next();
    do {
      if (!n->targets.empty()) p.Next();
      TG_ASSIGN_OR_RETURN(std::string target, p.ExpectName());
      n->targets.push_back(target);
    } while (p.IsOp(","));
    if (parenthesized) TG_RETURN_IF_ERROR(p.ExpectOp(")"));
    if (!p.IsName("in")) return p.Unexpected("'in'");
    p.Next();
    TG_ASSIGN_OR_RETURN(n->expr, p.ParseTuple(false));
    if (p.IsName("if")) {
      p.Next();
      TG_ASSIGN_OR_RETURN(n->filter, p.ParseExpression());
    }
    if (p.IsName("recursive")) return p.Error("unsupported recursive for loop");
    TG_RETURN_IF_ERROR(p.ExpectEnd());
    std::string end;
    TG_ASSIGN_OR_RETURN(n->body, ParseBody({"else", "endfor"}, "for", line, &end));
    if (end == "else") {
      TG_RETURN_IF_ERROR(ExpectBareEnd());
      TG_ASSIGN_OR_RETURN(n->else_body, ParseClosedBody("for", "endfor", line));
    } else {
      TG_RETURN_IF_ERROR(ExpectBareEnd());
    }
    return n;
  }

  absl::StatusOr<NodePtr> ParseSet(ExprParser& p, int line) {
    auto n = NewNode(Node::Kind::kSet, line);
    TG_ASSIGN_OR_RETURN(std::string first, p.ExpectName());
    n->targets.push_back(first);
    if (p.IsOp(".")) {
      p.Next();
      TG_ASSIGN_OR_RETURN(n->attribute, p.ExpectName());
    } else {
      while (p.IsOp(",")) {
        p.Next();
        TG_ASSIGN_OR_RETURN(std::string target, p.ExpectName());
        n->targets.push_back(target);
      }
    }
    if (p.AtEnd() && n->targets.size() == 1 && n->attribute.empty()) {
      n->kind = Node::Kind::kSetBlock;
      TG_ASSIGN_OR_RETURN(n->body, ParseClosedBody("set", "endset", line));
      return n;
    }
    if (p.IsOp("|")) return p.Error("unsupported filter on a {% set %} block");
    TG_RETURN_IF_ERROR(p.ExpectOp("="));
    TG_ASSIGN_OR_RETURN(n->expr, p.ParseTuple(true));
    TG_RETURN_IF_ERROR(p.ExpectEnd());
    return n;
  }

  absl::Status ParseParams(ExprParser& p, std::vector<Param>* params) {
    TG_RETURN_IF_ERROR(p.ExpectOp("("));
    while (!p.IsOp(")")) {
      if (!params->empty()) TG_RETURN_IF_ERROR(p.ExpectOp(","));
      Param param;
      TG_ASSIGN_OR_RETURN(param.name, p.ExpectName());
      if (p.IsOp("=")) {
        p.Next();
        TG_ASSIGN_OR_RETURN(param.default_value, p.ParseExpression());
      }
      params->push_back(std::move(param));
    }
    p.Next();
    return absl::OkStatus();
  }

  absl::StatusOr<NodePtr> ParseMacro(ExprParser& p, int line) {
    auto n = NewNode(Node::Kind::kMacro, line);
    TG_ASSIGN_OR_RETURN(n->text, p.ExpectName());
    macros_.insert(n->text);
    TG_RETURN_IF_ERROR(ParseParams(p, &n->params));
    TG_RETURN_IF_ERROR(p.ExpectEnd());
    TG_ASSIGN_OR_RETURN(n->body, ParseClosedBody("macro", "endmacro", line));
    return n;
  }

  absl::StatusOr<NodePtr> ParseCallBlock(ExprParser& p, int line) {
    auto n = NewNode(Node::Kind::kCallBlock, line);
    if (p.IsOp("(")) TG_RETURN_IF_ERROR(ParseParams(p, &n->params));
    TG_ASSIGN_OR_RETURN(n->expr, p.ParseExpression());
    if (n->expr->kind != Expr::Kind::kCall) return p.Error("{% call %} needs a call expression");
    TG_RETURN_IF_ERROR(p.ExpectEnd());
    TG_ASSIGN_OR_RETURN(n->body, ParseClosedBody("call", "endcall", line));
    return n;
  }

  std::vector<Segment> segs_;
  size_t i_ = 0;
  std::vector<std::pair<std::string, int>> calls_;
  std::set<std::string> macros_;
};

}  // namespace

absl::StatusOr<Body> ParseTemplate(absl::string_view source) {
  TG_ASSIGN_OR_RETURN(std::vector<Segment> segments, Lex(source));
  return TemplateParser(std::move(segments)).Run();
}

}  // namespace tg::chat_template
