// Options for the GPU tests that run one all-reduce path on purpose: every tensor takes the
// given algorithm, with BF16 on the wire at every size or at none. Header-only test support.
// Pure; thread-safe.
#ifndef TENSORGRID_TESTS_GPU_FORCED_ALLREDUCE_H_
#define TENSORGRID_TESTS_GPU_FORCED_ALLREDUCE_H_

#include <cstdint>

#include "backends/cuda/allreduce_plan.h"
#include "backends/cuda/cuda_collectives.h"

namespace tg::testing {

inline cuda::CollectiveOptions ForcedAllReduce(cuda::AllReduceAlgorithm algorithm, bool bf16) {
  cuda::CollectiveOptions o;
  o.force = algorithm;
  o.thresholds.bf16_min_bytes = bf16 ? 0 : SIZE_MAX;
  return o;
}

}  // namespace tg::testing

#endif  // TENSORGRID_TESTS_GPU_FORCED_ALLREDUCE_H_
