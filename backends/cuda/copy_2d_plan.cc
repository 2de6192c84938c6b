#include "backends/cuda/copy_2d_plan.h"

namespace tg::cuda {

Copy2DPlan PlanCopy2D(const StridedRange& r, size_t max_pitch) {
  Copy2DPlan plan;
  if (r.n_rows == 0 || r.row_size == 0) return plan;
  // One row, or rows back to back on both sides: the pitches do not matter (a single row's
  // stride may even be smaller than the row, which cudaMemcpy2D would refuse).
  if (r.n_rows == 1 || (r.stride == r.row_size && r.HostStride() == r.row_size)) {
    plan.kind = Copy2DPlan::Kind::kLinear;
    plan.bytes = r.row_size * r.n_rows;
    return plan;
  }
  plan.width = r.row_size;
  plan.height = r.n_rows;
  plan.device_pitch = r.stride;
  plan.host_pitch = r.HostStride();
  const bool pitched = plan.device_pitch <= max_pitch && plan.host_pitch <= max_pitch;
  plan.kind = pitched ? Copy2DPlan::Kind::kPitched : Copy2DPlan::Kind::kRows;
  return plan;
}

}  // namespace tg::cuda
