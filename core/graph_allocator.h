// GraphAllocator: places the tensors of a graph in one compute buffer per device, reusing
// the memory of a tensor once its last consumer has run (liveness). Views are pointed at
// their base; tensors that already have memory elsewhere (weights) are left alone; inputs
// and outputs are never overlapped with anything still live. Not thread-safe.
#ifndef TENSORGRID_CORE_GRAPH_ALLOCATOR_H_
#define TENSORGRID_CORE_GRAPH_ALLOCATOR_H_

#include <cstddef>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/graph.h"

namespace tg {

// The offsets a plan gives: peak bytes and, per planned tensor, its offset.
struct AllocationPlan {
  size_t peak = 0;
  std::vector<std::pair<Tensor*, size_t>> offsets;
};

class GraphAllocator {
 public:
  explicit GraphAllocator(BufferType* type) : type_(type) {}

  // Which tensors this allocator is responsible for (default: all). The scheduler uses it
  // to give each device only the tensors that live there.
  void set_filter(std::function<bool(const Tensor&)> filter) { filter_ = std::move(filter); }

  // Plans the graph, grows the buffer if needed and places every tensor that has no memory
  // (or had memory in this allocator's buffer from an earlier graph).
  absl::Status Allocate(Graph& graph);
  // Plans without placing anything.
  absl::StatusOr<AllocationPlan> Plan(const Graph& graph) const;

  size_t buffer_size() const { return buffer_ ? buffer_->size() : 0; }
  Buffer* buffer() const { return buffer_.get(); }

 private:
  bool Owns(const Tensor& t) const;

  BufferType* type_;
  std::unique_ptr<Buffer> buffer_;
  std::function<bool(const Tensor&)> filter_;
};

}  // namespace tg

#endif  // TENSORGRID_CORE_GRAPH_ALLOCATOR_H_
