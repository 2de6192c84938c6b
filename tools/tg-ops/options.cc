// Hand-written argv parsing for tg-ops (see options.h).
#include "tools/tg-ops/options.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tg::ops_tool {
namespace {

// -t beyond this is surely a typo (and would spawn an absurd number of threads).
constexpr int kMaxThreads = 1024;

absl::StatusOr<Command> ParseCommand(absl::string_view word) {
  if (word == "test") return Command::kTest;
  if (word == "perf") return Command::kPerf;
  if (word == "support") return Command::kSupport;
  if (word == "help" || word == "--help" || word == "-h") return Command::kHelp;
  const char* what = word.size() > 1 && word[0] == '-' ? "flag" : "command";
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ", what, " '", word, "' (commands: test, perf, support, help)"));
}

absl::StatusOr<int> ParseThreads(absl::string_view value) {
  int n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < 1 || n > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad thread count -t '", value, "' (need a number from 1 to ", kMaxThreads, ")"));
  }
  return n;
}

// Applies one flag that takes a value; `value` is the next argument.
absl::Status ApplyValueFlag(absl::string_view flag, absl::string_view value, Options* opts) {
  if (flag == "-o") {
    absl::StatusOr<Op> op = ParseOp(value);
    if (!op.ok()) return op.status();
    opts->op = *op;
  } else if (flag == "-b") {
    opts->device = std::string(value);
  } else if (flag == "-sm" || flag == "--split-mode") {
    if (value != "none" && value != "tensor") {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown split mode -sm '", value, "' (none or tensor)"));
    }
    opts->split_mode = std::string(value);
  } else if (flag == "--device") {
    opts->meta_devices = std::string(value);
  } else if (flag == "--rpc") {
    opts->rpc = std::string(value);
  } else if (flag == "--rpc-token-file") {
    opts->rpc_token_file = std::string(value);
  } else if (flag == "--rpc-tls-ca") {
    opts->rpc_tls_ca = std::string(value);
  } else {
    absl::StatusOr<int> n = ParseThreads(value);
    if (!n.ok()) return n.status();
    opts->threads = *n;
  }
  return absl::OkStatus();
}

bool TakesValue(absl::string_view flag) {
  return flag == "-o" || flag == "-b" || flag == "-t" || flag == "-sm" || flag == "--split-mode" ||
         flag == "--device" || flag == "--rpc" || flag == "--rpc-token-file" ||
         flag == "--rpc-tls-ca";
}

}  // namespace

absl::StatusOr<Options> ParseOptions(absl::Span<char* const> args) {
  Options opts;
  if (args.empty()) return opts;  // no command: usage.
  absl::StatusOr<Command> command = ParseCommand(args[0]);
  if (!command.ok()) return command.status();
  opts.command = *command;
  if (opts.command == Command::kHelp) return opts;
  for (size_t i = 1; i < args.size(); ++i) {
    const absl::string_view arg = args[i];
    if (arg == "-h" || arg == "--help") {
      opts.command = Command::kHelp;
      return opts;
    }
    if (arg == "-v") {
      opts.verbose = true;
      continue;
    }
    if (arg.empty() || arg[0] != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (see tg-ops --help)"));
    }
    if (!TakesValue(arg)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag '", arg,
          "' (flags: -o OP, -b DEVICE, -t THREADS, -sm none|tensor, --device LIST, --rpc LIST, "
          "-v)"));
    }
    if (i + 1 >= args.size()) {
      return absl::InvalidArgumentError(absl::StrCat("flag ", arg, " needs a value"));
    }
    if (absl::Status s = ApplyValueFlag(arg, args[i + 1], &opts); !s.ok()) return s;
    ++i;
  }
  return opts;
}

std::string UsageText() {
  return "usage: tg-ops test|perf|support [flags]\n"
         "       tg-ops COMMAND --help\n"
         "\n"
         "Checks every op on every registered device and measures its speed.\n"
         "\n"
         "commands:\n"
         "  test      run the case catalogue; CPU devices are checked against the naive f64\n"
         "            reference, other devices against the CPU device (NMSE per case)\n"
         "  perf      time representative shapes per op (us/run, GFLOP/s, GB/s)\n"
         "  support   print which device supports which op\n"
         "  help      this text\n"
         "\n"
         "flags:\n"
         "  -o OP       only this op (as printed: MUL_MAT, ROPE, ...; case-insensitive)\n"
         "  -b DEVICE   only this device (CPU, CPU0, ...)\n"
         "  -t THREADS  threads of CPU devices (default: each device's own count)\n"
         "  -sm none|tensor\n"
         "              none: registered devices only; tensor: only meta devices (tensor\n"
         "              parallel over --device, inputs cut along their outer dimension in\n"
         "              META(...), along dimension 0 in META-K(...)); default: both, meta\n"
         "              devices when there are two or more CPU devices\n"
         "  --device L  devices the meta devices span, e.g. CPU0,CPU1 (default: all)\n"
         "  --rpc L     also test the devices of these rpc-servers (host:port,...) against\n"
         "              the local CPU; --rpc-token-file F, --rpc-tls-ca F authenticate\n"
         "  -v          print every case, not only failures (test)\n"
         "  -h, --help  this text (also after a command)\n"
         "\n"
         "environment:\n"
         "  TG_CPU_DEVICES=N  expose N virtual CPU devices (CPU0..CPU<N-1>)\n"
         "\n"
         "The last line of `test` is `N passed, M failed`; the exit code is 0 only when\n"
         "M is 0. Bad arguments exit with code 2.\n";
}

}  // namespace tg::ops_tool
