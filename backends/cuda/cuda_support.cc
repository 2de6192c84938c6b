#include "backends/cuda/cuda_support.h"

#include <climits>

#include "backends/cuda/kernel_types.h"
#include "backends/cuda/kernels.h"

namespace tg::cuda {
namespace {

size_t LoadAlignment(DType type) {
  // Blocks are read with 2-byte loads (quant_math.h); MXFP4's 17-byte blocks byte by byte,
  // but the matrix-vector kernel stages its rows with 2-byte loads as well.
  if (IsQuantized(type)) return 2;
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

// The kernels switch over kernel_types.h's types; any other (a type added to DType later)
// has no kernel.
bool KernelsKnow(DType type) { return BlockBytesOf(static_cast<int>(type)) != 0; }

// A same-type copy between dense tensors is a device memcpy (cuda_ops.cc), whatever the type.
bool IsByteCopy(const Tensor& node) {
  return (node.op == Op::kCpy || node.op == Op::kCont) && node.src[0]->type == node.type &&
         node.src[0]->IsContiguous() && node.IsContiguous();
}

bool TypesKnown(const Tensor& node) {
  if (!KernelsKnow(node.type)) return false;
  for (const Tensor* s : node.src) {
    if (s != nullptr && !KernelsKnow(s->type)) return false;
  }
  return true;
}

bool FitsInt(int64_t v) { return v >= 0 && v <= INT_MAX; }

}  // namespace

bool GemmFitsCublas(const Tensor& mul_mat) {
  const Tensor& a = *mul_mat.src[0];
  // Operands whose strides do not fit an int are copied densely first.
  return FitsInt(a.ne[0]) && FitsInt(a.ne[1]) && FitsInt(mul_mat.src[1]->ne[1]);
}

MulMatPath ChooseMulMatPath(const Tensor& mul_mat, const PathOptions& options) {
  const Tensor& a = *mul_mat.src[0];
  const int64_t cols = mul_mat.src[1]->ne[1];
  if (cols <= kMatVecMaxColumns) return MulMatPath::kMatVec;
  if (a.type == DType::kF32 || a.type == DType::kBF16) return MulMatPath::kGemmF32;
  if (IsQuantizedType(static_cast<int>(a.type)) && options.cc >= kMinTensorCoreCc &&
      cols <= options.tuning.mmq_max_batch && a.ne[0] % 32 == 0) {
    return MulMatPath::kMmq;
  }
  return MulMatPath::kGemmF16;
}

bool UseFlashAttnMma(const Tensor& fa, const PathOptions& options) {
  const Tensor& q = *fa.src[0];
  const Tensor& k = *fa.src[1];
  const Tensor& v = *fa.src[2];
  const int64_t d = q.ne[0];
  return options.cc >= kMinTensorCoreCc && (d == 64 || d == 128) && v.ne[0] == d &&
         k.type == DType::kF16 && v.type == DType::kF16 &&
         q.ne[1] >= options.tuning.fa_mma_min_queries;
}

bool PromptSized(const Tensor& node, int64_t max_tokens) {
  switch (node.op) {
    case Op::kMulMat:
      return node.src[1]->ne[1] > max_tokens;
    case Op::kMulMatId:
      return node.src[2]->ne[1] > max_tokens;  // tokens of the ids.
    case Op::kFlashAttn:
      return node.src[0]->ne[1] > max_tokens;  // queries.
    default:
      return false;
  }
}

bool KernelAligned(const Tensor& t) {
  const size_t align = LoadAlignment(t.type);
  // A quantized row is dense (nb[0] is the block size, 17 bytes for MXFP4): its start counts.
  for (int d = IsQuantized(t.type) ? 1 : 0; d < kMaxDims; ++d) {
    if (t.nb[d] % align != 0) return false;
  }
  return t.view_src == nullptr || t.view_offs % align == 0;
}

bool CudaSupportsOp(const Tensor& node) {
  if (static_cast<int>(node.op) >= static_cast<int>(Op::kCount)) return false;
  if (node.op == Op::kNone || IsViewOp(node.op)) return true;
  if (IsByteCopy(node)) return true;    // cudaMemcpyAsync: any type, any alignment.
  if (!TypesKnown(node)) return false;  // the scheduler gives the node to the CPU.
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
    case Op::kSoftMax:  // sinks: no CUDA kernel yet, the scheduler runs it on the CPU.
      return node.src[2] == nullptr;
    case Op::kSample:  // no CUDA kernel yet: the scheduler runs it on the CPU.
    case Op::kArgsort:
    case Op::kTopK:
    case Op::kSumRows:
    case Op::kDiv:
    case Op::kSwigluOai:
      return false;
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
