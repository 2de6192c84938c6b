// The per-op rules of tensor parallelism: given the split states of a node's sources, the
// state of its result and the state each source must be brought to first. Examples:
//   MUL_MAT(W cut along its rows = AXIS_1, x MIRRORED)     -> AXIS_0 (x stays whole)
//   MUL_MAT(W cut along K = AXIS_0, x AXIS_0 alike)         -> PARTIAL (sum is the result)
//   ADD(MIRRORED residual, PARTIAL)                         -> the PARTIAL is all-reduced first
//   RMS_NORM / SOFT_MAX over a cut row                      -> gathered first
//   ROPE / FLASH_ATTN on head-cut tensors                   -> keep the head cut
// A rule never asks to convert a write destination (SET_ROWS dst, CPY dst): the result takes
// the destination's state and the data is brought to it. Ops without a rule for a split
// fall back to MIRRORED sources. View ops (VIEW, RESHAPE, PERMUTE, TRANSPOSE) are mapped by
// view_split.h instead. Pure functions, thread-safe.
#ifndef TENSORGRID_META_SPLIT_RULES_H_
#define TENSORGRID_META_SPLIT_RULES_H_

#include <array>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/tensor.h"
#include "meta/split_state.h"

namespace tg::meta {

struct OpSplit {
  SplitState result;
  // Per source slot: the state it must be in (nullopt: as it is; always nullopt for an
  // absent source and for write destinations).
  std::array<std::optional<SplitState>, kMaxSrc> src;
};

// The source slot `op` writes into in place (SET_ROWS: 0, CPY: 1), or -1.
inline int WriteDestination(Op op) { return op == Op::kSetRows ? 0 : op == Op::kCpy ? 1 : -1; }

// `src_states[i]` is the state of node.src[i] (ignored where the source is absent).
// UNIMPLEMENTED for a write into a tensor split in a way the op cannot write (SET_ROWS into
// a tensor cut along its rows, any write into a PARTIAL tensor).
absl::StatusOr<OpSplit> DeriveOpSplit(const Tensor& node,
                                      absl::Span<const SplitState* const> src_states);

}  // namespace tg::meta

#endif  // TENSORGRID_META_SPLIT_RULES_H_
