// `tg-gguf synth`: writes a synthetic llama-architecture GGUF (llama.cpp's tensor names,
// shapes and metadata, an SPM vocabulary, deterministic random weights) that tensorgrid and
// llama.cpp both load, for demos and benchmarks of real model shapes.
#ifndef TENSORGRID_TOOLS_TG_GGUF_SYNTH_H_
#define TENSORGRID_TOOLS_TG_GGUF_SYNTH_H_

#include <cstdio>

#include "absl/status/status.h"
#include "tools/tg-gguf/synth_options.h"

namespace tg::gguf_tool {

// Generates and writes the model, then prints a summary (sizes, type fallbacks, time) to `out`.
absl::Status RunSynth(const SynthOptions& opts, std::FILE* out);

}  // namespace tg::gguf_tool

#endif  // TENSORGRID_TOOLS_TG_GGUF_SYNTH_H_
