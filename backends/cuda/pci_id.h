// A device's stable id from its PCI address: "pci:dddd:bb:dd.f", lower-case hex. The CUDA and
// Vulkan families use the same form, so one physical GPU reached through both has one id.
// Pure; thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_PCI_ID_H_
#define TENSORGRID_BACKENDS_CUDA_PCI_ID_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tg::cuda {

// From cudaDeviceGetPCIBusId's "domain:bus:device.function" (hex, any case, e.g.
// "0000:3B:00.0" or "00000000:3b:00.0"); INVALID_ARGUMENT naming the text otherwise.
absl::StatusOr<std::string> PciDeviceId(absl::string_view bus_id);

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_PCI_ID_H_
