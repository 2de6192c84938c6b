// PlanTape: every tensor a partition plan creates (per-device shadows, views, packed and
// gathered copies), in creation order, so that the plan can be *replayed*. A graph of the
// same structure as the plan's but other shapes (the next decode step: the KV range grows)
// runs the same derivation again; each creation then takes the next tensor of the tape and
// refreshes it in place instead of allocating, and runs the shape rule again only where a
// source or an argument changed (in a decode step: the mask, the KV views and what reads
// them). A replay that asks for anything else than the tape holds next (another op, other
// sources) is a mismatch: the plan no longer fits and must be built afresh.
// Not thread-safe.
#ifndef TENSORGRID_META_PLAN_TAPE_H_
#define TENSORGRID_META_PLAN_TAPE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/context.h"
#include "core/tensor.h"

namespace tg::meta {

class PlanTape {
 public:
  // Starts a run: recording appends new tensors; replaying starts again at the first one.
  void Begin(bool replay);
  // Ends a run. ABORTED (a mismatch) when a replay left tensors of the tape unused.
  absl::Status End();
  bool replaying() const { return replay_; }
  // True once a replay found the graph's structure differs from the tape's.
  bool mismatch() const { return mismatch_; }
  size_t size() const { return tensors_.size(); }
  // Tensors whose shape (or view) the current replay changed.
  size_t reshaped() const { return reshaped_.size(); }

  // A tensor with a type and a contiguous shape and no op (memory is placed by the caller).
  absl::StatusOr<Tensor*> NewBlank(DType type, const int64_t ne[kMaxDims]);
  // `op` applied to `src` with `params`, shaped by the core's shape rule; errors are the
  // rule's (a failed rule takes nothing from a replay's tape).
  absl::StatusOr<Tensor*> NewNode(Op op, absl::Span<Tensor* const> src,
                                  absl::Span<const int32_t> params);
  // A VIEW of `base` at `offset` bytes past base's own start.
  absl::StatusOr<Tensor*> NewView(Tensor* base, const int64_t ne[kMaxDims],
                                  const size_t nb[kMaxDims], size_t offset);
  absl::StatusOr<Tensor*> NewReshape(Tensor* src, const int64_t ne[kMaxDims]);

  // Sets t's flags to `flags`, keeping the mark a replay put on tensors it reshaped.
  static void SetFlags(Tensor* t, uint32_t flags);

 private:
  absl::StatusOr<Tensor*> Materialize(const Tensor& proto);
  bool Unchanged(const Tensor& t, const Tensor& proto) const;
  absl::StatusOr<Tensor*> Next();
  Tensor* Append();
  void MarkReshaped(Tensor* t);
  absl::Status Mismatch();

  Context ctx_;
  std::vector<Tensor*> tensors_;   // creation order.
  std::vector<Tensor*> reshaped_;  // marked by the last run.
  size_t pos_ = 0;                 // the next tensor a replay takes.
  bool replay_ = false;
  bool mismatch_ = false;
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_PLAN_TAPE_H_
