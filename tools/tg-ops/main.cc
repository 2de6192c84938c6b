// tg-ops: checks every op on every registered device against the naive f64 reference (CPU
// devices) or the CPU device (other devices), measures op speed, and prints which device
// supports which op. See `tg-ops --help`.
#include <cstdio>
#include <string>

#include "backends/register_builtin.h"
#include "cli/rpc/device_flags.h"
#include "core/deadlock_detection.h"
#include "tools/tg-ops/commands.h"
#include "tools/tg-ops/devices.h"
#include "tools/tg-ops/options.h"

namespace {

constexpr int kExitUsage = 2;  // bad arguments or environment.

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "tg-ops: %s\n", std::string(status.message()).c_str());
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  using tg::ops_tool::Command;
  if (absl::Status s = tg::ConfigureDeadlockDetection(); !s.ok()) return Fail(s);
  absl::StatusOr<tg::ops_tool::Options> opts =
      tg::ops_tool::ParseOptions(absl::MakeConstSpan(argv + 1, argc - 1));
  if (!opts.ok()) return Fail(opts.status());
  if (opts->command == Command::kHelp) {
    std::fputs(tg::ops_tool::UsageText().c_str(), stdout);
    return 0;
  }
  if (absl::Status s = tg::RegisterBuiltinBackends(); !s.ok()) return Fail(s);
  tg::DeviceFlags rpc;
  rpc.rpc = opts->rpc;
  rpc.rpc_token_file = opts->rpc_token_file;
  rpc.rpc_tls_ca = opts->rpc_tls_ca;
  if (absl::Status s = tg::RegisterRpcDevices(rpc); !s.ok()) return Fail(s);
  absl::StatusOr<std::vector<tg::Device*>> devices = tg::ops_tool::SelectDevices(*opts);
  if (!devices.ok()) return Fail(devices.status());
  switch (opts->command) {
    case Command::kTest:
      return tg::ops_tool::RunTestCommand(*opts, *devices);
    case Command::kPerf:
      return tg::ops_tool::RunPerfCommand(*opts, *devices);
    case Command::kSupport:
      return tg::ops_tool::RunSupportCommand(*opts, *devices);
    case Command::kHelp:
      break;
  }
  return 0;
}
