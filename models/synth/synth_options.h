// Command-line options of `tg-gguf synth`: the model's shape, its weight type, seed and
// context length, parsed and checked before anything is generated.
#ifndef TENSORGRID_MODELS_SYNTH_SYNTH_OPTIONS_H_
#define TENSORGRID_MODELS_SYNTH_SYNTH_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "models/synth/synth_mix.h"

namespace tg::synth {

// The shape of a llama model, in the order of --dims.
struct SynthDims {
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t n_vocab = 0;
  int64_t head_dim() const { return n_embd / n_head; }
  int64_t n_embd_kv() const { return head_dim() * n_head_kv; }
};

// The architecture written: dense llama, or a mixture of experts in qwen3moe's layout
// (per-head q/k norms, neox rope), mixtral's (llama with expert_count) or gpt-oss's (biases,
// attention sinks, alternating sliding-window layers, YaRN rope, MXFP4 experts).
enum class SynthArch { kLlama, kQwen3Moe, kMixtral, kGptOss };

// The experts of a MoE architecture (unused for kLlama).
struct SynthExperts {
  int64_t n_expert = 0;
  int64_t n_used = 0;
  int64_t n_ff = 0;  // each expert's FFN width (mixtral: n_ff of --dims).
};

struct SynthOptions {
  std::string out;
  SynthArch arch = SynthArch::kLlama;
  SynthExperts experts;
  SynthDims dims;
  std::string dims_text;     // canonical "n_embd,n_ff,...": part of general.name.
  DType type = DType::kF32;  // of the matrices (norms are always f32): the mix's base type.
  TypeMix mix = TypeMix::kPure;
  std::string type_name;   // as given on the command line, lower case.
  uint32_t file_type = 0;  // llama.cpp's LLAMA_FTYPE for general.file_type.
  uint64_t seed = 42;
  int64_t ctx = 2048;
  int threads = 0;    // generating the weights; 0 = every core. The file does not depend on it.
  std::string chat_template;  // --chat-template FILE's text: tokenizer.chat_template (or none).
  bool help = false;  // -h/--help: print SynthUsage() instead; nothing else was checked.
};

// "llama", "qwen3moe", "mixtral" or "gpt-oss".
const char* SynthArchName(SynthArch arch);
// general.architecture of the file ("llama" for mixtral).
const char* GgufArchName(SynthArch arch);

// Parses the arguments after "synth"; INVALID_ARGUMENT (a usage error) with a one-line message.
// -h or --help in a flag's place stops parsing: the result has only `help` set.
absl::StatusOr<SynthOptions> ParseSynthOptions(absl::Span<char* const> args);

// The usage of `tg-gguf synth`, its --arch and --type lists taken from the parser's tables.
std::string SynthUsage();

// The smallest vocabulary synth accepts: <unk>, <s>, </s>, 256 byte tokens and a few pieces.
int64_t MinSynthVocab();

}  // namespace tg::synth

#endif  // TENSORGRID_MODELS_SYNTH_SYNTH_OPTIONS_H_
