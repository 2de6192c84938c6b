// The element types as CUDA kernels see them: tg::DType's numbers (the GGUF type ids) without
// core/dtype.h's Abseil dependencies, which nvcc need not parse. cuda_ops.cc checks at compile
// time that the numbers agree. Pure; thread-safe.
#ifndef TENSORGRID_BACKENDS_CUDA_KERNEL_TYPES_H_
#define TENSORGRID_BACKENDS_CUDA_KERNEL_TYPES_H_

#include <cstdint>

#include "backends/cuda/host_device.h"
#include "core/quant_blocks.h"

namespace tg::cuda {

enum KernelType : int {
  kTypeF32 = 0,
  kTypeF16 = 1,
  kTypeQ4_0 = 2,
  kTypeQ8_0 = 8,
  kTypeQ4_K = 12,
  kTypeQ6_K = 14,
  kTypeI32 = 26,
  kTypeBF16 = 30,
};

TG_HD bool IsQuantizedType(int type) {
  return type == kTypeQ4_0 || type == kTypeQ8_0 || type == kTypeQ4_K || type == kTypeQ6_K;
}

// Elements per block (1 for plain types).
TG_HD int BlockElems(int type) {
  switch (type) {
    case kTypeQ4_0:
      return kQK4_0;
    case kTypeQ8_0:
      return kQK8_0;
    case kTypeQ4_K:
    case kTypeQ6_K:
      return kQK_K;
    default:
      return 1;
  }
}

// Bytes per block (the element size for plain types).
TG_HD int BlockBytesOf(int type) {
  switch (type) {
    case kTypeF32:
    case kTypeI32:
      return 4;
    case kTypeF16:
    case kTypeBF16:
      return 2;
    case kTypeQ4_0:
      return static_cast<int>(sizeof(BlockQ4_0));
    case kTypeQ8_0:
      return static_cast<int>(sizeof(BlockQ8_0));
    case kTypeQ4_K:
      return static_cast<int>(sizeof(BlockQ4_K));
    case kTypeQ6_K:
      return static_cast<int>(sizeof(BlockQ6_K));
    default:
      return 0;
  }
}

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_KERNEL_TYPES_H_
