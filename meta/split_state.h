// SplitState: how one tensor of a meta device is spread over its N devices.
//   MIRRORED  every device holds the whole tensor;
//   AXIS_k    device d holds the elements whose index along dimension k lies in its pieces
//             (one [begin, end) range per device, or several for fused tensors such as QKV,
//             one piece of each segment); pieces are stored back to back in the device's
//             shadow tensor, and a device may hold nothing;
//   PARTIAL   every device holds a tensor of the full shape and the value is their sum;
//             routed by experts (expert parallelism, MUL_MAT_ID over experts cut by device):
//             each row (slot i, token t) is whole on the device holding expert ids[i, t] and
//             zero on every other, so element-wise ops with f(0) = 0 may run on it as it is.
// Value type; thread-compatible.
#ifndef TENSORGRID_META_SPLIT_STATE_H_
#define TENSORGRID_META_SPLIT_STATE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/tensor.h"

namespace tg::meta {

enum class SplitKind { kMirrored, kAxis, kPartial };

// Elements [begin, end) along the split axis.
struct AxisRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const AxisRange& o) const { return begin == o.begin && end == o.end; }
};

class SplitState {
 public:
  SplitState() = default;  // MIRRORED.
  static SplitState Mirrored() { return SplitState(); }
  static SplitState Partial();
  // One range per device, in device order.
  static SplitState Axis(int axis, std::vector<AxisRange> ranges);
  // pieces[d]: the ranges device d holds, in the order they are stored on it.
  static SplitState Segmented(int axis, std::vector<std::vector<AxisRange>> pieces);
  // PARTIAL routed by experts: device d holds the rows whose expert id (in `ids`, a graph
  // tensor [n_used, T]) lies in experts[d], zeros elsewhere.
  static SplitState ExpertPartial(std::vector<AxisRange> experts, const Tensor* ids);

  SplitKind kind() const { return kind_; }
  bool is_mirrored() const { return kind_ == SplitKind::kMirrored; }
  bool is_axis() const { return kind_ == SplitKind::kAxis; }
  bool is_partial() const { return kind_ == SplitKind::kPartial; }
  int axis() const { return axis_; }  // valid for kAxis.
  // PARTIAL routed by experts (ExpertPartial); range(d) is then device d's experts.
  bool by_experts() const { return is_partial() && routed_by_ != nullptr; }
  const Tensor* routed_by() const { return routed_by_; }
  int n_devices() const { return n_devices_; }
  absl::Span<const AxisRange> pieces(int d) const;
  // True when some device holds more than one piece.
  bool segmented() const { return !starts_.empty(); }
  // The single range of device d (unsegmented AXIS states; experts of a by_experts() state).
  const AxisRange& range(int d) const { return ranges_[d]; }
  // Elements along the axis that device d holds.
  int64_t Count(int d) const;
  // Device d holds nothing of a tensor in this state (AXIS with no elements).
  bool Empty(int d) const { return is_axis() && Count(d) == 0; }

  // The same split moved to another axis, with every bound multiplied by num / den (exact).
  SplitState Remapped(int axis, int64_t num, int64_t den) const;

  // Checks the state against a tensor: axis in range, pieces inside ne[axis], disjoint and
  // covering it exactly, whole quant blocks along dimension 0, one entry per device.
  absl::Status Validate(const Tensor& t, int n_devices) const;

  bool operator==(const SplitState& o) const;
  bool operator!=(const SplitState& o) const { return !(*this == o); }
  // "MIRRORED", "PARTIAL", "AXIS_1[0:4|4:8]", segmented pieces joined by '+'.
  std::string ToString() const;

 private:
  // Decode steps derive hundreds of states: up to 8 devices they live inline (no heap).
  SplitKind kind_ = SplitKind::kMirrored;
  int axis_ = -1;
  int n_devices_ = 0;
  // Every piece, device by device (kAxis); each device's experts (by_experts()).
  absl::InlinedVector<AxisRange, 8> ranges_;
  absl::InlinedVector<int32_t, 1> starts_;  // segmented: device d's pieces start here.
  // by_experts(): the ids tensor of the graph being partitioned (compared, never read).
  const Tensor* routed_by_ = nullptr;
};

// The shape device d's shadow of `t` has in `state`.
void ShadowShape(const Tensor& t, const SplitState& state, int d, int64_t ne[kMaxDims]);

// Splits [0, extent) into one range per device, proportional to `proportions`, in whole
// units of `unit` elements (the last unit may be shorter when unit does not divide extent).
// Bounds are rounded cumulatively, so a device may get an empty range.
std::vector<AxisRange> ProportionalRanges(int64_t extent, int64_t unit,
                                          absl::Span<const float> proportions);

// Decides the split state of a tensor placed in a meta buffer (weights and KV cache by
// name; graph inputs too). Called from Buffer::InitTensor and MetaStream::Compute, on one
// thread at a time per device. An error fails the placement with its message.
using SplitFn = std::function<absl::StatusOr<SplitState>(const Tensor& t)>;

}  // namespace tg::meta

#endif  // TENSORGRID_META_SPLIT_STATE_H_
