// Turns a GraphDesc from the network into a Context + Graph of validated tensors placed in a
// session's buffers, ready for Stream::Compute. Every rule a hostile client could break is
// checked here (ids, types, shapes, strides, byte ranges, ops, devices) via core/shape_rules.
#ifndef TENSORGRID_SERVER_GRAPH_DECODER_H_
#define TENSORGRID_SERVER_GRAPH_DECODER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/context.h"
#include "core/graph.h"
#include "tensorgrid/v1/tensorgrid.pb.h"

namespace tg::server {

// A buffer a handle names: the backend buffer and the bytes the client may address in it
// (the allocation may be larger than what the client asked for).
struct ResolvedBuffer {
  Buffer* buffer = nullptr;
  uint64_t size = 0;
};

// Maps a buffer handle of the session to its buffer; NOT_FOUND for unknown, freed or other
// sessions' handles.
using BufferResolver = std::function<absl::StatusOr<ResolvedBuffer>(uint64_t handle)>;

// A decoded graph. The tensors point into the session's buffers: the owner must drop the
// graph before any buffer in `handles` is freed.
struct DecodedGraph {
  std::unique_ptr<Context> ctx;
  Graph graph;
  std::vector<Tensor*> tensors;   // tensors[id - 1].
  std::vector<uint64_t> handles;  // buffer handles used (sorted, unique).
};

// Decodes and validates `desc` for `device`. Errors are INVALID_ARGUMENT (malformed graph,
// including a byte range outside its buffer) or NOT_FOUND (a handle the resolver does not
// know). Never aborts on any input.
absl::StatusOr<std::unique_ptr<DecodedGraph>> DecodeGraph(const tensorgrid::v1::GraphDesc& desc,
                                                          Device* device,
                                                          const BufferResolver& resolve);

// Checks the graph's size against rpc::kMaxGraphTensors and rpc::kMaxGraphNodes from the
// repeated fields' counts alone (INVALID_ARGUMENT naming the count and the limit), so that a
// huge graph costs nothing beyond its parse. DecodeGraph checks it first too; the counts
// form serves the scan of the wire bytes before any parse (server/request_precheck.h).
absl::Status CheckGraphSize(const tensorgrid::v1::GraphDesc& desc);
absl::Status CheckGraphSize(uint64_t tensors, uint64_t nodes);

// What the decoded form of `desc` holds in memory, estimated from its counts before decoding
// (the tensors, the node and leaf lists, the lookup tables): what a session charges for a
// cached graph.
uint64_t DecodedGraphBytes(const tensorgrid::v1::GraphDesc& desc);

// Bytes spanned by a tensor with arbitrary strides (Tensor::NumBytes with overflow checks);
// INVALID_ARGUMENT when it overflows or exceeds kMaxTensorBytes.
absl::StatusOr<uint64_t> CheckedNumBytes(const Tensor& t);

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_GRAPH_DECODER_H_
