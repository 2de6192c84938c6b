// Device selection shared by rpc-server and the tools: a list of names or indices turned into
// registry devices with one clear error per bad item, what an empty list stands for, -t for
// every device that runs on host threads, and the --list-devices text. Knows the registry,
// not remote devices or their flags (cli/rpc/), so rpc-server links it without the client.
// Thread-safety: as the registry's (call after the backends are registered).
#ifndef TENSORGRID_CLI_DEVICE_PICK_H_
#define TENSORGRID_CLI_DEVICE_PICK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/backend.h"

namespace tg {

// Sets the threads of every device among `devices` that runs on host threads (streams read
// it at creation); the others are left as they are.
void SetThreads(absl::Span<Device* const> devices, int64_t threads);

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

// The --list-devices output: name, type, description, memory; one device per line.
std::string DescribeDevices();

}  // namespace tg

#endif  // TENSORGRID_CLI_DEVICE_PICK_H_
