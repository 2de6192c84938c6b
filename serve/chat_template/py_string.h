// Python str semantics over UTF-8 text: lengths and indexes count code points, and the str
// methods that chat templates call (strip, split, title, ...) behave as CPython's do for the
// whitespace and letters of ASCII; other code points pass through unchanged.
// Thread-safety: pure functions.
#ifndef TENSORGRID_SERVE_CHAT_TEMPLATE_PY_STRING_H_
#define TENSORGRID_SERVE_CHAT_TEMPLATE_PY_STRING_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tg::chat_template {

// Decodes the code point at s[*i] and advances *i; a malformed byte decodes as itself.
uint32_t DecodeUtf8(absl::string_view s, size_t* i);

// The text split into code points, each as its UTF-8 bytes.
std::vector<std::string> SplitCodePoints(absl::string_view s);

// len(s).
int64_t PyLength(absl::string_view s);

// Python's str.isspace() for one ASCII byte.
bool PyIsSpace(char c);

// s.strip(chars) / lstrip / rstrip: `chars` unset means whitespace.
std::string PyStrip(absl::string_view s, const std::optional<std::string>& chars, bool left,
                    bool right);

// s.split(sep, maxsplit): unset `sep` splits on runs of whitespace; maxsplit < 0 is no limit.
std::vector<std::string> PySplit(absl::string_view s, const std::optional<std::string>& sep,
                                 int64_t maxsplit);

// s.replace(old, new, count): count < 0 replaces all.
std::string PyReplace(absl::string_view s, absl::string_view from, absl::string_view to,
                      int64_t count);

std::string PyUpper(absl::string_view s);
std::string PyLower(absl::string_view s);
// s.capitalize(): the first character upper case, the rest lower case.
std::string PyCapitalize(absl::string_view s);
// jinja2's title filter: words start after whitespace, '-', '(', '{', '[' or a quote.
std::string JinjaTitle(absl::string_view s);
// str.title(): words are runs of letters.
std::string PyTitle(absl::string_view s);

}  // namespace tg::chat_template

#endif  // TENSORGRID_SERVE_CHAT_TEMPLATE_PY_STRING_H_
