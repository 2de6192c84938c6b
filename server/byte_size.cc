#include "server/byte_size.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tg::server {

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("bad size '", text, "' (want bytes or a number with K, M, G or T)"));
  };
  absl::string_view s = absl::StripAsciiWhitespace(text);
  if (absl::EndsWithIgnoreCase(s, "ib")) {
    s.remove_suffix(2);
  } else if (absl::EndsWithIgnoreCase(s, "b")) {
    s.remove_suffix(1);
  }
  if (s.empty()) return bad();
  int shift = 0;
  switch (absl::ascii_toupper(s.back())) {
    case 'K':
      shift = 10;
      break;
    case 'M':
      shift = 20;
      break;
    case 'G':
      shift = 30;
      break;
    case 'T':
      shift = 40;
      break;
    default:
      break;
  }
  if (shift != 0) s.remove_suffix(1);
  if (s.empty()) return bad();
  uint64_t whole;
  if (absl::SimpleAtoi(s, &whole)) {
    if (shift != 0 && whole > (UINT64_MAX >> shift)) return bad();
    return whole << shift;
  }
  double value;
  if (shift == 0 || !absl::SimpleAtod(s, &value) || !std::isfinite(value) || value < 0) {
    return bad();
  }
  const double bytes = std::ldexp(value, shift);
  if (bytes >= 18446744073709551615.0) return bad();
  return static_cast<uint64_t>(bytes);
}

}  // namespace tg::server
