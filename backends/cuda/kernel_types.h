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
  kTypeQ5_0 = 6,
  kTypeQ5_1 = 7,
  kTypeQ8_0 = 8,
  kTypeQ2_K = 10,
  kTypeQ3_K = 11,
  kTypeQ4_K = 12,
  kTypeQ5_K = 13,
  kTypeQ6_K = 14,
  kTypeIQ4_NL = 20,
  kTypeIQ4_XS = 23,
  kTypeI32 = 26,
  kTypeBF16 = 30,
  kTypeMXFP4 = 39,
};

// The block size of the 32-element types (the unit of the quantized matrix kernels).
inline constexpr int kBlock32 = 32;
static_assert(kQK4_0 == kBlock32 && kQK5_0 == kBlock32 && kQK5_1 == kBlock32 &&
              kQK8_0 == kBlock32 && kQK4_NL == kBlock32 && kQKMXFP4 == kBlock32);

// Elements per block (1 for plain types).
TG_HD int BlockElems(int type) {
  switch (type) {
    case kTypeQ4_0:
    case kTypeQ5_0:
    case kTypeQ5_1:
    case kTypeQ8_0:
    case kTypeIQ4_NL:
    case kTypeMXFP4:
      return kBlock32;
    case kTypeQ2_K:
    case kTypeQ3_K:
    case kTypeQ4_K:
    case kTypeQ5_K:
    case kTypeQ6_K:
    case kTypeIQ4_XS:
      return kQK_K;
    default:
      return 1;
  }
}

TG_HD bool IsQuantizedType(int type) { return BlockElems(type) > 1; }

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
    case kTypeQ5_0:
      return static_cast<int>(sizeof(BlockQ5_0));
    case kTypeQ5_1:
      return static_cast<int>(sizeof(BlockQ5_1));
    case kTypeQ2_K:
      return static_cast<int>(sizeof(BlockQ2_K));
    case kTypeQ3_K:
      return static_cast<int>(sizeof(BlockQ3_K));
    case kTypeQ5_K:
      return static_cast<int>(sizeof(BlockQ5_K));
    case kTypeIQ4_NL:
      return static_cast<int>(sizeof(BlockIQ4_NL));
    case kTypeIQ4_XS:
      return static_cast<int>(sizeof(BlockIQ4_XS));
    case kTypeMXFP4:
      return static_cast<int>(sizeof(BlockMXFP4));
    default:
      return 0;
  }
}

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_KERNEL_TYPES_H_
