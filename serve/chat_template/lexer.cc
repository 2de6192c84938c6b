#include "serve/chat_template/lexer.h"

#include <cctype>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "serve/chat_template/py_string.h"

namespace tg::chat_template {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Decodes Python's unicode-escape sequences, as jinja2 does for string literals; an unknown
// escape keeps its backslash.
std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out.push_back(s[i]);
      continue;
    }
    char c = s[++i];
    auto hex = [&](int n) -> bool {
      if (i + n >= s.size()) return false;
      std::string digits(s.substr(i + 1, n));
      for (char d : digits) {
        if (!std::isxdigit(static_cast<unsigned char>(d))) return false;
      }
      AppendUtf8(static_cast<uint32_t>(std::strtoul(digits.c_str(), nullptr, 16)), &out);
      i += n;
      return true;
    };
    switch (c) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case '\\':
      case '\'':
      case '"':
        out.push_back(c);
        break;
      case '\n':
        break;  // a backslash-newline continues the line.
      case 'x':
        if (!hex(2)) out += "\\x";
        break;
      case 'u':
        if (!hex(4)) out += "\\u";
        break;
      case 'U':
        if (!hex(8)) out += "\\U";
        break;
      default:
        if (c >= '0' && c <= '7') {
          uint32_t v = 0;
          int n = 0;
          while (n < 3 && i < s.size() && s[i] >= '0' && s[i] <= '7')
            v = v * 8 + (s[i++] - '0'), ++n;
          --i;
          AppendUtf8(v, &out);
        } else {
          out.push_back('\\');
          out.push_back(c);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  absl::StatusOr<std::vector<Segment>> Run() {
    size_t pos = 0;
    while (pos < src_.size()) {
      size_t tag = FindTag(pos);
      if (tag == std::string::npos) {
        EmitText(src_.substr(pos), LineAt(pos));
        break;
      }
      char type = src_[tag + 1];
      size_t after = tag + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      EmitText(StripBefore(src_.substr(pos, tag - pos), sign, type), LineAt(pos));
      absl::StatusOr<size_t> end;
      if (type == '#') {
        end = SkipComment(tag, after);
      } else if (type == '%' && IsRaw(after)) {
        end = LexRaw(tag);
      } else {
        end = LexTag(tag, after, type);
      }
      if (!end.ok()) return end.status();
      pos = *end;
      line_starting_ = pos > 0 && src_[pos - 1] == '\n';
    }
    return std::move(segments_);
  }

 private:
  size_t FindTag(size_t from) const {
    for (size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) {
        return p;
      }
    }
    return std::string::npos;
  }

  int LineAt(size_t pos) {
    if (pos < line_pos_) line_pos_ = 0, line_ = 1;
    for (; line_pos_ < pos && line_pos_ < src_.size(); ++line_pos_)
      line_ += src_[line_pos_] == '\n';
    return line_;
  }

  // The whitespace control of the text before a tag (jinja2's OptionalLStrip).
  std::string StripBefore(std::string text, char sign, char type) const {
    if (sign == '-') return PyStrip(text, std::nullopt, false, true);
    if (sign == '+' || type == '{') return text;
    size_t l_pos = text.rfind('\n');
    l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
    if ((l_pos > 0 || line_starting_) && text.size() > l_pos) {
      bool blank = true;
      for (size_t i = l_pos; i < text.size(); ++i) blank = blank && PyIsSpace(text[i]);
      if (blank) text.resize(l_pos);
    }
    return text;
  }

  void EmitText(std::string text, int line) {
    if (text.empty()) return;
    segments_.push_back(Segment{Segment::Kind::kText, std::move(text), {}, line});
  }

  size_t SkipSpace(size_t p) const {
    while (p < src_.size() && PyIsSpace(src_[p])) ++p;
    return p;
  }

  absl::StatusOr<size_t> SkipComment(size_t tag, size_t after) {
    size_t j = src_.find("#}", after);
    if (j == std::string::npos) return Error(tag, "unclosed comment {# ... #}");
    size_t end = j + 2;
    if (j > after && src_[j - 1] == '-') return SkipSpace(end);
    if (j > after && src_[j - 1] == '+') return end;
    return end < src_.size() && src_[end] == '\n' ? end + 1 : end;
  }

  // Whether the statement tag starting at `after` is {% raw %}.
  bool IsRaw(size_t after) const {
    size_t p = SkipSpace(after);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p = SkipSpace(p + 3);
    return src_.compare(p, 2, "%}") == 0 || src_.compare(p, 3, "-%}") == 0;
  }

  absl::StatusOr<size_t> LexRaw(size_t tag) {
    size_t p = src_.find("%}", tag);
    bool strip = src_[p - 1] == '-';
    size_t body = strip ? SkipSpace(p + 2) : p + 2;
    line_starting_ = src_[body - 1] == '\n';
    for (size_t q = src_.find("{%", body); q != std::string::npos; q = src_.find("{%", q + 1)) {
      size_t r = q + 2;
      char sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) sign = src_[r++];
      r = SkipSpace(r);
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r = SkipSpace(r + 6);
      size_t end;
      if (src_.compare(r, 3, "+%}") == 0) {
        end = r + 3;
      } else if (src_.compare(r, 3, "-%}") == 0) {
        end = SkipSpace(r + 3);
      } else if (src_.compare(r, 2, "%}") == 0) {
        end = r + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      EmitText(StripBefore(src_.substr(body, q - body), sign, '%'), LineAt(body));
      return end;
    }
    return Error(tag, "unclosed {% raw %} (no {% endraw %})");
  }

  // The end of the tag at `p` when the brackets are balanced, or npos.
  size_t TagEnd(size_t p, char type) const {
    if (type == '%') {
      if (src_.compare(p, 3, "+%}") == 0) return p + 3;
      if (src_.compare(p, 3, "-%}") == 0) return SkipSpace(p + 3);
      if (src_.compare(p, 2, "%}") == 0) {
        return p + 2 < src_.size() && src_[p + 2] == '\n' ? p + 3 : p + 2;
      }
      return std::string::npos;
    }
    if (src_.compare(p, 3, "-}}") == 0) return SkipSpace(p + 3);
    if (src_.compare(p, 2, "}}") == 0) return p + 2;
    return std::string::npos;
  }

  absl::StatusOr<size_t> LexTag(size_t tag, size_t p, char type) {
    Segment seg{
        type == '{' ? Segment::Kind::kExpression : Segment::Kind::kStatement, "", {}, LineAt(tag)};
    std::string brackets;
    while (true) {
      p = SkipSpace(p);
      if (brackets.empty()) {
        if (size_t end = TagEnd(p, type); end != std::string::npos) {
          segments_.push_back(std::move(seg));
          return end;
        }
      }
      if (p >= src_.size()) {
        return Error(tag, type == '{' ? "unclosed expression {{ ... }}" : "unclosed tag {% ... %}");
      }
      absl::StatusOr<size_t> next = LexToken(p, &brackets, &seg.tokens);
      if (!next.ok()) return next.status();
      p = *next;
    }
  }

  absl::StatusOr<size_t> LexToken(size_t p, std::string* brackets, std::vector<Token>* out) {
    Token tok{Token::Kind::kOperator, "", 0, 0, LineAt(p)};
    char c = src_[p];
    if (IsDigit(c)) {
      size_t q = p;
      while (q < src_.size() && (IsDigit(src_[q]) || src_[q] == '_')) ++q;
      bool is_float = false;
      bool after_dot = p > 0 && src_[p - 1] == '.';
      if (!after_dot && q + 1 < src_.size() && src_[q] == '.' && IsDigit(src_[q + 1])) {
        is_float = true;
        for (++q; q < src_.size() && (IsDigit(src_[q]) || src_[q] == '_');) ++q;
      }
      if (!after_dot && q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
        size_t e = q + 1;
        if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
        if (e < src_.size() && IsDigit(src_[e])) {
          is_float = true;
          for (q = e; q < src_.size() && IsDigit(src_[q]);) ++q;
        }
      }
      std::string digits;
      for (size_t i = p; i < q; ++i) {
        if (src_[i] != '_') digits.push_back(src_[i]);
      }
      tok.kind = is_float ? Token::Kind::kFloat : Token::Kind::kInt;
      tok.text = digits;
      if (is_float) {
        tok.float_value = std::strtod(digits.c_str(), nullptr);
      } else {
        tok.int_value = std::strtoll(digits.c_str(), nullptr, 10);
      }
      out->push_back(std::move(tok));
      return q;
    }
    if (IsNameStart(c)) {
      size_t q = p;
      while (q < src_.size() && IsNameChar(src_[q])) ++q;
      tok.kind = Token::Kind::kName;
      tok.text = src_.substr(p, q - p);
      out->push_back(std::move(tok));
      return q;
    }
    if (c == '\'' || c == '"') {
      size_t q = p + 1;
      while (q < src_.size() && src_[q] != c) q += src_[q] == '\\' ? 2 : 1;
      if (q >= src_.size()) return Error(p, "unterminated string literal");
      tok.kind = Token::Kind::kString;
      tok.text = Unescape(absl::string_view(src_).substr(p + 1, q - p - 1));
      out->push_back(std::move(tok));
      return q + 1;
    }
    static constexpr absl::string_view kTwoCharOps[] = {"//", "**", "==", "!=", "<=", ">="};
    for (absl::string_view op : kTwoCharOps) {
      if (src_.compare(p, 2, op.data(), op.size()) == 0) {
        tok.text = std::string(op);
        out->push_back(std::move(tok));
        return p + 2;
      }
    }
    if (absl::string_view("+-*/%~<>=.,:|()[]{};").find(c) == absl::string_view::npos) {
      return Error(p, absl::StrCat("unexpected character '", std::string(1, c), "'"));
    }
    if (c == '(' || c == '[' || c == '{') {
      brackets->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets->empty() || brackets->back() != c) {
        return Error(p, absl::StrCat("unexpected '", std::string(1, c), "'"));
      }
      brackets->pop_back();
    }
    tok.text = std::string(1, c);
    out->push_back(std::move(tok));
    return p + 1;
  }

  absl::Status Error(size_t pos, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("line ", LineAt(pos), ": ", what));
  }

  std::string src_;
  std::vector<Segment> segments_;
  bool line_starting_ = true;
  size_t line_pos_ = 0;
  int line_ = 1;
};

// jinja2 reads "\r\n" and "\r" as "\n" and drops one trailing newline.
std::string Normalize(absl::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Segment>> Lex(absl::string_view source) {
  return Lexer(Normalize(source)).Run();
}

}  // namespace tg::chat_template
