// Device assignment for the scheduler: decides, for every node and leaf of a graph, which of
// an ordered list of devices (first = highest priority) computes it or holds it. The passes
// follow ggml_backend_sched:
//   1. pin: tensors that already have memory live where that memory is; a node that writes
//      into memory (a view, SET_ROWS, CPY: view_src) runs where that memory is; a node that
//      reads a weight runs where its largest weight lives, unless that weight is in host
//      memory and a higher-priority device that supports the node asks for it
//      (Device::OffloadOp, ggml's op offload: a GPU for a large prompt batch), which then
//      runs it and reads a copy of the weight made for its split;
//   2. expand: unassigned nodes take the device of the previous (then the next) assigned node
//      in graph order, first spreading only higher-priority devices, then all;
//   3. upgrade: a node moves to a higher-priority device that shares its device's buffer type,
//      supports the op and can read every input's memory; a node still unassigned goes to the
//      device that supports it and can read most of its inputs;
//   4. the rest: views go with their base, graph inputs with their first consumer.
// Every computed node ends on a device whose SupportsOp accepts it, or the result is an error
// naming the node. Pure function of its arguments; thread-compatible.
#ifndef TENSORGRID_CORE_SCHEDULER_ASSIGN_H_
#define TENSORGRID_CORE_SCHEDULER_ASSIGN_H_

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/backend.h"
#include "core/graph.h"

namespace tg {

// Tensor -> index into the device list, for every node and leaf of a graph.
class DeviceAssignment {
 public:
  // The device index of t, or -1 when t is not assigned.
  int Get(const Tensor* t) const {
    auto it = map_.find(t);
    return it == map_.end() ? -1 : it->second;
  }
  void Set(const Tensor* t, int device) { map_[t] = device; }
  size_t size() const { return map_.size(); }

 private:
  absl::flat_hash_map<const Tensor*, int> map_;
};

// The tensor that owns t's memory (its view base, or t itself).
inline const Tensor* MemoryOwner(const Tensor* t) {
  return t->view_src != nullptr ? t->view_src : t;
}

// Runs the passes above. FAILED_PRECONDITION when a tensor's memory belongs to no usable
// device, INVALID_ARGUMENT when no device supports a node's op.
absl::StatusOr<DeviceAssignment> AssignDevices(const Graph& graph,
                                               absl::Span<Device* const> devices);

}  // namespace tg

#endif  // TENSORGRID_CORE_SCHEDULER_ASSIGN_H_
