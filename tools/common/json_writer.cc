#include "tools/common/json_writer.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace tg {
namespace {

// Length of the well-formed UTF-8 sequence starting at s[i] (RFC 3629), or 0 when it is not:
// besides truncation and stray continuation bytes, overlong forms, UTF-16 surrogates
// (ED A0..BF) and values past U+10FFFF are refused, as strict decoders (Python's) refuse them.
size_t Utf8Length(absl::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte.
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  }
  if (len == 0 || i + len > s.size()) return 0;
  const auto second = static_cast<unsigned char>(s[i + 1]);
  if (second < lo || second > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  }
  return len;
}

}  // namespace

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        ++i;
        continue;
      case '\\':
        out += "\\\\";
        ++i;
        continue;
      case '\n':
        out += "\\n";
        ++i;
        continue;
      case '\r':
        out += "\\r";
        ++i;
        continue;
      case '\t':
        out += "\\t";
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
      ++i;
      continue;
    }
    const size_t len = Utf8Length(s, i);
    if (len == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD for a broken sequence (e.g. half a multi-byte token).
      ++i;
    } else {
      out.append(s.data() + i, len);
      i += len;
    }
  }
  out += "\"";
  return out;
}

void JsonWriter::Separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ",";
    first_.back() = false;
  }
}

JsonWriter& JsonWriter::Open(char bracket) {
  Separate();
  out_ += bracket;
  first_.push_back(true);
  return *this;
}
JsonWriter& JsonWriter::Close(char bracket) {
  out_ += bracket;
  first_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::BeginObject() { return Open('{'); }
JsonWriter& JsonWriter::EndObject() { return Close('}'); }
JsonWriter& JsonWriter::BeginArray() { return Open('['); }
JsonWriter& JsonWriter::EndArray() { return Close(']'); }
JsonWriter& JsonWriter::Key(absl::string_view key) {
  Separate();
  out_ += JsonQuote(key) + ":";
  after_key_ = true;
  return *this;
}
JsonWriter& JsonWriter::String(absl::string_view value) {
  Separate();
  out_ += JsonQuote(value);
  return *this;
}
JsonWriter& JsonWriter::Int(int64_t value) {
  Separate();
  out_ += absl::StrFormat("%d", value);
  return *this;
}
JsonWriter& JsonWriter::Double(double value) {
  Separate();
  out_ += std::isfinite(value) ? absl::StrFormat("%.9g", value) : "null";
  return *this;
}
JsonWriter& JsonWriter::Bool(bool value) {
  Separate();
  out_ += value ? "true" : "false";
  return *this;
}

}  // namespace tg
