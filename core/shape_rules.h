// The shape and type rules of every op (docs/ops.md), in one place: the graph builder
// (ops.h) derives each result from them, and the RPC server runs ValidateNode on every
// node a client sends. Pure functions, thread-safe.
#ifndef TENSORGRID_CORE_SHAPE_RULES_H_
#define TENSORGRID_CORE_SHAPE_RULES_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace tg {

// The result an op's rule allows for a node: type, shape, strides and, for ops that alias
// memory (views, CPY, SET_ROWS), the tensor aliased and the byte offset into it.
struct NodeLayout {
  DType type = DType::kF32;
  int64_t ne[kMaxDims] = {1, 1, 1, 1};
  size_t nb[kMaxDims] = {0, 0, 0, 0};
  Tensor* view_src = nullptr;
  size_t view_offs = 0;
};

// Checks node.op's sources and op_params and returns the layout of its result. For VIEW and
// RESHAPE, whose result shape is chosen by the caller, the node's own ne (and for VIEW nb and
// view_offs) are checked and returned. Errors are INVALID_ARGUMENT naming the op and value.
absl::StatusOr<NodeLayout> ApplyShapeRule(const Tensor& node);

// ApplyShapeRule plus: the node's type, ne, nb, view_src and view_offs equal the rule's.
// Used on nodes that did not come from the builder (the network, files).
absl::Status ValidateNode(const Tensor& node);

// Number of source slots the op uses and how many of them are required (the rest optional).
struct Arity {
  int total;
  int required;
};
Arity OpArity(Op op);

}  // namespace tg

#endif  // TENSORGRID_CORE_SHAPE_RULES_H_
