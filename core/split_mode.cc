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
  // One reading per device: free memory moves between two readings (a CPU device's is the
  // host's MemAvailable), and the shares must add up to one.
  std::vector<double> free;
  double total = 0;
  for (Device* d : devices) total += free.emplace_back(static_cast<double>(d->memory().free));
  std::vector<float> p;
  for (double f : free) {
    p.push_back(total > 0 ? static_cast<float>(f / total)
                          : 1.0f / static_cast<float>(devices.size()));
  }
  return p;
}

}  // namespace tg
