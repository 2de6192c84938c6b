// tg-gguf: inspects GGUF files (`info`), writes synthetic llama models of any shape and
// weight type (`synth`) and the piece hashes that spare rpc loads from hashing (`hash`).
// Exit codes: 0 success, 1 runtime error (unreadable or invalid file, write failure), 2 usage
// error. Every error is one line on stderr.
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/deadlock_detection.h"
#include "models/synth/synth.h"
#include "models/synth/synth_options.h"
#include "tools/tg-gguf/hash.h"
#include "tools/tg-gguf/info.h"

namespace {

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

constexpr char kUsage[] =
    "usage: tg-gguf info FILE\n"
    "       tg-gguf synth OUT --dims n_embd,n_ff,n_layer,n_head,n_head_kv,n_vocab\n"
    "                     --type T [--seed S (42)] [--ctx N (2048)] [--threads N (0: all)]\n"
    "                     [--arch llama|qwen3moe|mixtral --experts E --experts-used K\n"
    "                      [--expert-ff F (n_ff)]]\n"
    "       T: f32 f16 q8_0 q4_0 q5_0 q5_1 q2_k q3_k q4_k q5_k iq4_nl iq4_xs mxfp4 (every matrix)\n"
    "          or q4_k_m q5_k_m (llama-quantize's mixes; docs/gguf.md)\n"
    "       tg-gguf hash FILE\n"
    "\n"
    "info   prints the version, alignment, metadata and tensors of a GGUF file.\n"
    "synth  writes a llama GGUF with random weights that tensorgrid and llama.cpp load;\n"
    "       e.g. the stories15M shape: --dims 288,768,6,6,6,32000. --arch qwen3moe or\n"
    "       mixtral makes every feed-forward E experts of which the router picks K.\n"
    "hash   writes FILE.tghash, the SHA-256 of its tensor data in pieces (on all cores), so\n"
    "       that loading FILE onto rpc-servers need not hash it.\n";

int Fail(const absl::Status& status, int code) {
  std::fprintf(stderr, "tg-gguf: %s\n", std::string(status.message()).c_str());
  return code;
}

int Info(absl::Span<char* const> args) {
  if (args.size() != 1) {
    return Fail(absl::InvalidArgumentError("info needs exactly one FILE"), kExitUsage);
  }
  const absl::Status s = tg::gguf_tool::RunInfo(args[0], stdout);
  return s.ok() ? 0 : Fail(s, kExitRuntime);
}

int Hash(absl::Span<char* const> args) {
  if (args.size() != 1) {
    return Fail(absl::InvalidArgumentError("hash needs exactly one FILE"), kExitUsage);
  }
  const absl::Status s = tg::gguf_tool::RunHash(args[0], stdout);
  return s.ok() ? 0 : Fail(s, kExitRuntime);
}

int Synth(absl::Span<char* const> args) {
  absl::StatusOr<tg::synth::SynthOptions> opts = tg::synth::ParseSynthOptions(args);
  if (!opts.ok()) return Fail(opts.status(), kExitUsage);
  const absl::Status s = tg::synth::RunSynth(*opts, stdout);
  return s.ok() ? 0 : Fail(s, kExitRuntime);
}

}  // namespace

int main(int argc, char** argv) {
  if (absl::Status s = tg::ConfigureDeadlockDetection(); !s.ok()) return Fail(s, kExitUsage);
  const absl::Span<char* const> args(argv + 1, argc - 1);
  if (args.empty()) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  const absl::string_view command = args[0];
  if (command == "help" || command == "--help" || command == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (command == "info") return Info(args.subspan(1));
  if (command == "synth") return Synth(args.subspan(1));
  if (command == "hash") return Hash(args.subspan(1));
  return Fail(absl::InvalidArgumentError(absl::StrCat("unknown command '", command,
                                                      "' (commands: info, synth, hash, help)")),
              kExitUsage);
}
