#include "core/split_mode.h"

#include "absl/strings/str_cat.h"

namespace tg {

absl::StatusOr<SplitMode> ParseSplitMode(absl::string_view name) {
  if (name == "none") return SplitMode::kNone;
  if (name == "layer") return SplitMode::kLayer;
  if (name == "tensor") return SplitMode::kTensor;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown split mode '", name, "' (none, layer, tensor)"));
}

absl::string_view SplitModeName(SplitMode mode) {
  switch (mode) {
    case SplitMode::kNone:
      return "none";
    case SplitMode::kLayer:
      return "layer";
    case SplitMode::kTensor:
      return "tensor";
  }
  return "none";
}

std::vector<float> ProportionsFromMemory(const std::vector<Device*>& devices) {
  std::vector<float> p;
  double total = 0;
  for (Device* d : devices) total += static_cast<double>(d->memory().free);
  for (Device* d : devices) {
    p.push_back(total > 0 ? static_cast<float>(d->memory().free / total)
                          : 1.0f / static_cast<float>(devices.size()));
  }
  return p;
}

}  // namespace tg
