// ShadowLookup: what partitioning a graph (graph_partition.h) needs to know of the meta
// device it splits for: where a tensor's memory is, the split state and per-device shadows of
// a resident tensor, the state a graph input starts in, and each device's memory. MetaDevice
// implements it over its buffers; tests implement it to drive the partitioner's parts without one.
// Implementations are thread-safe.
#ifndef TENSORGRID_META_SHADOW_LOOKUP_H_
#define TENSORGRID_META_SHADOW_LOOKUP_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/backend.h"
#include "core/tensor.h"
#include "meta/shadow_set.h"
#include "meta/split_state.h"

namespace tg::meta {

class ShadowLookup {
 public:
  // Where a tensor's memory is, as a partition sees it.
  enum class Home {
    kElsewhere,  // not placed in the device's memory.
    kResident,   // a weights / KV-cache buffer: its shadows exist (ResidentShadows).
    kGraph,      // a compute buffer: the partition plan makes its shadows.
  };

  virtual ~ShadowLookup() = default;

  virtual int n_devices() const = 0;
  virtual absl::string_view name() const = 0;  // for error messages.
  // Judged by t.buffer (a view's buffer is its root's).
  virtual Home HomeOf(const Tensor& t) const = 0;
  // The state and shadows of a kResident tensor; nullopt where none were made.
  virtual std::optional<ShadowSet> ResidentShadows(const Tensor& t) const = 0;
  // Changes whenever a resident tensor of this device is placed: a plan that bound resident
  // leafs by address holds only while it is unchanged.
  virtual uint64_t ResidentGeneration() const = 0;
  // The state a graph input starts in (the SplitFn's), checked against t's shape.
  virtual absl::StatusOr<SplitState> DecideSplit(const Tensor& t) const = 0;
  // The memory of device d: where its shadows of resident tensors live and where its
  // compute memory for plans is allocated.
  virtual BufferType* DeviceBufferType(int d) const = 0;
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_SHADOW_LOOKUP_H_
