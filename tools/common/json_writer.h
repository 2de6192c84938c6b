// JsonWriter: a minimal streaming JSON emitter for the tools' --json / -o json output
// (objects, arrays, strings with full escaping, numbers). Not thread-safe.
#ifndef TENSORGRID_TOOLS_COMMON_JSON_WRITER_H_
#define TENSORGRID_TOOLS_COMMON_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tg {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(absl::string_view key);
  JsonWriter& String(absl::string_view value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Double(double value);  // non-finite values become null.
  JsonWriter& Bool(bool value);
  const std::string& str() const { return out_; }

 private:
  void Separate();
  // Open writes `bracket` and starts a container; Close writes `bracket` and ends the
  // innermost one.
  JsonWriter& Open(char bracket);
  JsonWriter& Close(char bracket);
  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written yet.
  bool after_key_ = false;
};

// Escapes a string for JSON (quotes included); invalid UTF-8 bytes become U+FFFD.
std::string JsonQuote(absl::string_view s);

}  // namespace tg

#endif  // TENSORGRID_TOOLS_COMMON_JSON_WRITER_H_
