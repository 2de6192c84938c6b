#include "core/split_mode.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "core/enum_names.h"

namespace tg {

namespace {

constexpr EnumName<SplitMode> kSplitModes[] = {
    {SplitMode::kNone, "none"}, {SplitMode::kLayer, "layer"}, {SplitMode::kTensor, "tensor"}};

}  // namespace

absl::StatusOr<SplitMode> ParseSplitMode(absl::string_view name) {
  if (std::optional<SplitMode> mode = ValueOf(kSplitModes, name)) return *mode;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown split mode '", name, "' (", NameList(kSplitModes), ")"));
}

absl::string_view SplitModeName(SplitMode mode) { return NameOf(kSplitModes, mode, "none"); }

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
