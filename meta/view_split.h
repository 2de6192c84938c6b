// How an AXIS split passes through the ops that only re-describe memory:
//   RESHAPE (and CPY between shapes): logical — the split axis must survive as one axis of
//     the new shape with whole-index bounds (q [n_embd_q, T] cut in whole heads becomes
//     [head_dim, n_head, T] cut along dim 1);
//   VIEW: in memory — every dimension of the view must walk along one dimension of its root
//     without wrapping, and the root's split dimension must be covered by an outermost view
//     dimension whose steps never straddle two devices (the KV cache [n_embd_kv, n_ctx] cut
//     in whole KV heads, viewed as [head_dim, n_kv, n_head_kv], is cut along dim 2);
//   PERMUTE: the split axis moves with its dimension.
// When a split cannot pass, callers gather the tensor instead. Pure functions, thread-safe.
#ifndef TENSORGRID_META_VIEW_SPLIT_H_
#define TENSORGRID_META_VIEW_SPLIT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "meta/split_state.h"

namespace tg::meta {

// The tensor whose memory t is (t itself unless t is a view).
inline Tensor* ViewRoot(Tensor* t) { return t->view_src != nullptr ? t->view_src : t; }

// The split of a tensor of shape `to` holding the elements of a `from`-shaped tensor in
// `state` (AXIS, unsegmented) in the same logical order; nullopt when it is not an AXIS split.
std::optional<SplitState> MapReshapeSplit(const int64_t from[kMaxDims], const SplitState& state,
                                          const int64_t to[kMaxDims]);

// One device's part of a view of a split root: its shape, strides, and byte offset into the
// device's (contiguous) shadow of the root.
struct ViewSlice {
  int64_t ne[kMaxDims] = {1, 1, 1, 1};
  size_t nb[kMaxDims] = {0, 0, 0, 0};
  size_t offset = 0;
  bool empty = true;
};

struct ViewSplit {
  SplitState state;               // the view's split.
  std::vector<ViewSlice> slices;  // per device.
};

// `view` is a VIEW/RESHAPE node (or any tensor with view_src) of contiguous `root` in
// `root_state` (AXIS, unsegmented).
std::optional<ViewSplit> MapViewSplit(const Tensor& root, const SplitState& root_state,
                                      const Tensor& view);

// PERMUTE(axes) of a tensor in `state`: the split follows its dimension.
SplitState PermuteSplit(const SplitState& state, const int32_t axes[kMaxDims]);

}  // namespace tg::meta

#endif  // TENSORGRID_META_VIEW_SPLIT_H_
