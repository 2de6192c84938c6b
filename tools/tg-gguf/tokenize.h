// `tg-gguf tokenize FILE (-p TEXT | -f TEXT_FILE) [--no-add-special] [--parse-special]`: the
// token ids of a text under FILE's vocabulary (a whole model or a vocabulary-only GGUF), on
// one line, space-separated — as llama.cpp's tokenizer tests write them, so the two can be
// compared. Thread-compatible.
#ifndef TENSORGRID_TOOLS_TG_GGUF_TOKENIZE_H_
#define TENSORGRID_TOOLS_TG_GGUF_TOKENIZE_H_

#include <cstdio>

#include "absl/types/span.h"

namespace tg::gguf_tool {

// Parses the arguments after "tokenize" and runs; the exit code (0, 1 runtime, 2 usage).
int RunTokenize(absl::Span<char* const> args, std::FILE* out);

}  // namespace tg::gguf_tool

#endif  // TENSORGRID_TOOLS_TG_GGUF_TOKENIZE_H_
