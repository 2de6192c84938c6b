#include "serve/chat_template/py_string.h"

#include <cctype>

namespace tg::chat_template {
namespace {

char Upper(char c) { return static_cast<char>(std::toupper(static_cast<unsigned char>(c))); }
char Lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }
bool IsAlpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

}  // namespace

uint32_t DecodeUtf8(absl::string_view s, size_t* i) {
  unsigned char c = s[*i];
  int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
  if (extra == 0 || *i + extra >= s.size() + 1) {
    ++*i;
    return c;
  }
  uint32_t cp = c & (0x3F >> extra);
  for (int k = 1; k <= extra; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[*i + k]) & 0x3F);
  *i += extra + 1;
  return cp;
}

std::vector<std::string> SplitCodePoints(absl::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    DecodeUtf8(s, &i);
    out.emplace_back(s.substr(start, i - start));
  }
  return out;
}

int64_t PyLength(absl::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool PyIsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' ||
         (c >= 0x1C && c <= 0x1F);
}

std::string PyStrip(absl::string_view s, const std::optional<std::string>& chars, bool left,
                    bool right) {
  auto strip = [&](char c) { return chars ? chars->find(c) != std::string::npos : PyIsSpace(c); };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e && strip(s[b])) ++b;
  }
  if (right) {
    while (e > b && strip(s[e - 1])) --e;
  }
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> PySplit(absl::string_view s, const std::optional<std::string>& sep,
                                 int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t pos = s.find(*sep, start);
      if (pos == absl::string_view::npos) break;
      out.emplace_back(s.substr(start, pos - start));
      start = pos + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  size_t i = 0;
  while (true) {
    while (i < s.size() && PyIsSpace(s[i])) ++i;
    if (i == s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      size_t e = s.size();
      while (e > i && PyIsSpace(s[e - 1])) --e;
      out.emplace_back(s.substr(i, e - i));
      break;
    }
    size_t start = i;
    while (i < s.size() && !PyIsSpace(s[i])) ++i;
    out.emplace_back(s.substr(start, i - start));
  }
  return out;
}

std::string PyReplace(absl::string_view s, absl::string_view from, absl::string_view to,
                      int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every code point.
    std::vector<std::string> cps = SplitCodePoints(s);
    int64_t done = 0;
    for (const std::string& cp : cps) {
      if (count < 0 || done < count) {
        out.append(to.data(), to.size());
        ++done;
      }
      out += cp;
    }
    if (count < 0 || done < count) out.append(to.data(), to.size());
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t pos = s.find(from, start);
    if (pos == absl::string_view::npos) break;
    out.append(std::string(s.substr(start, pos - start)));
    out.append(to.data(), to.size());
    start = pos + from.size();
    ++done;
  }
  out.append(std::string(s.substr(start)));
  return out;
}

std::string PyUpper(absl::string_view s) {
  std::string out(s);
  for (char& c : out) c = Upper(c);
  return out;
}

std::string PyLower(absl::string_view s) {
  std::string out(s);
  for (char& c : out) c = Lower(c);
  return out;
}

std::string PyCapitalize(absl::string_view s) {
  std::string out = PyLower(s);
  if (!out.empty()) out[0] = Upper(out[0]);
  return out;
}

std::string JinjaTitle(absl::string_view s) {
  auto is_break = [](char c) {
    return PyIsSpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  std::string out(s);
  bool word_start = true;
  for (char& c : out) {
    if (is_break(c)) {
      word_start = true;
      continue;
    }
    c = word_start ? Upper(c) : Lower(c);
    word_start = false;
  }
  return out;
}

std::string PyTitle(absl::string_view s) {
  std::string out(s);
  bool prev_alpha = false;
  for (char& c : out) {
    c = prev_alpha ? Lower(c) : Upper(c);
    prev_alpha = IsAlpha(c);
  }
  return out;
}

}  // namespace tg::chat_template
