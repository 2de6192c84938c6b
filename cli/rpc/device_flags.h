// The device flags every tool shares (llama.cpp's names): -sm/--split-mode none|layer|tensor,
// -ts/--tensor-split 3,1, --device CPU0,CPU1, --list-devices, -t/--threads, and the --rpc
// family that registers remote devices; and ours: --expert-split (with -sm tensor, whole MoE
// experts per device). Turns them into a DevicePlan with one clear error line for a bad
// value. Apart from cli/ because the --rpc flags link the RPC client, which rpc-server must
// not carry (it picks its devices with cli/device_pick.h alone).
// Thread-safety: call from the tool's main thread, before the devices are used.
#ifndef TENSORGRID_CLI_RPC_DEVICE_FLAGS_H_
#define TENSORGRID_CLI_RPC_DEVICE_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "cli/arg_parser.h"
#include "cli/device_pick.h"
#include "core/split_mode.h"

namespace tg {

struct DeviceFlags {
  std::string split_mode = "none";
  std::string tensor_split;   // "3,1": proportions per device.
  bool expert_split = false;  // -sm tensor: whole MoE experts per device, not slices of each.
  std::string devices;        // "CPU0,CPU1": names from --list-devices.
  bool list_devices = false;
  int64_t threads = 0;  // CPU threads per CPU device (0: the device's default).
  // Remote devices: --rpc host:port,... and how to authenticate to those servers.
  std::string rpc;
  std::string rpc_token_file;
  std::string rpc_tls_ca;    // PEM roots to trust; turns TLS on.
  std::string rpc_tls_cert;  // client certificate + key for servers that require mTLS.
  std::string rpc_tls_key;
  // Not a flag of its own: a tool's -v, which also says why a GPU family is absent.
  bool verbose = false;
};

// Registers the flags above with a tool's parser.
void AddDeviceFlags(ArgParser& parser, DeviceFlags* flags);
// The same without -t, for tools whose -t means something else (tg-bench: a list).
void AddDeviceSelectionFlags(ArgParser& parser, DeviceFlags* flags);

// Registers only the --rpc family of flags (tools with their own device flags: tg-ops).
void AddRpcFlags(ArgParser& parser, DeviceFlags* flags);
// Connects to the --rpc servers and registers their devices (nothing when --rpc is empty).
// Errors name the endpoint or the file that is wrong.
absl::Status RegisterRpcDevices(const DeviceFlags& flags);

// Registers the builtin backends and the --rpc devices, applies -t, and resolves the plan: --device
// picks devices (default: kGpusAndRemoteElseCpus for layer/tensor splits, the registry's default
// device for none), -ts must have one positive number per device.
absl::StatusOr<DevicePlan> ResolveDevicePlan(const DeviceFlags& flags);

}  // namespace tg

#endif  // TENSORGRID_CLI_RPC_DEVICE_FLAGS_H_
