// Registry: the process-wide list of device families (CPU, CUDA, Vulkan, RPC) and their
// devices. Backends register themselves; the scheduler, the meta backend and the tools look
// devices up here and never care whether a device is local or remote. Families registered
// first have priority: a device whose id() equals that of a device of an earlier family (the
// same GPU seen through CUDA and Vulkan, "pci:0000:01:00.0") is hidden from devices() and
// DefaultDevices(), so it is used once, through the earlier family; FindDevice still finds it
// by name. Thread-safe.
#ifndef TENSORGRID_CORE_REGISTRY_H_
#define TENSORGRID_CORE_REGISTRY_H_

#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/backend.h"

namespace tg {

// A group of devices driven by one backend implementation.
class DeviceFamily {
 public:
  virtual ~DeviceFamily() = default;
  virtual absl::string_view name() const = 0;  // "CPU", "CUDA", "RPC[host:port]".
  virtual std::vector<Device*> devices() = 0;  // owned by the family, stable addresses.
};

class Registry {
 public:
  static Registry& Get();  // the process registry.

  // Adds a family; ALREADY_EXISTS when one of that name is registered, or a device name
  // collides with one already registered.
  absl::Status Register(std::unique_ptr<DeviceFamily> family);
  bool HasFamily(absl::string_view name) const;

  // All devices but hidden duplicates (see above), in registration order.
  std::vector<Device*> devices() const;
  // Case-insensitive lookup among all devices, hidden duplicates included; NOT_FOUND lists
  // the devices there are.
  absl::StatusOr<Device*> FindDevice(absl::string_view name) const;
  // Devices to use when the user names none: discrete GPUs (and remote devices); iGPUs only
  // when there is no discrete GPU (ggml's rule); the first CPU device when nothing else.
  std::vector<Device*> DefaultDevices() const;
  // The first CPU device (the host), or nullptr.
  Device* CpuDevice() const;

 private:
  // Every device with whether it duplicates an earlier family's device.
  std::vector<std::pair<Device*, bool>> AllDevices() const;

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<DeviceFamily>> families_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tg

#endif  // TENSORGRID_CORE_REGISTRY_H_
