#include "backends/cuda/cuda_ops.h"

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_status.h"
#include "core/dtype.h"
#include "core/ops.h"

namespace tg::cuda {

// The kernels compare DType values through kernel_types.h's numbers.
static_assert(static_cast<int>(DType::kF32) == kTypeF32);
static_assert(static_cast<int>(DType::kF16) == kTypeF16);
static_assert(static_cast<int>(DType::kBF16) == kTypeBF16);
static_assert(static_cast<int>(DType::kI32) == kTypeI32);
static_assert(static_cast<int>(DType::kQ4_0) == kTypeQ4_0);
static_assert(static_cast<int>(DType::kQ8_0) == kTypeQ8_0);
static_assert(static_cast<int>(DType::kQ4_K) == kTypeQ4_K);
static_assert(static_cast<int>(DType::kQ6_K) == kTypeQ6_K);
static_assert(static_cast<int>(DType::kQ5_0) == kTypeQ5_0);
static_assert(static_cast<int>(DType::kQ5_1) == kTypeQ5_1);
static_assert(static_cast<int>(DType::kQ2_K) == kTypeQ2_K);
static_assert(static_cast<int>(DType::kQ3_K) == kTypeQ3_K);
static_assert(static_cast<int>(DType::kQ5_K) == kTypeQ5_K);
static_assert(static_cast<int>(DType::kIQ4_NL) == kTypeIQ4_NL);
static_assert(static_cast<int>(DType::kIQ4_XS) == kTypeIQ4_XS);
static_assert(static_cast<int>(DType::kMXFP4) == kTypeMXFP4);

TensorView ViewOf(const Tensor& t) {
  TensorView v;
  v.data = static_cast<char*>(t.data);
  v.type = static_cast<int>(t.type);
  for (int d = 0; d < kMaxDims; ++d) {
    v.ne[d] = t.ne[d];
    v.nb[d] = static_cast<int64_t>(t.nb[d]);
  }
  return v;
}

bool ChecksIndices(const Tensor& node) {
  return node.op == Op::kGetRows || node.op == Op::kSetRows || node.op == Op::kMulMatId;
}

RopeArgs RopeArgsOf(const RopeParams& p) {
  const YarnRamp ramp = YarnRampOf(p);
  return {.n_dims = p.n_dims,
          .neox = (p.mode & kRopeNeox) != 0,
          .freq_base = p.freq_base,
          .freq_scale = p.freq_scale,
          .ext_factor = p.ext_factor,
          .mscale = RopeMscaleOf(p),
          .ramp_lo = ramp.lo,
          .ramp_hi = ramp.hi};
}

namespace {

cudaError_t Launch(NodeContext& ctx, Tensor* node) {
  const TensorView dst = ViewOf(*node);
  const TensorView a = ViewOf(*node->src[0]);
  const cudaStream_t s = ctx.stream;
  auto optional = [](const Tensor* t, TensorView* v) -> const TensorView* {
    if (t == nullptr) return nullptr;
    *v = ViewOf(*t);
    return v;
  };
  TensorView extra;
  switch (node->op) {
    case Op::kGetRows:
      return LaunchGetRows(dst, a, ViewOf(*node->src[1]), ctx.err, s);
    case Op::kSetRows:
      return LaunchSetRows(dst, ViewOf(*node->src[1]), ViewOf(*node->src[2]), ctx.err, s);
    case Op::kAdd:
      return LaunchBinary(BinaryOp::kAdd, dst, a, ViewOf(*node->src[1]), s);
    case Op::kMul:
      return LaunchBinary(BinaryOp::kMul, dst, a, ViewOf(*node->src[1]), s);
    case Op::kScale:
      return LaunchUnary(UnaryOp::kScale, node->ParamF32(0), node->ParamF32(1), dst, a, s);
    case Op::kSilu:
      return LaunchUnary(UnaryOp::kSilu, 0.0f, 0.0f, dst, a, s);
    case Op::kSwiglu:
      return LaunchSwiglu(dst, a, ViewOf(*node->src[1]), s);
    case Op::kRmsNorm:
      return LaunchRmsNorm(dst, a, node->ParamF32(0), s);
    case Op::kSoftMax:
      return LaunchSoftMax(dst, a, optional(node->src[1], &extra), node->ParamF32(0), s);
    case Op::kRope:
      return LaunchRope(dst, a, ViewOf(*node->src[1]), optional(node->src[2], &extra),
                        RopeArgsOf(RopeParamsOf(*node)), s);
    case Op::kArgmax:
      return LaunchArgmax(dst, a, s);
    case Op::kCpy:
    case Op::kCont:
      return LaunchCopy(dst, a, s);
    case Op::kFlashAttn: {
      const TensorView k = ViewOf(*node->src[1]), v = ViewOf(*node->src[2]);
      const TensorView* mask = optional(node->src[3], &extra);
      if (UseFlashAttnMma(*node, ctx.paths) && FlashAttnMmaFits(a, k, v, dst)) {
        return LaunchFlashAttnMma(dst, a, k, v, mask, node->ParamF32(0), s);
      }
      return LaunchFlashAttn(dst, a, k, v, mask, node->ParamF32(0), s);
    }
    default:
      return cudaErrorNotSupported;
  }
}

cudaError_t LaunchFused(NodeContext& ctx, const FusedStep& step) {
  switch (step.kind) {
    case FusionKind::kRmsNormMul: {
      const Tensor& norm = *step.nodes[0];
      const Tensor& mul = *step.nodes[1];
      return LaunchRmsNormMul(ViewOf(mul), ViewOf(*norm.src[0]), ViewOf(*mul.src[1]),
                              norm.ParamF32(0), ctx.stream);
    }
    case FusionKind::kRopePair: {
      const Tensor& r0 = *step.nodes[0];
      const Tensor& r1 = *step.nodes[1];
      TensorView ff;
      if (r0.src[2] != nullptr) ff = ViewOf(*r0.src[2]);
      return LaunchRopePair(ViewOf(r0), ViewOf(*r0.src[0]), ViewOf(r1), ViewOf(*r1.src[0]),
                            ViewOf(*r0.src[1]), r0.src[2] != nullptr ? &ff : nullptr,
                            RopeArgsOf(RopeParamsOf(r0)), ctx.stream);
    }
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

absl::Status RunFused(NodeContext& ctx, const FusedStep& step) {
  if (step.kind == FusionKind::kGateUpSwiglu) {
    return RunGateUpSwiglu(ctx, *step.nodes[0], *step.nodes[1], step.nodes[2]);
  }
  if (const cudaError_t err = LaunchFused(ctx, step); err != cudaSuccess) {
    return CudaError(err, step.kind == FusionKind::kRopePair ? "fused ROPE pair kernel launch"
                                                             : "fused RMS_NORM+MUL kernel launch");
  }
  return absl::OkStatus();
}

absl::Status RunNode(NodeContext& ctx, Tensor* node) {
  if (node->op == Op::kMulMat) return RunMulMat(ctx, node);
  const Tensor* src = node->src[0];
  if ((node->op == Op::kCpy || node->op == Op::kCont) && src->type == node->type &&
      src->IsContiguous() && node->IsContiguous()) {
    // A plain copy: the copy engine's bandwidth, no index math.
    TG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(node->data, src->data, node->NumBytes(),
                                            cudaMemcpyDeviceToDevice, ctx.stream));
    return absl::OkStatus();
  }
  if (node->op == Op::kMulMatId) return RunMulMatId(ctx, node);
  if (const cudaError_t err = Launch(ctx, node); err != cudaSuccess) {
    return CudaError(err, absl::StrCat(OpName(node->op), " kernel launch"));
  }
  return absl::OkStatus();
}

}  // namespace tg::cuda
