#include "backends/cuda/cuda_support.h"

#include <climits>

#include "backends/cuda/kernels.h"

namespace tg::cuda {
namespace {

size_t LoadAlignment(DType type) {
  if (IsQuantized(type)) return 2;  // blocks are read with 2-byte loads (quant_math.h).
  return BlockBytes(type);
}

// Quantized types a kernel can write (the reference quantizers in quant_math.h).
bool WritableQuantized(DType type) { return type == DType::kQ8_0 || type == DType::kQ4_0; }

bool CopySupported(DType from, DType to) {
  if (from == to) return true;
  if (IsQuantized(from) && IsQuantized(to)) return false;
  if (IsQuantized(to)) return WritableQuantized(to);
  return true;  // plain <-> plain, quantized -> plain (the shape rules allow those to F32).
}

bool FitsInt(int64_t v) { return v >= 0 && v <= INT_MAX; }

}  // namespace

bool GemmFitsCublas(const Tensor& mul_mat) {
  const Tensor& a = *mul_mat.src[0];
  // Operands whose strides do not fit an int are copied densely first.
  return FitsInt(a.ne[0]) && FitsInt(a.ne[1]) && FitsInt(mul_mat.src[1]->ne[1]);
}

MulMatPath ChooseMulMatPath(const Tensor& mul_mat) {
  const Tensor& a = *mul_mat.src[0];
  if (mul_mat.src[1]->ne[1] <= kMatVecMaxColumns) return MulMatPath::kMatVec;
  if (a.type == DType::kF32 || a.type == DType::kBF16) return MulMatPath::kGemmF32;
  return MulMatPath::kGemmF16;
}

bool KernelAligned(const Tensor& t) {
  const size_t align = LoadAlignment(t.type);
  for (int d = 0; d < kMaxDims; ++d) {
    if (t.nb[d] % align != 0) return false;
  }
  return t.view_src == nullptr || t.view_offs % align == 0;
}

bool CudaSupportsOp(const Tensor& node) {
  if (static_cast<int>(node.op) >= static_cast<int>(Op::kCount)) return false;
  if (node.op == Op::kNone || IsViewOp(node.op)) return true;
  if (!KernelAligned(node)) return false;
  for (const Tensor* s : node.src) {
    if (s != nullptr && !KernelAligned(*s)) return false;
  }
  switch (node.op) {
    case Op::kSetRows:
      return node.src[0]->type == node.type && CopySupported(DType::kF32, node.type);
    case Op::kCpy:
      return CopySupported(node.src[0]->type, node.src[1]->type);
    case Op::kCont:
      return CopySupported(node.src[0]->type, node.type);
    case Op::kFlashAttn:
      return node.src[0]->ne[0] <= kFlashAttnMaxHead && node.src[2]->ne[0] <= kFlashAttnMaxHead;
    case Op::kArgmax:
      return node.src[0]->ne[0] <= INT32_MAX;
    default:
      return true;
  }
}

bool CudaOffloadOp(const Tensor& node) {
  int64_t batch = 0;
  if (node.op == Op::kMulMat) batch = node.ne[1] * node.ne[2] * node.ne[3];
  if (node.op == Op::kMulMatId) batch = node.ne[2];  // tokens.
  return batch >= kOffloadMinBatch && CudaSupportsOp(node);
}

}  // namespace tg::cuda
