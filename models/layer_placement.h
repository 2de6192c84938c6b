// Layer placement for --split-mode layer: which device holds each repeating layer (weights and
// KV cache), the token embeddings and the output head. Contiguous layer ranges go to the
// devices in order, proportionally: device k gets layers [round(c[k-1] * n_layer),
// round(c[k] * n_layer)) where c[k] is the cumulative, normalized proportion of devices 0..k
// (so a device with proportion 0, or too small a share, gets none). The token embeddings
// go with layer 0 and the output norm and head with the last layer, so that neither adds a
// transfer. Pure functions; thread-safe.
#ifndef TENSORGRID_MODELS_LAYER_PLACEMENT_H_
#define TENSORGRID_MODELS_LAYER_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"

namespace tg {

struct LayerPlacement {
  std::vector<Device*> devices;   // as given, in layer order.
  std::vector<int> layer_device;  // per layer: index into devices.
  int input_device = 0;           // token embeddings.
  int output_device = 0;          // output norm and output head.

  Device* layer(int64_t il) const { return devices[layer_device[il]]; }
  Device* input() const { return devices[input_device]; }
  Device* output() const { return devices[output_device]; }
  // The devices that hold something, in layer order.
  std::vector<Device*> UsedDevices() const;
  // "CPU0: layers 0-2, embeddings; CPU1: layers 3-4, output" for logs and errors.
  std::string Describe() const;
};

// INVALID_ARGUMENT for no devices, a device listed twice, a proportion count that differs from
// the device count, a negative or non-finite proportion, all proportions zero, or n_layer < 1.
absl::StatusOr<LayerPlacement> PlaceLayers(int64_t n_layer, const std::vector<Device*>& devices,
                                           const std::vector<float>& proportions);

}  // namespace tg

#endif  // TENSORGRID_MODELS_LAYER_PLACEMENT_H_
