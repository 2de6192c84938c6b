// Running one op case: building its graph, computing it with the naive f64 reference on host
// memory, or placing it on a device (leaf data uploaded) so that a Stream can compute it, and
// reading the output back as a host copy that outlives the graph.
#ifndef TENSORGRID_TOOLS_TG_OPS_OP_RUNNER_H_
#define TENSORGRID_TOOLS_TG_OPS_OP_RUNNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/context.h"
#include "core/graph.h"
#include "core/graph_allocator.h"
#include "tools/tg-ops/case_builder.h"

namespace tg::ops_tool {

// Builds a case's graph in the builder's Context; returns the output node.
using BuildFn = std::function<absl::StatusOr<Tensor*>(CaseBuilder&)>;

// A tensor's metadata and bytes copied to the host, detached from its graph and buffer.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(const Tensor& meta, std::vector<uint8_t> bytes);
  // The metadata with `data` pointing at the host bytes (valid while this object lives).
  Tensor tensor() const;

 private:
  Tensor meta_;
  std::vector<uint8_t> bytes_;
};

// A case built in its own Context: its leafs (in creation order), output and graph.
struct BuiltCase {
  std::unique_ptr<Context> ctx;
  std::vector<Leaf> leafs;
  Tensor* out = nullptr;
  Graph graph;
};

absl::StatusOr<BuiltCase> BuildCase(const BuildFn& build);

// Computes `built` (freshly built, not placed) with tg::ref on host memory.
absl::StatusOr<HostTensor> RunReference(BuiltCase& built, const LeafData& data);

// A case placed on one device with its leaf data uploaded, ready for Stream::Compute.
struct DeviceGraph {
  BuiltCase built;
  std::unique_ptr<GraphAllocator> allocator;
};

absl::StatusOr<DeviceGraph> PrepareOnDevice(const BuildFn& build, Device& device,
                                            const LeafData& data);

// Copies a placed tensor (any device) to the host.
absl::StatusOr<HostTensor> ReadBack(const Tensor& t);

// The first node of `graph` that `device` does not support, or nullptr.
const Tensor* FirstUnsupportedNode(const Graph& graph, const Device& device);

}  // namespace tg::ops_tool

#endif  // TENSORGRID_TOOLS_TG_OPS_OP_RUNNER_H_
