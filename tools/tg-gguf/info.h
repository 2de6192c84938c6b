// `tg-gguf info`: prints a GGUF file's header facts, its metadata (long strings and arrays
// abbreviated, control bytes escaped) and a table of its tensors with totals.
#ifndef TENSORGRID_TOOLS_TG_GGUF_INFO_H_
#define TENSORGRID_TOOLS_TG_GGUF_INFO_H_

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "gguf/gguf_file.h"

namespace tg::gguf_tool {

// A metadata value as one line of text (strings quoted and escaped, long arrays cut short).
std::string FormatValue(const GgufValue& value);

// Opens `path` (errors name the file and the problem) and prints its description to `out`.
absl::Status RunInfo(const std::string& path, std::FILE* out);

}  // namespace tg::gguf_tool

#endif  // TENSORGRID_TOOLS_TG_GGUF_INFO_H_
