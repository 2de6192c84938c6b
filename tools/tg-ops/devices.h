// Which devices a tg-ops command runs on, and the -t thread setting of CPU devices.
#ifndef TENSORGRID_TOOLS_TG_OPS_DEVICES_H_
#define TENSORGRID_TOOLS_TG_OPS_DEVICES_H_

#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "tools/tg-ops/options.h"

namespace tg::ops_tool {

// Every registered device plus, unless -sm none, meta devices (tensor parallel, see
// meta_devices.h) over the CPU-family devices when there are two or more (-sm tensor: only
// the meta devices, over --device or every device); or only the one named by -b (the
// registry's NOT_FOUND lists the devices there are). Applies -t to the CPU devices before
// anyone creates a stream.
absl::StatusOr<std::vector<Device*>> SelectDevices(const Options& opts);

// True for devices of the CPU family (and meta devices over them): they are checked against
// the f64 reference, all other devices against the CPU device.
bool IsCpuFamily(const Device& device);

}  // namespace tg::ops_tool

#endif  // TENSORGRID_TOOLS_TG_OPS_DEVICES_H_
