// How a model is spread over several devices (--split-mode): none (one device), layer
// (whole layers per device, pipeline; the scheduler in core/) or tensor (every weight sliced
// over the devices, partial sums all-reduced; the meta backend in meta/).
#ifndef TENSORGRID_CORE_SPLIT_MODE_H_
#define TENSORGRID_CORE_SPLIT_MODE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/backend.h"

namespace tg {

enum class SplitMode { kNone, kLayer, kTensor };

absl::StatusOr<SplitMode> ParseSplitMode(absl::string_view name);  // "none" | "layer" | "tensor"
absl::string_view SplitModeName(SplitMode mode);

// The devices a model runs on and in what proportions.
struct DevicePlan {
  SplitMode mode = SplitMode::kNone;
  std::vector<Device*> devices;    // one for kNone; the order is the layer order for kLayer.
  std::vector<float> proportions;  // one per device, summing to 1.
  bool expert_split = false;       // kTensor: whole MoE experts per device (--expert-split).
};

// Splits are proportional to free memory when the user gives none (llama.cpp's default).
std::vector<float> ProportionsFromMemory(const std::vector<Device*>& devices);

}  // namespace tg

#endif  // TENSORGRID_CORE_SPLIT_MODE_H_
