#include "core/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "core/shape_rules.h"

namespace tg {
namespace {

int32_t F32Slot(float f) {
  int32_t v;
  std::memcpy(&v, &f, 4);
  return v;
}

// Runs the rule on a prepared node and, if it holds, stores the node in ctx.
TensorOr Finish(Context& ctx, Tensor& proto) {
  absl::StatusOr<NodeLayout> layout = ApplyShapeRule(proto);
  if (!layout.ok()) return layout.status();
  proto.type = layout->type;
  std::copy(layout->ne, layout->ne + kMaxDims, proto.ne);
  std::copy(layout->nb, layout->nb + kMaxDims, proto.nb);
  proto.view_src = layout->view_src;
  proto.view_offs = layout->view_offs;
  Tensor* t = ctx.NewBlank();
  *t = proto;
  return t;
}

Tensor Proto(Op op, absl::Span<Tensor* const> src, absl::Span<const int32_t> params) {
  Tensor proto;
  proto.op = op;
  for (size_t i = 0; i < src.size() && i < kMaxSrc; ++i) proto.src[i] = src[i];
  for (size_t i = 0; i < params.size() && i < kMaxOpParams; ++i) proto.op_params[i] = params[i];
  if (!src.empty() && src[0] != nullptr) proto.type = src[0]->type;
  return proto;
}

}  // namespace

TensorOr MakeNode(Context& ctx, Op op, absl::Span<Tensor* const> src,
                  absl::Span<const int32_t> params) {
  if (src.size() > kMaxSrc || params.size() > kMaxOpParams) {
    return absl::InvalidArgumentError(absl::StrCat(OpName(op), ": too many sources or params"));
  }
  Tensor proto = Proto(op, src, params);
  return Finish(ctx, proto);
}

TensorOr GetRows(Context& ctx, Tensor* a, Tensor* idx) {
  return MakeNode(ctx, Op::kGetRows, {a, idx});
}
TensorOr SetRows(Context& ctx, Tensor* dst, Tensor* rows, Tensor* idx) {
  return MakeNode(ctx, Op::kSetRows, {dst, rows, idx});
}
TensorOr MulMat(Context& ctx, Tensor* a, Tensor* b) { return MakeNode(ctx, Op::kMulMat, {a, b}); }
TensorOr MulMatId(Context& ctx, Tensor* experts, Tensor* b, Tensor* ids, int32_t first_expert,
                  int32_t expert_count) {
  return MakeNode(ctx, Op::kMulMatId, {experts, b, ids}, {first_expert, expert_count});
}
TensorOr Add(Context& ctx, Tensor* a, Tensor* b) { return MakeNode(ctx, Op::kAdd, {a, b}); }
TensorOr Mul(Context& ctx, Tensor* a, Tensor* b) { return MakeNode(ctx, Op::kMul, {a, b}); }
TensorOr Scale(Context& ctx, Tensor* a, float scale, float bias) {
  return MakeNode(ctx, Op::kScale, {a}, {F32Slot(scale), F32Slot(bias)});
}
TensorOr RmsNorm(Context& ctx, Tensor* a, float eps) {
  return MakeNode(ctx, Op::kRmsNorm, {a}, {F32Slot(eps)});
}
TensorOr Rope(Context& ctx, Tensor* a, Tensor* pos, Tensor* freq_factors, const RopeParams& p) {
  const int32_t params[] = {p.n_dims,
                            p.mode,
                            p.n_ctx_orig,
                            F32Slot(p.freq_base),
                            F32Slot(p.freq_scale),
                            F32Slot(p.ext_factor),
                            F32Slot(p.attn_factor),
                            F32Slot(p.beta_fast),
                            F32Slot(p.beta_slow)};
  return MakeNode(ctx, Op::kRope, {a, pos, freq_factors}, params);
}
RopeParams RopeParamsOf(const Tensor& rope) {
  RopeParams p;
  p.n_dims = rope.op_params[0];
  p.mode = rope.op_params[1];
  p.n_ctx_orig = rope.op_params[2];
  p.freq_base = rope.ParamF32(3);
  p.freq_scale = rope.ParamF32(4);
  p.ext_factor = rope.ParamF32(5);
  p.attn_factor = rope.ParamF32(6);
  p.beta_fast = rope.ParamF32(7);
  p.beta_slow = rope.ParamF32(8);
  return p;
}
YarnRamp YarnRampOf(const RopeParams& p) {
  // The dimension whose wavelength fits n_rot times into n_ctx_orig; double precision, as
  // every backend computes it.
  auto corr_dim = [&](double n_rot) {
    return p.n_dims * std::log(p.n_ctx_orig / (n_rot * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(static_cast<double>(p.freq_base)));
  };
  return {std::max(0.0, std::floor(corr_dim(p.beta_fast))),
          std::min(p.n_dims - 1.0, std::ceil(corr_dim(p.beta_slow)))};
}
float RopeMscaleOf(const RopeParams& p) {
  constexpr double kYarnMscaleSlope = 0.1;
  if (p.ext_factor == 0.0f) return p.attn_factor;
  return static_cast<float>(static_cast<double>(p.attn_factor) *
                            (1.0 + kYarnMscaleSlope * std::log(1.0 / double{p.freq_scale})));
}
TensorOr SoftMax(Context& ctx, Tensor* a, Tensor* mask, float scale, Tensor* sinks) {
  return MakeNode(ctx, Op::kSoftMax, {a, mask, sinks}, {F32Slot(scale), F32Slot(0.0f)});
}
TensorOr Silu(Context& ctx, Tensor* a) { return MakeNode(ctx, Op::kSilu, {a}); }
TensorOr Swiglu(Context& ctx, Tensor* gate, Tensor* up) {
  return MakeNode(ctx, Op::kSwiglu, {gate, up});
}
TensorOr SwigluOai(Context& ctx, Tensor* gate, Tensor* up, float alpha, float limit) {
  return MakeNode(ctx, Op::kSwigluOai, {gate, up}, {F32Slot(alpha), F32Slot(limit)});
}
TensorOr Argmax(Context& ctx, Tensor* a) { return MakeNode(ctx, Op::kArgmax, {a}); }
TensorOr Sample(Context& ctx, Tensor* logits, Tensor* pos, Tensor* recent, const SampleParams& p) {
  const int32_t params[] = {F32Slot(p.temperature),
                            p.top_k,
                            F32Slot(p.top_p),
                            F32Slot(p.min_p),
                            F32Slot(p.repeat_penalty),
                            static_cast<int32_t>(static_cast<uint32_t>(p.seed)),
                            static_cast<int32_t>(static_cast<uint32_t>(p.seed >> 32))};
  return MakeNode(ctx, Op::kSample, {logits, pos, recent}, params);
}
SampleParams SampleParamsOf(const Tensor& sample) {
  SampleParams p;
  p.temperature = sample.ParamF32(0);
  p.top_k = sample.op_params[1];
  p.top_p = sample.ParamF32(2);
  p.min_p = sample.ParamF32(3);
  p.repeat_penalty = sample.ParamF32(4);
  p.seed = uint64_t{static_cast<uint32_t>(sample.op_params[5])} |
           uint64_t{static_cast<uint32_t>(sample.op_params[6])} << 32;
  return p;
}
TensorOr Argsort(Context& ctx, Tensor* a, SortOrder order) {
  return MakeNode(ctx, Op::kArgsort, {a}, {static_cast<int32_t>(order)});
}
TensorOr TopK(Context& ctx, Tensor* a, int64_t k) {
  if (k < 1 || k > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("TOP_K: k = ", k, " must be in [1, 2^31)"));
  }
  return MakeNode(ctx, Op::kTopK, {a}, {static_cast<int32_t>(k)});
}
TensorOr SumRows(Context& ctx, Tensor* a) { return MakeNode(ctx, Op::kSumRows, {a}); }
TensorOr Div(Context& ctx, Tensor* a, Tensor* b) { return MakeNode(ctx, Op::kDiv, {a, b}); }
TensorOr Cpy(Context& ctx, Tensor* a, Tensor* b) { return MakeNode(ctx, Op::kCpy, {a, b}); }
TensorOr Cont(Context& ctx, Tensor* a) { return MakeNode(ctx, Op::kCont, {a}); }

TensorOr View(Context& ctx, Tensor* a, absl::Span<const int64_t> ne,
              absl::Span<const size_t> nb_upper, size_t offset) {
  if (a == nullptr || ne.empty() || ne.size() > kMaxDims || nb_upper.size() + 1 != ne.size()) {
    return absl::InvalidArgumentError("VIEW: need 1 to 4 dims and one stride per dim above 0");
  }
  Tensor proto = Proto(Op::kView, {a}, {});
  std::fill(proto.ne, proto.ne + kMaxDims, 1);
  std::copy(ne.begin(), ne.end(), proto.ne);
  proto.nb[0] = BlockBytes(a->type);
  for (size_t i = 0; i < nb_upper.size(); ++i) proto.nb[i + 1] = nb_upper[i];
  // Unused upper dims get the packed stride so that IsContiguous() stays meaningful.
  for (size_t i = ne.size(); i < kMaxDims; ++i) {
    proto.nb[i] = proto.nb[i - 1] * (i == 1 ? proto.ne[0] / BlockSize(a->type) : proto.ne[i - 1]);
  }
  proto.view_offs = (a->view_src != nullptr ? a->view_offs : 0) + offset;
  return Finish(ctx, proto);
}

TensorOr Reshape(Context& ctx, Tensor* a, absl::Span<const int64_t> ne) {
  if (a == nullptr || ne.empty() || ne.size() > kMaxDims) {
    return absl::InvalidArgumentError("RESHAPE: need a source and 1 to 4 dims");
  }
  Tensor proto = Proto(Op::kReshape, {a}, {});
  std::fill(proto.ne, proto.ne + kMaxDims, 1);
  std::copy(ne.begin(), ne.end(), proto.ne);
  return Finish(ctx, proto);
}

TensorOr Permute(Context& ctx, Tensor* a, int ax0, int ax1, int ax2, int ax3) {
  return MakeNode(ctx, Op::kPermute, {a}, {ax0, ax1, ax2, ax3});
}
TensorOr Transpose(Context& ctx, Tensor* a) {
  return MakeNode(ctx, Op::kTranspose, {a}, {1, 0, 2, 3});
}

TensorOr FlashAttn(Context& ctx, Tensor* q, Tensor* k, Tensor* v, Tensor* mask, float scale) {
  return MakeNode(ctx, Op::kFlashAttn, {q, k, v, mask}, {F32Slot(scale), 0, 0});
}

}  // namespace tg
