// Element math of the peer-to-peer all-reduce kernels (allreduce.cu), shared with the host
// tests that emulate one-shot and two-shot on plain arrays: values on the wire (F32 or BF16)
// and the sum over ranks, always in rank order so that every rank gets the same bits.
// Pure; thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_ALLREDUCE_MATH_H_
#define TENSORGRID_BACKENDS_CUDA_ALLREDUCE_MATH_H_

#include <cstddef>
#include <cstdint>

#include "backends/cuda/host_device.h"
#include "backends/cuda/quant_math.h"

namespace tg::cuda {

// Ranks one all-reduce kernel reads from (a process's GPUs, or virtual devices).
inline constexpr int kMaxAllReduceRanks = 16;

TG_HD float LoadWire(const void* p, size_t i, bool bf16) {
  return bf16 ? BF16ToF32(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

TG_HD void StoreWire(void* p, size_t i, float v, bool bf16) {
  if (bf16) {
    static_cast<uint16_t*>(p)[i] = F32ToBF16(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

// Element i summed over srcs[0..n) in that order.
TG_HD float SumRanks(const void* const* srcs, int n, size_t i, bool bf16) {
  float acc = LoadWire(srcs[0], i, bf16);
  for (int r = 1; r < n; ++r) acc += LoadWire(srcs[r], i, bf16);
  return acc;
}

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_ALLREDUCE_MATH_H_
