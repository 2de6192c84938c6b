// The device flags every tool shares (llama.cpp's names): -sm/--split-mode none|layer|tensor,
// -ts/--tensor-split 3,1, --device CPU0,CPU1, --list-devices, -t/--threads; and ours:
// --expert-split (with -sm tensor, whole MoE experts per device). Turns them into
// a DevicePlan with one clear error line for a bad value.
#ifndef TENSORGRID_CLI_DEVICE_FLAGS_H_
#define TENSORGRID_CLI_DEVICE_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "cli/arg_parser.h"
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

// Sets the threads of every device among `devices` that runs on host threads (streams read
// it at creation); the others are left as they are.
void SetThreads(absl::Span<Device* const> devices, int64_t threads);

// Registers only the --rpc family of flags (tools with their own device flags: tg-ops).
void AddRpcFlags(ArgParser& parser, DeviceFlags* flags);
// Connects to the --rpc servers and registers their devices (nothing when --rpc is empty).
// Errors name the endpoint or the file that is wrong.
absl::Status RegisterRpcDevices(const DeviceFlags& flags);

// What an empty device list stands for.
enum class DefaultDevices {
  kFirstDefault,       // the registry's first default device (one GPU, else the CPU).
  kLocalGpusElseCpus,  // every local discrete GPU, else every iGPU, else every CPU device.
  // Every discrete GPU and remote device, else every iGPU, else every CPU device: a split
  // keeps its work off the client's CPU unless --device names it or nothing else exists.
  kGpusAndRemoteElseCpus,
};

// The devices of `all` (in order) that `fallback` stands for; kFirstDefault is the registry's.
std::vector<Device*> DefaultDeviceList(absl::Span<Device* const> all, DefaultDevices fallback);

// The devices `list` names, in its order: names from --list-devices ("CUDA0,CPU") or indices
// into the registry's device list ("0,1"). An empty list gives `fallback`. Errors name
// `flag` and the item that is wrong (unknown, out of range, listed twice).
absl::StatusOr<std::vector<Device*>> PickDevices(absl::string_view list, absl::string_view flag,
                                                 DefaultDevices fallback);

// Registers the builtin backends and the --rpc devices, applies -t, and resolves the plan: --device
// picks devices (default: kGpusAndRemoteElseCpus for layer/tensor splits, the registry's default
// device for none), -ts must have one positive number per device.
absl::StatusOr<DevicePlan> ResolveDevicePlan(const DeviceFlags& flags);

// The --list-devices output: name, type, description, memory; one device per line.
std::string DescribeDevices();

}  // namespace tg

#endif  // TENSORGRID_CLI_DEVICE_FLAGS_H_
