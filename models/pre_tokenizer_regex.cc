// The split-pattern matcher of the BPE pre-tokenizers; see pre_tokenizer_regex.h. A pattern
// parses into a tree of nodes (classes, sequences, alternations, repeats, lookaheads, $),
// matched by recursive backtracking with continuations: each node calls the rest of the
// pattern on every end it can reach, in ECMAScript's order of preference, and the first
// continuation that succeeds decides the match.
#include "models/pre_tokenizer_regex.h"

#include <bitset>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "models/unicode.h"

namespace tg {
namespace pre_tokenizer_regex_internal {

constexpr uint32_t kAsciiLimit = 128;
constexpr uint32_t kVerticalTab = 0x0B;

// ASCII \s, the only whitespace left once non-ASCII spaces are matched as U+000B.
bool IsAsciiSpace(uint32_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
bool IsAsciiDigit(uint32_t c) { return c >= '0' && c <= '9'; }
bool IsAsciiWord(uint32_t c) {
  return IsAsciiDigit(c) || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// A set of codepoints: [...] or [^...], a class escape, '.', or one literal.
struct CharClass {
  bool negated = false;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive.
  uint16_t categories = 0;                            // bits 1 << CodepointClass.
  bool space = false, not_space = false, digit = false, not_digit = false, word = false,
       not_word = false;
  // Filled by Finalize: membership of every ASCII codepoint (negation applied), and whether
  // the escapes alone take every non-ASCII codepoint (\S, \D and \W do).
  std::bitset<kAsciiLimit> ascii;
  bool all_non_ascii = false;

  bool InRanges(uint32_t c) const {
    for (const auto& [lo, hi] : ranges) {
      if (lo <= c && c <= hi) return true;
    }
    return false;
  }
  bool InCategories(CodepointClass cls) const { return (categories >> static_cast<int>(cls)) & 1; }
  void Finalize() {
    for (uint32_t c = 0; c < kAsciiLimit; ++c) {
      const bool in = InRanges(c) || InCategories(GetCodepointClass(c)) ||
                      (space && IsAsciiSpace(c)) || (not_space && !IsAsciiSpace(c)) ||
                      (digit && IsAsciiDigit(c)) || (not_digit && !IsAsciiDigit(c)) ||
                      (word && IsAsciiWord(c)) || (not_word && !IsAsciiWord(c));
      ascii[c] = in != negated;
    }
    all_non_ascii = not_space || not_digit || not_word;
  }
  // `c` as matched (non-ASCII spaces already U+000B) and its category.
  bool Has(uint32_t c, CodepointClass cls) const {
    if (c < kAsciiLimit) return ascii[c];
    const bool in = all_non_ascii || InCategories(cls) || InRanges(c);
    return in != negated;
  }
};

struct Node {
  enum class Kind { kClass, kSeq, kAlt, kRepeat, kLookahead, kEnd };
  Kind kind = Kind::kSeq;
  CharClass cls;           // kClass.
  std::vector<Node> kids;  // kSeq, kAlt: the parts; kRepeat, kLookahead: the one operand.
  int min = 0, max = -1;   // kRepeat; max -1: unbounded.
  bool greedy = true;      // kRepeat.
  bool negative = false;   // kLookahead: (?!...).
};

namespace {

constexpr int kMaxRepeat = 1 << 16;

class Parser {
 public:
  explicit Parser(absl::string_view pattern) : pattern_(pattern), p_(DecodeUtf8Lenient(pattern)) {}

  absl::StatusOr<Node> Parse() {
    TG_ASSIGN_OR_RETURN(Node root, ParseAlternatives());
    if (i_ < p_.size()) return Error("unbalanced ')'");
    return root;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("pre-tokenizer regex \"", pattern_, "\" at codepoint ", i_, ": ", what));
  }
  bool AtEnd() const { return i_ >= p_.size(); }
  bool Next(uint32_t c) const { return i_ < p_.size() && p_[i_] == c; }

  absl::StatusOr<Node> ParseAlternatives() {
    Node alt;
    alt.kind = Node::Kind::kAlt;
    while (true) {
      TG_ASSIGN_OR_RETURN(Node seq, ParseSequence());
      alt.kids.push_back(std::move(seq));
      if (!Next('|')) break;
      ++i_;
    }
    if (alt.kids.size() == 1) return std::move(alt.kids[0]);
    return alt;
  }

  absl::StatusOr<Node> ParseSequence() {
    Node seq;
    seq.kind = Node::Kind::kSeq;
    while (!AtEnd() && !Next('|') && !Next(')')) {
      TG_ASSIGN_OR_RETURN(Node atom, ParseAtom());
      TG_ASSIGN_OR_RETURN(atom, ParseQuantifier(std::move(atom)));
      seq.kids.push_back(std::move(atom));
    }
    if (seq.kids.size() == 1) return std::move(seq.kids[0]);
    return seq;
  }

  static Node ClassNode(CharClass cls) {
    cls.Finalize();
    Node n;
    n.kind = Node::Kind::kClass;
    n.cls = std::move(cls);
    return n;
  }

  absl::StatusOr<Node> ParseAtom() {
    const uint32_t c = p_[i_++];
    switch (c) {
      case '(': {
        Node group;
        bool lookahead = false;
        if (Next('?')) {
          ++i_;
          if (Next(':')) {
            ++i_;
          } else if (Next('=') || Next('!')) {
            lookahead = true;
            group.negative = Next('!');
            ++i_;
          } else {
            return Error("only (?:...), (?=...) and (?!...) groups are supported");
          }
        }
        TG_ASSIGN_OR_RETURN(Node inner, ParseAlternatives());
        if (!Next(')')) return Error("missing ')'");
        ++i_;
        if (!lookahead) return inner;
        group.kind = Node::Kind::kLookahead;
        group.kids.push_back(std::move(inner));
        return group;
      }
      case '[':
        return ParseClass();
      case '\\': {
        CharClass cls;
        TG_ASSIGN_OR_RETURN(std::optional<uint32_t> single, ParseEscape(/*in_class=*/false, &cls));
        if (single) cls.ranges.push_back({*single, *single});
        return ClassNode(std::move(cls));
      }
      case '.': {  // anything but a line terminator.
        CharClass cls;
        cls.negated = true;
        cls.ranges = {{'\n', '\n'}, {'\r', '\r'}};
        return ClassNode(std::move(cls));
      }
      case '$': {
        Node end;
        end.kind = Node::Kind::kEnd;
        return end;
      }
      case '^':
        --i_;
        return Error("'^' is not supported");
      case '*':
      case '+':
      case '?':
      case '{':
        --i_;
        return Error("nothing to repeat");
      default: {
        CharClass cls;
        cls.ranges.push_back({c, c});
        return ClassNode(std::move(cls));
      }
    }
  }

  // A decimal count of a {n,m} quantifier.
  absl::StatusOr<int> ParseCount() {
    if (AtEnd() || !IsAsciiDigit(p_[i_])) return Error("expected a count in {}");
    int n = 0;
    while (!AtEnd() && IsAsciiDigit(p_[i_])) {
      n = n * 10 + static_cast<int>(p_[i_++] - '0');
      if (n > kMaxRepeat) return Error(absl::StrCat("a count above ", kMaxRepeat));
    }
    return n;
  }

  absl::StatusOr<Node> ParseQuantifier(Node atom) {
    if (AtEnd()) return atom;
    int min = 0, max = -1;
    switch (p_[i_]) {
      case '?':
        max = 1;
        break;
      case '*':
        break;
      case '+':
        min = 1;
        break;
      case '{': {
        ++i_;
        TG_ASSIGN_OR_RETURN(min, ParseCount());
        max = min;
        if (Next(',')) {
          ++i_;
          max = -1;
          if (!Next('}')) {
            TG_ASSIGN_OR_RETURN(max, ParseCount());
            if (max < min) return Error("{n,m} with m < n");
          }
        }
        if (!Next('}')) return Error("missing '}'");
        break;
      }
      default:
        return atom;
    }
    ++i_;
    if (atom.kind == Node::Kind::kEnd || atom.kind == Node::Kind::kLookahead) {
      return Error("a quantified assertion");
    }
    Node rep;
    rep.kind = Node::Kind::kRepeat;
    rep.min = min;
    rep.max = max;
    if (Next('?')) {
      rep.greedy = false;
      ++i_;
    }
    rep.kids.push_back(std::move(atom));
    return rep;
  }

  static absl::StatusOr<CodepointClass> Category(absl::string_view name) {
    if (name == "L") return CodepointClass::kLetter;
    if (name == "N") return CodepointClass::kNumber;
    if (name == "P") return CodepointClass::kPunctuation;
    if (name == "S") return CodepointClass::kSymbol;
    if (name == "M") return CodepointClass::kMark;
    return absl::InvalidArgumentError(absl::StrCat("\\p{", name, "}"));
  }

  absl::StatusOr<uint32_t> ParseHex(int digits) {
    uint32_t v = 0;
    for (int d = 0; d < digits; ++d, ++i_) {
      if (AtEnd()) return Error("a truncated hex escape");
      const uint32_t c = p_[i_];
      const int x = IsAsciiDigit(c)          ? static_cast<int>(c - '0')
                    : (c >= 'a' && c <= 'f') ? static_cast<int>(c - 'a' + 10)
                    : (c >= 'A' && c <= 'F') ? static_cast<int>(c - 'A' + 10)
                                             : -1;
      if (x < 0) return Error("a bad hex digit");
      v = v * 16 + static_cast<uint32_t>(x);
    }
    return v;
  }

  // The escape after a backslash: adds a class escape to `cls` and returns nullopt, or returns
  // the one codepoint it stands for.
  absl::StatusOr<std::optional<uint32_t>> ParseEscape(bool in_class, CharClass* cls) {
    if (AtEnd()) return Error("a trailing backslash");
    const uint32_t c = p_[i_++];
    switch (c) {
      case 'p': {
        if (!Next('{')) return Error("\\p without {category}");
        std::string name;
        for (++i_; !AtEnd() && !Next('}'); ++i_) AppendUtf8(p_[i_], &name);
        if (AtEnd()) return Error("missing '}' of \\p{");
        ++i_;
        auto cat = Category(name);
        if (!cat.ok()) {
          return Error(absl::StrCat("\\p{", name, "} is not supported (only L, N, P, S, M)"));
        }
        cls->categories |= 1u << static_cast<int>(*cat);
        return std::nullopt;
      }
      case 's':
        cls->space = true;
        return std::nullopt;
      case 'S':
        cls->not_space = true;
        return std::nullopt;
      case 'd':
        cls->digit = true;
        return std::nullopt;
      case 'D':
        cls->not_digit = true;
        return std::nullopt;
      case 'w':
        cls->word = true;
        return std::nullopt;
      case 'W':
        cls->not_word = true;
        return std::nullopt;
      case 'r':
        return '\r';
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'f':
        return '\f';
      case 'v':
        return kVerticalTab;
      case '0':
        return 0;
      case 'x':
        return ParseHex(2);
      case 'u':
        return ParseHex(4);
      case 'b':
        if (in_class) return '\b';
        break;
      default:
        if (!IsAsciiWord(c)) return c;  // escaped punctuation, or any non-ASCII codepoint.
        break;
    }
    --i_;
    return Error(
        absl::StrCat("escape \\", std::string(1, static_cast<char>(c)), " is not supported"));
  }

  absl::StatusOr<Node> ParseClass() {
    CharClass cls;
    if (Next('^')) {
      cls.negated = true;
      ++i_;
    }
    if (Next(']')) return Error("an empty class");
    while (true) {
      if (AtEnd()) return Error("missing ']'");
      if (Next(']')) break;
      TG_ASSIGN_OR_RETURN(std::optional<uint32_t> lo, ParseClassAtom(&cls));
      if (!lo) continue;
      // A range, unless the '-' is the class's last character.
      if (Next('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        TG_ASSIGN_OR_RETURN(std::optional<uint32_t> hi, ParseClassAtom(&cls));
        if (!hi) return Error("a range ending in a class escape");
        if (*hi < *lo) return Error("a range out of order");
        cls.ranges.push_back({*lo, *hi});
      } else {
        cls.ranges.push_back({*lo, *lo});
      }
    }
    ++i_;  // ']'
    return ClassNode(std::move(cls));
  }

  absl::StatusOr<std::optional<uint32_t>> ParseClassAtom(CharClass* cls) {
    const uint32_t c = p_[i_++];
    if (c == '\\') return ParseEscape(/*in_class=*/true, cls);
    if (c == '[') return Error("nested '[' is not supported");
    return c;
  }

  absl::string_view pattern_;
  std::vector<uint32_t> p_;
  size_t i_ = 0;
};

// Matches nodes against one piece: text[pos] for pos < end (codepoints as matched, with
// their categories).
class Matcher {
 public:
  using Continuation = absl::FunctionRef<bool(size_t)>;

  Matcher(const uint32_t* text, const CodepointClass* cls, size_t end)
      : text_(text), cls_(cls), end_(end) {}

  bool HasAt(const CharClass& c, size_t pos) const {
    return pos < end_ && c.Has(text_[pos], cls_[pos]);
  }

  // Matches `n` at pos and calls `k` with each end it reaches, most preferred first; true as
  // soon as `k` is.
  bool Match(const Node& n, size_t pos, Continuation k) const {
    switch (n.kind) {
      case Node::Kind::kClass:
        return HasAt(n.cls, pos) && k(pos + 1);
      case Node::Kind::kSeq:
        return MatchSequence(n.kids, 0, pos, k);
      case Node::Kind::kAlt:
        for (const Node& alt : n.kids) {
          if (Match(alt, pos, k)) return true;
        }
        return false;
      case Node::Kind::kRepeat:
        if (n.kids[0].kind == Node::Kind::kClass) return MatchClassRepeat(n, pos, k);
        return MatchRepeat(n, 0, pos, k);
      case Node::Kind::kLookahead: {
        const bool found = Match(n.kids[0], pos, [](size_t) { return true; });
        return found != n.negative && k(pos);
      }
      case Node::Kind::kEnd:
        return pos == end_ && k(pos);
    }
    return false;
  }

 private:
  bool MatchSequence(const std::vector<Node>& seq, size_t i, size_t pos, Continuation k) const {
    if (i == seq.size()) return k(pos);
    return Match(seq[i], pos, [&](size_t next) { return MatchSequence(seq, i + 1, next, k); });
  }

  // A repeated single class: the run is counted once, then the continuation tries each
  // length (longest first when greedy).
  bool MatchClassRepeat(const Node& n, size_t pos, Continuation k) const {
    const size_t max = n.max < 0 ? end_ - pos : static_cast<size_t>(n.max);
    size_t run = 0;
    while (run < max && HasAt(n.kids[0].cls, pos + run)) ++run;
    const size_t min = static_cast<size_t>(n.min);
    if (run < min) return false;
    if (n.greedy) {
      for (size_t len = run + 1; len-- > min;) {
        if (k(pos + len)) return true;
      }
    } else {
      for (size_t len = min; len <= run; ++len) {
        if (k(pos + len)) return true;
      }
    }
    return false;
  }

  // The general repeat, `count` iterations done; an iteration that matched nothing once the
  // minimum is met does not count (ECMAScript's rule against empty loops).
  bool MatchRepeat(const Node& n, int count, size_t pos, Continuation k) const {
    auto once_more = [&] {
      if (n.max >= 0 && count >= n.max) return false;
      return Match(n.kids[0], pos, [&](size_t next) {
        return (next != pos || count < n.min) && MatchRepeat(n, count + 1, next, k);
      });
    };
    if (count < n.min) return once_more();
    if (n.greedy) return once_more() || k(pos);
    return k(pos) || once_more();
  }

  const uint32_t* text_;
  const CodepointClass* cls_;
  size_t end_;
};

// The text as the matcher sees it: non-ASCII spaces as U+000B, and each codepoint's class.
struct MatchText {
  std::vector<uint32_t> cpts;
  std::vector<CodepointClass> cls;
};

MatchText Prepare(absl::Span<const uint32_t> text) {
  MatchText t;
  t.cpts.assign(text.begin(), text.end());
  t.cls.resize(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (t.cpts[i] >= kAsciiLimit && IsWhitespace(t.cpts[i])) t.cpts[i] = kVerticalTab;
    t.cls[i] = GetCodepointClass(t.cpts[i]);
  }
  return t;
}

// The class of an unbounded repeat the pattern starts with (\s+$, \p{L}*x), or null. A
// match that fails from a position in a run of that class fails from every later position of
// the run as well: those try a subset of the same run ends, and what follows the run sees
// only where it ends. The search skips them, which keeps \s+$ linear over long spaces.
const CharClass* LeadingRunClass(const Node& root) {
  const Node* first = &root;
  if (first->kind == Node::Kind::kSeq) first = &first->kids[0];
  if (first->kind != Node::Kind::kRepeat || first->max >= 0 ||
      first->kids[0].kind != Node::Kind::kClass) {
    return nullptr;
  }
  return &first->kids[0].cls;
}

std::optional<size_t> MatchEnd(const Node& root, const Matcher& m, size_t pos) {
  size_t end = 0;
  if (!m.Match(root, pos, [&end](size_t e) {
        end = e;
        return true;
      })) {
    return std::nullopt;
  }
  return end;
}

}  // namespace
}  // namespace pre_tokenizer_regex_internal

using pre_tokenizer_regex_internal::Matcher;
using pre_tokenizer_regex_internal::MatchText;
using pre_tokenizer_regex_internal::Node;
using pre_tokenizer_regex_internal::Parser;

PreTokenizerRegex::PreTokenizerRegex(std::string pattern, std::unique_ptr<Node> root)
    : pattern_(std::move(pattern)), root_(std::move(root)) {}
PreTokenizerRegex::PreTokenizerRegex(PreTokenizerRegex&&) noexcept = default;
PreTokenizerRegex& PreTokenizerRegex::operator=(PreTokenizerRegex&&) noexcept = default;
PreTokenizerRegex::~PreTokenizerRegex() = default;

absl::StatusOr<PreTokenizerRegex> PreTokenizerRegex::Compile(absl::string_view pattern) {
  TG_ASSIGN_OR_RETURN(Node root, Parser(pattern).Parse());
  return PreTokenizerRegex(std::string(pattern), std::make_unique<Node>(std::move(root)));
}

std::vector<size_t> PreTokenizerRegex::Split(absl::Span<const uint32_t> cpts,
                                             absl::Span<const size_t> pieces) const {
  const MatchText t = pre_tokenizer_regex_internal::Prepare(cpts);
  const pre_tokenizer_regex_internal::CharClass* lead =
      pre_tokenizer_regex_internal::LeadingRunClass(*root_);
  std::vector<size_t> out;
  out.reserve(pieces.size());
  size_t start = 0;
  for (size_t len : pieces) {
    const size_t end = start + len;
    const Matcher m(t.cpts.data(), t.cls.data(), end);
    size_t prev = start;  // end of the last match: text from here on is not yet a piece.
    for (size_t from = start; from < end;) {
      // The leftmost match at or after `from`.
      std::optional<size_t> match_end;
      size_t at = from;
      while (at < end) {
        if ((match_end = pre_tokenizer_regex_internal::MatchEnd(*root_, m, at))) break;
        if (lead != nullptr && m.HasAt(*lead, at)) {
          while (m.HasAt(*lead, at)) ++at;
        } else {
          ++at;
        }
      }
      if (!match_end) break;
      if (*match_end == at) {  // empty: no piece, search on after it.
        from = at + 1;
        continue;
      }
      if (at > prev) out.push_back(at - prev);
      out.push_back(*match_end - at);
      prev = from = *match_end;
    }
    if (end > prev) out.push_back(end - prev);
    start = end;
  }
  return out;
}

std::optional<size_t> PreTokenizerRegex::MatchAt(absl::Span<const uint32_t> cpts,
                                                 size_t pos) const {
  const MatchText t = pre_tokenizer_regex_internal::Prepare(cpts);
  return pre_tokenizer_regex_internal::MatchEnd(
      *root_, Matcher(t.cpts.data(), t.cls.data(), t.cpts.size()), pos);
}

}  // namespace tg
