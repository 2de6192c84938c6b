#include "cli/device_pick.h"

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/registry.h"
#include "core/status_macros.h"

namespace tg {

void SetThreads(absl::Span<Device* const> devices, int64_t threads) {
  // UNIMPLEMENTED: a device without host threads (a GPU, a remote device) keeps its own.
  for (Device* d : devices) d->SetThreads(static_cast<int>(threads)).IgnoreError();
}

std::string DescribeDevices() {
  std::string out = "available devices:\n";
  for (Device* d : Registry::Get().devices()) {
    const DeviceMemory m = d->memory();
    absl::StrAppendFormat(&out, "  %-12s %-6s %s (%.0f MiB free of %.0f MiB)\n", d->name(),
                          DeviceTypeName(d->type()), d->description(), m.free / 1048576.0,
                          m.total / 1048576.0);
  }
  return out;
}

namespace {

// The devices of `all` whose type comes first in `preference` (every device of that type).
std::vector<Device*> FirstTypePresent(absl::Span<Device* const> all,
                                      std::initializer_list<std::vector<DeviceType>> preference) {
  for (const std::vector<DeviceType>& types : preference) {
    std::vector<Device*> picked;
    for (Device* d : all) {
      if (absl::c_linear_search(types, d->type())) picked.push_back(d);
    }
    if (!picked.empty()) return picked;
  }
  return {};
}

absl::StatusOr<Device*> FindListedDevice(absl::string_view item, absl::string_view flag) {
  const std::vector<Device*> all = Registry::Get().devices();
  uint32_t index;
  if (!absl::SimpleAtoi(item, &index)) return Registry::Get().FindDevice(item);
  if (index >= all.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": no device ", index, " (there are ", all.size(), ")"));
  }
  return all[index];
}

}  // namespace

std::vector<Device*> DefaultDeviceList(absl::Span<Device* const> all, DefaultDevices fallback) {
  switch (fallback) {
    case DefaultDevices::kFirstDefault: {
      const std::vector<Device*> defaults = Registry::Get().DefaultDevices();
      if (defaults.empty()) return {};
      return {defaults.front()};
    }
    case DefaultDevices::kLocalGpusElseCpus:
      return FirstTypePresent(all, {{DeviceType::kGpu}, {DeviceType::kIgpu}, {DeviceType::kCpu}});
    case DefaultDevices::kGpusAndRemoteElseCpus:
      return FirstTypePresent(
          all, {{DeviceType::kGpu, DeviceType::kRemote}, {DeviceType::kIgpu}, {DeviceType::kCpu}});
  }
  return {};
}

absl::StatusOr<std::vector<Device*>> PickDevices(absl::string_view list, absl::string_view flag,
                                                 DefaultDevices fallback) {
  std::vector<Device*> devices;
  if (list.empty()) {
    devices = DefaultDeviceList(Registry::Get().devices(), fallback);
    if (devices.empty()) return absl::FailedPreconditionError("no devices are registered");
    return devices;
  }
  for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    TG_ASSIGN_OR_RETURN(Device * d, FindListedDevice(item, flag));
    for (Device* seen : devices) {
      if (seen == d)
        return absl::InvalidArgumentError(absl::StrCat(flag, " lists ", item, " twice"));
    }
    devices.push_back(d);
  }
  if (devices.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " lists no device"));
  return devices;
}

}  // namespace tg
