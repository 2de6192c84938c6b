// How a 2D (strided) copy between host memory and a GPU is issued (Buffer::SetTensor2D,
// GetTensor2D and the stream's async forms), as plain C++ so that unit tests check it without
// a GPU: nothing, one linear cudaMemcpy when the rows lie back to back on both sides, one
// cudaMemcpy2D otherwise, or row by row when a pitch is beyond what cudaMemcpy2D takes.
// The range must have passed CheckTensorRange2D. Pure; thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_COPY_2D_PLAN_H_
#define TENSORGRID_BACKENDS_CUDA_COPY_2D_PLAN_H_

#include <cstddef>

#include "core/strided_range.h"

namespace tg::cuda {

// cudaMemcpy2D refuses a pitch above cudaDeviceProp::memPitch, which is 2^31 - 1 on every
// CUDA GPU so far; rows farther apart go row by row.
inline constexpr size_t kMaxCopyPitch = (size_t{1} << 31) - 1;

struct Copy2DPlan {
  enum class Kind {
    kNone,     // no bytes to move.
    kLinear,   // one cudaMemcpy of `bytes`.
    kPitched,  // one cudaMemcpy2D: `height` rows of `width` bytes.
    kRows,     // one cudaMemcpy per row (Buffer's default 2D loop).
  };
  Kind kind = Kind::kNone;
  size_t bytes = 0;
  size_t width = 0;
  size_t height = 0;
  size_t device_pitch = 0;  // the tensor's stride.
  size_t host_pitch = 0;
};

Copy2DPlan PlanCopy2D(const StridedRange& r, size_t max_pitch = kMaxCopyPitch);

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_COPY_2D_PLAN_H_
