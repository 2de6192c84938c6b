#include "serve/chat_template/py_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "serve/chat_template/py_string.h"

namespace tg::chat_template {
namespace {

// Python switches repr(float) to exponent notation outside [1e-4, 1e16).
constexpr int kMinFixedExponent = -4;
constexpr int kMaxFixedExponent = 16;

void AppendJsonString(absl::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    switch (c) {
      case '"':
        *out += "\\\"";
        ++i;
        continue;
      case '\\':
        *out += "\\\\";
        ++i;
        continue;
      case '\n':
        *out += "\\n";
        ++i;
        continue;
      case '\r':
        *out += "\\r";
        ++i;
        continue;
      case '\t':
        *out += "\\t";
        ++i;
        continue;
      case '\b':
        *out += "\\b";
        ++i;
        continue;
      case '\f':
        *out += "\\f";
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      absl::StrAppendFormat(out, "\\u%04x", c);
      ++i;
    } else if (c < 0x80 || !ensure_ascii) {
      out->push_back(static_cast<char>(c));
      ++i;
    } else {
      uint32_t cp = DecodeUtf8(s, &i);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        absl::StrAppendFormat(out, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        absl::StrAppendFormat(out, "\\u%04x", cp);
      }
    }
  }
  out->push_back('"');
}

absl::Status Dump(const Value& v, const JsonDumpsOptions& o, int depth, std::string* out) {
  std::string item_sep = o.indent >= 0 ? "," : ", ";
  auto newline = [&](int level) {
    if (o.indent >= 0) absl::StrAppend(out, "\n", std::string(o.indent * level, ' '));
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      *out += v.bool_value() ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
      absl::StrAppend(out, v.int_value());
      return absl::OkStatus();
    case Value::Kind::kFloat:
      if (std::isnan(v.float_value())) {
        *out += "NaN";
      } else if (std::isinf(v.float_value())) {
        *out += v.float_value() > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += PyFloatRepr(v.float_value());
      }
      return absl::OkStatus();
    case Value::Kind::kString:
      AppendJsonString(v.string(), o.ensure_ascii, out);
      return absl::OkStatus();
    case Value::Kind::kArray: {
      if (v.items().empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      *out += "[";
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        if (auto s = Dump(v.items()[i], o, depth + 1, out); !s.ok()) return s;
      }
      newline(depth);
      *out += "]";
      return absl::OkStatus();
    }
    case Value::Kind::kObject: {
      if (v.is_namespace())
        return absl::InvalidArgumentError("Object of type Namespace is not JSON serializable");
      if (v.object().entries.empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.object().entries) entries.push_back(&e);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      *out += "{";
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        AppendJsonString(entries[i]->first, o.ensure_ascii, out);
        *out += ": ";
        if (auto s = Dump(entries[i]->second, o, depth + 1, out); !s.ok()) return s;
      }
      newline(depth);
      *out += "}";
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("Object of type ", v.TypeName(), " is not JSON serializable"));
  }
}

}  // namespace

std::string PyFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+02"
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exponent = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  std::string out = negative ? "-" : "";
  if (exponent < kMinFixedExponent || exponent >= kMaxFixedExponent) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) absl::StrAppend(&out, ".", digits.substr(1));
    absl::StrAppendFormat(&out, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (exponent < 0) {
    absl::StrAppend(&out, "0.", std::string(-exponent - 1, '0'), digits);
  } else if (static_cast<int>(digits.size()) <= exponent + 1) {
    absl::StrAppend(&out, digits, std::string(exponent + 1 - digits.size(), '0'), ".0");
  } else {
    absl::StrAppend(&out, digits.substr(0, exponent + 1), ".", digits.substr(exponent + 1));
  }
  return out;
}

std::string PyStringRepr(absl::string_view s) {
  char quote = (s.find('\'') != absl::string_view::npos && s.find('"') == absl::string_view::npos)
                   ? '"'
                   : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == quote || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back(quote);
  return out;
}

absl::StatusOr<std::string> PyJsonDumps(const Value& value, const JsonDumpsOptions& options) {
  std::string out;
  if (auto s = Dump(value, options, 0, &out); !s.ok()) return s;
  return out;
}

}  // namespace tg::chat_template
