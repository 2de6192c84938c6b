// `tg-gguf synth`: writes a synthetic llama-architecture GGUF (llama.cpp's tensor names,
// shapes and metadata, an SPM vocabulary, deterministic random weights) that tensorgrid and
// llama.cpp both load, for demos and benchmarks of real model shapes.
#ifndef TENSORGRID_MODELS_SYNTH_SYNTH_H_
#define TENSORGRID_MODELS_SYNTH_SYNTH_H_

#include <cstdio>

#include "absl/status/status.h"
#include "models/synth/synth_options.h"

namespace tg::synth {

// Generates and writes the model, then prints a summary (sizes, type fallbacks, time) to `out`.
absl::Status RunSynth(const SynthOptions& opts, std::FILE* out);

}  // namespace tg::synth

#endif  // TENSORGRID_MODELS_SYNTH_SYNTH_H_
