// Command line of tg-ops: the command (test, perf, support, help) and its flags, parsed by
// hand so that every bad value gets one clear message naming it and what is valid.
#ifndef TENSORGRID_TOOLS_TG_OPS_OPTIONS_H_
#define TENSORGRID_TOOLS_TG_OPS_OPTIONS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/op.h"

namespace tg::ops_tool {

enum class Command { kHelp, kTest, kPerf, kSupport };

struct Options {
  Command command = Command::kHelp;
  std::optional<Op> op;  // -o: only this op.
  std::string device;    // -b: only this device (empty: every registered device).
  // -sm: "none" (registered devices only), "tensor" (meta devices only); empty: both, the
  // meta devices when there are at least two CPU-family devices to spread over.
  std::string split_mode;
  std::string meta_devices;    // --device: what the meta devices span (default: all).
  std::optional<int> threads;  // -t: threads of CPU devices (default: the device's own).
  bool verbose = false;        // -v: one line per case, passed ones too.
  // --rpc host:port,... (remote devices join the registry), --rpc-token-file, --rpc-tls-ca.
  std::string rpc, rpc_token_file, rpc_tls_ca;
};

// Parses argv[1..]. INVALID_ARGUMENT names the offending argument and what is accepted.
// Device names are checked later, against the registry.
absl::StatusOr<Options> ParseOptions(absl::Span<char* const> args);

// The usage text printed by --help and when no command is given.
std::string UsageText();

}  // namespace tg::ops_tool

#endif  // TENSORGRID_TOOLS_TG_OPS_OPTIONS_H_
