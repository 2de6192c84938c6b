// Encodes a Graph whose tensors live in one server's buffers as a tensorgrid.v1 GraphDesc
// (tensors in dependency order, buffer handles and offsets instead of addresses), and the
// key the server caches the decoded graph under.
#ifndef TENSORGRID_CLIENT_GRAPH_ENCODER_H_
#define TENSORGRID_CLIENT_GRAPH_ENCODER_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "core/graph.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::rpc {

// Where a tensor's data lives on the server: buffer handle and byte offset.
struct RemoteLocation {
  uint64_t buffer = 0;
  uint64_t offset = 0;
};
// Resolves a tensor with memory to its location; an error when it is not on this server.
using LocateFn = std::function<absl::StatusOr<RemoteLocation>(const Tensor&)>;

struct EncodedGraph {
  tensorgrid::v1::GraphDesc desc;
  uint64_t key = 0;  // hash of every encoded field: equal keys mean identical graphs.
};

absl::StatusOr<EncodedGraph> EncodeGraph(const Graph& graph, const LocateFn& locate);
// The key alone, without building the message (the steady state of a decode loop).
absl::StatusOr<uint64_t> GraphKey(const Graph& graph, const LocateFn& locate);

}  // namespace tg::rpc

#endif  // TENSORGRID_CLIENT_GRAPH_ENCODER_H_
