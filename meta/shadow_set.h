// ShadowSet: how one tensor of a meta device exists on the underlying devices — its split
// state and, per device, the "shadow" tensor there (the device's slice, its partial sum or
// its full copy; nullptr where the device holds nothing). Resident tensors (weights, KV
// cache) get theirs when placed; graph tensors get theirs from the stream's partition plan,
// which `owner` keeps alive. Value type; thread-compatible.
#ifndef TENSORGRID_META_SHADOW_SET_H_
#define TENSORGRID_META_SHADOW_SET_H_

#include <memory>

#include "absl/container/inlined_vector.h"
#include "core/tensor.h"
#include "meta/split_state.h"

namespace tg::meta {

// One tensor per device; inline up to 8 devices (plans copy many of these per step).
using ShadowList = absl::InlinedVector<Tensor*, 8>;

struct ShadowSet {
  SplitState state;
  ShadowList shadows;                 // one per device.
  std::shared_ptr<const void> owner;  // what owns the shadows when it is not the buffer.
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_SHADOW_SET_H_
