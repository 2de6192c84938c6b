// Placements: where each tensor of the graph being partitioned stands on the devices: its
// split state and per-device shadows (a leaf's from its resident shadows or blank ones, a
// node's as derived), and the converted forms of tensors that consumers needed in another
// state (each made once: three consumers of one gathered tensor share one gather). The
// partitioner's parts find a tensor's shadows here. Kept in the plan between replays, so that
// a decode step reuses its storage. Not thread-safe.
#ifndef TENSORGRID_META_PLACEMENTS_H_
#define TENSORGRID_META_PLACEMENTS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "meta/pointer_index.h"
#include "meta/shadow_set.h"
#include "meta/split_state.h"

namespace tg::meta {

struct Placement {
  SplitState state;
  ShadowList shadows;     // per device; nullptr where the device holds nothing.
  bool detached = false;  // shadows are copies: a write into them would be lost.
  bool aliased = false;   // views of the tensor exist: never all-reduce it in place.
  int version = 0;        // bumped when an in-place all-reduce changes the state.
};

class Placements {
 public:
  // Forgets every tensor and conversion; makes room for n tensors.
  void Reset(size_t n);
  // Registers t as the next tensor (index 0, 1, ...: at most n of them).
  Placement& Add(const Tensor* t);
  // The index of a registered tensor, or -1.
  int32_t IndexOf(const Tensor* t) const { return ids_.Find(t); }
  // The placement of a registered tensor.
  Placement& Of(const Tensor* t) { return entries_[ids_.Find(t)]; }
  const Placement& at(size_t index) const { return entries_[index]; }
  size_t size() const { return used_; }

  // t's converted form in `state`, or nullptr.
  const Placement* Converted(const Tensor* t, const SplitState& state) const;
  // Records a converted form of t (stable address until the next Reset).
  const Placement* AddConverted(const Tensor* t, Placement p);

 private:
  std::vector<Placement> entries_;  // registered tensors, by index.
  size_t used_ = 0;
  PointerIndex ids_;
  std::vector<std::pair<const Tensor*, Placement*>> converted_;
  std::vector<std::unique_ptr<Placement>> pool_;  // converted forms' storage, reused.
  size_t pool_used_ = 0;
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_PLACEMENTS_H_
