#include "models/layer_placement.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tg {
namespace {

// The sum of the proportions, once they are known to make sense.
absl::StatusOr<double> CheckArguments(int64_t n_layer, const std::vector<Device*>& devices,
                                      const std::vector<float>& proportions) {
  if (n_layer < 1)
    return absl::InvalidArgumentError(absl::StrCat("model has ", n_layer, " layers"));
  if (devices.empty()) return absl::InvalidArgumentError("--split-mode layer: no devices");
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] == nullptr) return absl::InvalidArgumentError("--split-mode layer: null device");
    for (size_t j = 0; j < i; ++j) {
      if (devices[j] == devices[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("--split-mode layer: ", devices[i]->name(), " is listed twice"));
      }
    }
  }
  if (proportions.size() != devices.size()) {
    return absl::InvalidArgumentError(absl::StrCat("--split-mode layer: ", proportions.size(),
                                                   " proportions for ", devices.size(),
                                                   " devices"));
  }
  double total = 0;
  for (float p : proportions) {
    if (!std::isfinite(p) || p < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--split-mode layer: proportion ", p, " is not a non-negative number"));
    }
    total += p;
  }
  if (total <= 0) return absl::InvalidArgumentError("--split-mode layer: all proportions are 0");
  return total;
}

}  // namespace

std::vector<Device*> LayerPlacement::UsedDevices() const {
  std::vector<Device*> used;
  for (size_t d = 0; d < devices.size(); ++d) {
    bool holds = static_cast<int>(d) == input_device || static_cast<int>(d) == output_device;
    for (int ld : layer_device) holds = holds || ld == static_cast<int>(d);
    if (holds) used.push_back(devices[d]);
  }
  return used;
}

std::string LayerPlacement::Describe() const {
  std::vector<std::string> parts;
  for (size_t d = 0; d < devices.size(); ++d) {
    int first = -1, last = -1;
    for (size_t il = 0; il < layer_device.size(); ++il) {
      if (layer_device[il] != static_cast<int>(d)) continue;
      if (first < 0) first = static_cast<int>(il);
      last = static_cast<int>(il);
    }
    std::string what = first < 0 ? "no layers" : absl::StrCat("layers ", first, "-", last);
    if (static_cast<int>(d) == input_device) absl::StrAppend(&what, ", embeddings");
    if (static_cast<int>(d) == output_device) absl::StrAppend(&what, ", output");
    parts.push_back(absl::StrCat(devices[d]->name(), ": ", what));
  }
  return absl::StrJoin(parts, "; ");
}

absl::StatusOr<LayerPlacement> PlaceLayers(int64_t n_layer, const std::vector<Device*>& devices,
                                           const std::vector<float>& proportions) {
  absl::StatusOr<double> total = CheckArguments(n_layer, devices, proportions);
  if (!total.ok()) return total.status();
  LayerPlacement placement;
  placement.devices = devices;
  placement.layer_device.resize(n_layer);
  double cumulative = 0;
  int64_t begin = 0;
  for (size_t d = 0; d < devices.size(); ++d) {
    cumulative += proportions[d];
    // The last boundary is n_layer exactly, whatever the rounding of the sum.
    const int64_t end = d + 1 == devices.size()
                            ? n_layer
                            : std::llround(cumulative / *total * static_cast<double>(n_layer));
    for (int64_t il = begin; il < end; ++il) placement.layer_device[il] = static_cast<int>(d);
    begin = std::max(begin, end);
  }
  placement.input_device = placement.layer_device.front();
  placement.output_device = placement.layer_device.back();
  return placement;
}

}  // namespace tg
