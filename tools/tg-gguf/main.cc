// tg-gguf: inspects GGUF files (`info`), writes synthetic llama models of any shape and
// weight type (`synth`), the piece hashes that spare rpc loads from hashing (`hash`), and
// tokenizes text under a file's vocabulary (`tokenize`).
// Exit codes: 0 success, 1 runtime error (unreadable or invalid file, write failure), 2 usage
// error. Every error is one line on stderr.
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/deadlock_detection.h"
#include "models/synth/synth.h"
#include "models/synth/synth_options.h"
#include "tools/tg-gguf/hash.h"
#include "tools/tg-gguf/info.h"
#include "tools/tg-gguf/tokenize.h"

namespace {

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

constexpr char kInfoUsage[] =
    "usage: tg-gguf info FILE\n"
    "\n"
    "Prints the version, alignment, metadata and tensors of a GGUF file.\n";
constexpr char kHashUsage[] =
    "usage: tg-gguf hash FILE\n"
    "\n"
    "Writes FILE.tghash, the SHA-256 of its tensor data in pieces (on all cores), so that\n"
    "loading FILE onto rpc-servers need not hash it.\n";

// The whole tool's usage: the commands' synopses and what each does, then synth's flags.
std::string Usage() {
  return absl::StrCat(
      "usage: tg-gguf info FILE\n"
      "       tg-gguf hash FILE\n"
      "       tg-gguf tokenize FILE (-p TEXT | -f TEXT_FILE) [--no-add-special] "
      "[--parse-special]\n"
      "       tg-gguf synth OUT --dims ... --type T [flags] (below)\n"
      "       tg-gguf COMMAND --help\n"
      "\n"
      "info   prints the version, alignment, metadata and tensors of a GGUF file.\n"
      "hash   writes FILE.tghash, the SHA-256 of its tensor data in pieces (on all cores), so\n"
      "       that loading FILE onto rpc-servers need not hash it.\n"
      "tokenize prints the token ids of a text under FILE's vocabulary (vocabulary-only\n"
      "       files too), space-separated on one line.\n"
      "synth  writes a GGUF with random weights:\n"
      "\n",
      tg::synth::SynthUsage());
}

int Fail(const absl::Status& status, int code) {
  std::fprintf(stderr, "tg-gguf: %s\n", std::string(status.message()).c_str());
  return code;
}

bool IsHelp(absl::string_view arg) { return arg == "-h" || arg == "--help"; }

// The one FILE of info and hash, or nullptr for -h/--help. Any other flag, or a count
// other than one, is a usage error.
absl::StatusOr<const char*> OneFile(absl::string_view command, absl::Span<char* const> args) {
  for (const absl::string_view arg : args) {
    if (IsHelp(arg)) return nullptr;
    if (arg.size() > 1 && arg[0] == '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '", arg, "' (see tg-gguf ", command, " --help)"));
    }
  }
  if (args.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(command, " needs exactly one FILE"));
  }
  return args[0];
}

int Info(absl::Span<char* const> args) {
  absl::StatusOr<const char*> file = OneFile("info", args);
  if (!file.ok()) return Fail(file.status(), kExitUsage);
  if (*file == nullptr) {
    std::fputs(kInfoUsage, stdout);
    return 0;
  }
  const absl::Status s = tg::gguf_tool::RunInfo(*file, stdout);
  return s.ok() ? 0 : Fail(s, kExitRuntime);
}

int Hash(absl::Span<char* const> args) {
  absl::StatusOr<const char*> file = OneFile("hash", args);
  if (!file.ok()) return Fail(file.status(), kExitUsage);
  if (*file == nullptr) {
    std::fputs(kHashUsage, stdout);
    return 0;
  }
  const absl::Status s = tg::gguf_tool::RunHash(*file, stdout);
  return s.ok() ? 0 : Fail(s, kExitRuntime);
}

int Synth(absl::Span<char* const> args) {
  absl::StatusOr<tg::synth::SynthOptions> opts = tg::synth::ParseSynthOptions(args);
  if (!opts.ok()) return Fail(opts.status(), kExitUsage);
  if (opts->help) {
    std::fputs(tg::synth::SynthUsage().c_str(), stdout);
    return 0;
  }
  const absl::Status s = tg::synth::RunSynth(*opts, stdout);
  return s.ok() ? 0 : Fail(s, kExitRuntime);
}

}  // namespace

int main(int argc, char** argv) {
  if (absl::Status s = tg::ConfigureDeadlockDetection(); !s.ok()) return Fail(s, kExitUsage);
  const absl::Span<char* const> args(argv + 1, argc - 1);
  if (args.empty()) {
    std::fputs(Usage().c_str(), stderr);
    return kExitUsage;
  }
  const absl::string_view command = args[0];
  if (command == "help" || IsHelp(command)) {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  if (command == "info") return Info(args.subspan(1));
  if (command == "synth") return Synth(args.subspan(1));
  if (command == "hash") return Hash(args.subspan(1));
  if (command == "tokenize") return tg::gguf_tool::RunTokenize(args.subspan(1), stdout);
  const char* what = command.size() > 1 && command[0] == '-' ? "flag" : "command";
  return Fail(absl::InvalidArgumentError(absl::StrCat("unknown ", what, " '", command,
                                                      "' (commands: info, synth, hash, tokenize, help)")),
              kExitUsage);
}
