// Recording of the element-wise and row-wise ops: ADD, MUL, DIV, SCALE, SILU, SWIGLU,
// SWIGLU_OAI, RMS_NORM, SOFT_MAX, ROPE, ARGMAX, SUM_ROWS. Push-constant structs mirror the
// shaders' blocks.
#include <algorithm>
#include <cmath>
#include <iterator>

#include "backends/vulkan/vk_device.h"
#include "backends/vulkan/vk_ops.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tg::vulkan {
namespace {

// elementwise.comp
struct ElementwisePC {
  uint64_t a, b, d;
  uint32_t ne[4];
  uint32_t a_nb[4];
  uint32_t b_ne[4];
  uint32_t b_nb[4];
  uint32_t op;
  float p0, p1;
  uint32_t n;
};
static_assert(sizeof(ElementwisePC) <= kPushConstantBytes);

// elementwise.comp's OP_* values: each op's index here (OP_ADD = 0 .. OP_SWIGLU_OAI = 6).
constexpr Op kElementwiseOps[] = {Op::kAdd,    Op::kMul, Op::kScale,    Op::kSilu,
                                  Op::kSwiglu, Op::kDiv, Op::kSwigluOai};

uint64_t GroupsFor(uint64_t n, uint32_t group) { return (n + group - 1) / group; }

}  // namespace

absl::Status RecordElementwise(Recorder& rec, const Tensor* node) {
  const Tensor* a = node->src[0];
  const Tensor* b = node->src[1];
  ElementwisePC pc{};
  pc.a = rec.Address(a);
  pc.d = rec.Address(node);
  PutDims(pc.ne, node->ne);
  PutDims(pc.a_nb, a->nb);
  pc.op = static_cast<uint32_t>(std::ranges::find(kElementwiseOps, node->op) -
                                std::begin(kElementwiseOps));
  if (node->op == Op::kScale) {
    pc.p0 = node->ParamF32(0);
    pc.p1 = node->ParamF32(1);
  } else if (node->op == Op::kSwigluOai) {
    pc.p0 = node->ParamF32(kSwigluOaiAlpha);
    pc.p1 = node->ParamF32(kSwigluOaiLimit);
  }
  std::vector<AddressRange> reads = {rec.Range(a)};
  if (b != nullptr) {
    pc.b = rec.Address(b);
    PutDims(pc.b_ne, b->ne);
    PutDims(pc.b_nb, b->nb);
    reads.push_back(rec.Range(b));
  }
  pc.n = U32(node->NumElements());
  const uint32_t spec[] = {kElementwiseGroup};
  const AddressRange writes[] = {rec.Range(node)};
  return rec.Dispatch1D("elementwise", spec, &pc, sizeof(pc), GroupsFor(pc.n, kElementwiseGroup),
                        reads, writes);
}

namespace {

// The rows a row kernel (or rope.comp) walks: its source's strides and sizes, the same block of
// push constants in each of their shaders.
struct RowsPC {
  uint32_t a_nb[4];
  uint32_t ne[4];
};

RowsPC RowsOf(const Tensor& a) {
  RowsPC rows;
  PutDims(rows.a_nb, a.nb);
  PutDims(rows.ne, a.ne);
  return rows;
}

// rms_norm.comp
struct RmsNormPC {
  uint64_t a, d, w, dw;
  RowsPC rows;
  float eps;
  uint32_t qformat;  // ActivationsAhead::format
  uint64_t q, b, sum;
};

// softmax.comp
struct SoftMaxPC {
  uint64_t a, m, d, sinks;
  RowsPC rows;
  uint32_t m_nb[4];
  uint32_t m_ne2, m_ne3, m_type;
  float scale;
};

// sum_rows.comp, argsort.comp
struct RowKernelPC {
  uint64_t a, d;
  RowsPC rows;
  uint32_t p0, p1;
};

// argmax.comp
struct ArgmaxPC {
  uint64_t a, d;
  uint32_t a_nb[3];  // dimensions 1 to 3
  uint32_t ne[4];
};

// rope.comp
struct RopePC {
  uint64_t a, pos, ff, d;
  RowsPC rows;
  uint32_t n_dims, neox, n;
  float log2_base, freq_scale, ext_factor, mscale;
  float corr_lo, corr_hi;
};
static_assert(sizeof(SoftMaxPC) <= kPushConstantBytes && sizeof(RopePC) <= kPushConstantBytes &&
              sizeof(RmsNormPC) <= kPushConstantBytes);

}  // namespace

absl::Status RecordRmsNorm(Recorder& rec, const Tensor* node) {
  return RecordNormGroup(rec, {.norm = node});
}

absl::Status RecordNormGroup(Recorder& rec, const NormGroup& group) {
  const Tensor* norm = group.norm;
  const Tensor* a = group.add != nullptr ? group.add->src[0] : norm->src[0];
  RmsNormPC pc{};
  pc.a = rec.Address(a);
  pc.d = rec.Address(norm);
  std::vector<AddressRange> reads = {rec.Range(a)};
  std::vector<AddressRange> writes = {rec.Range(norm)};
  if (group.add != nullptr) {
    pc.b = rec.Address(group.add->src[1]);
    pc.sum = rec.Address(group.add);
    reads.push_back(rec.Range(group.add->src[1]));
    writes.push_back(rec.Range(group.add));
  }
  if (group.mul != nullptr) {
    pc.w = rec.Address(group.mul->src[1]);
    pc.dw = rec.Address(group.mul);
    reads.push_back(rec.Range(group.mul->src[1]));
    writes.push_back(rec.Range(group.mul));
  }
  pc.rows = RowsOf(*a);
  pc.eps = norm->ParamF32(0);
  // The product's quantized activations, from the row's results kept in shared memory: where
  // a row fits beside the reduction's.
  ActivationsAhead ahead;
  const Tensor* result = group.mul != nullptr ? group.mul : norm;
  const uint64_t row_bytes = static_cast<uint64_t>(a->ne[0]) * sizeof(float);
  if (group.product != nullptr && group.product->src[1] == result && result->IsContiguous() &&
      row_bytes + kReduceSharedBytes <= rec.device()->info().max_shared_memory) {
    TG_ASSIGN_OR_RETURN(ahead, PrepareActivationsAhead(rec, group.product));
  }
  if (ahead.format != 0) {
    pc.qformat = ahead.format;
    pc.q = ahead.scratch.begin;
    writes.push_back(ahead.scratch);
  }
  const uint32_t spec[] = {kRowGroup, ahead.format != 0 ? U32(a->ne[0]) : 1u};
  TG_RETURN_IF_ERROR(
      rec.Dispatch1D("rms_norm", spec, &pc, sizeof(pc), a->NumRows(), reads, writes));
  CommitActivationsAhead(rec, group.product, ahead);
  return absl::OkStatus();
}

absl::Status RecordSoftMax(Recorder& rec, const Tensor* node) {
  const Tensor* a = node->src[0];
  const Tensor* mask = node->src[1];
  SoftMaxPC pc{};
  pc.a = rec.Address(a);
  pc.d = rec.Address(node);
  pc.rows = RowsOf(*a);
  std::vector<AddressRange> reads = {rec.Range(a)};
  if (mask != nullptr) {
    pc.m = rec.Address(mask);
    PutDims(pc.m_nb, mask->nb);
    pc.m_ne2 = U32(mask->ne[2]);
    pc.m_ne3 = U32(mask->ne[3]);
    pc.m_type = static_cast<uint32_t>(mask->type);
    reads.push_back(rec.Range(mask));
  }
  if (const Tensor* sinks = node->src[2]; sinks != nullptr) {
    pc.sinks = rec.Address(sinks);
    reads.push_back(rec.Range(sinks));
  }
  pc.scale = node->ParamF32(0);
  const uint32_t spec[] = {kRowGroup};
  const AddressRange writes[] = {rec.Range(node)};
  return rec.Dispatch1D("softmax", spec, &pc, sizeof(pc), a->NumRows(), reads, writes);
}

absl::Status RecordArgmax(Recorder& rec, const Tensor* node) {
  const Tensor* a = node->src[0];
  ArgmaxPC pc{};
  pc.a = rec.Address(a);
  pc.d = rec.Address(node);
  PutDims<1>(pc.a_nb, a->nb);
  PutDims(pc.ne, a->ne);
  const uint32_t spec[] = {kRowGroup};
  const AddressRange reads[] = {rec.Range(a)};
  const AddressRange writes[] = {rec.Range(node)};
  return rec.Dispatch1D("argmax", spec, &pc, sizeof(pc), a->NumRows(), reads, writes);
}

absl::Status RecordRowKernel(Recorder& rec, const Tensor* node, absl::string_view shader,
                             uint32_t group, uint32_t p0, uint32_t p1) {
  const Tensor* a = node->src[0];
  RowKernelPC pc{};
  pc.a = rec.Address(a);
  pc.d = rec.Address(node);
  pc.rows = RowsOf(*a);
  pc.p0 = p0;
  pc.p1 = p1;
  const uint32_t spec[] = {group};
  const AddressRange reads[] = {rec.Range(a)};
  const AddressRange writes[] = {rec.Range(node)};
  return rec.Dispatch1D(shader, spec, &pc, sizeof(pc), a->NumRows(), reads, writes);
}

absl::Status RecordSumRows(Recorder& rec, const Tensor* node) {
  return RecordRowKernel(rec, node, "sum_rows", kRowGroup);
}

absl::Status RecordRope(Recorder& rec, const Tensor* node) {
  const Tensor* a = node->src[0];
  const Tensor* pos = node->src[1];
  const Tensor* ff = node->src[2];
  RopePC pc{};
  pc.a = rec.Address(a);
  pc.pos = rec.Address(pos);
  pc.d = rec.Address(node);
  pc.rows = RowsOf(*a);
  const RopeParams p = RopeParamsOf(*node);
  pc.n_dims = static_cast<uint32_t>(p.n_dims);
  pc.neox = (p.mode & kRopeNeox) != 0 ? 1 : 0;
  pc.log2_base = static_cast<float>(std::log2(double{p.freq_base}));
  pc.freq_scale = p.freq_scale;
  pc.ext_factor = p.ext_factor;
  pc.mscale = RopeMscaleOf(p);
  const YarnRamp ramp = YarnRampOf(p);
  pc.corr_lo = static_cast<float>(ramp.lo);
  pc.corr_hi = static_cast<float>(ramp.hi);
  std::vector<AddressRange> reads = {rec.Range(a), rec.Range(pos)};
  if (ff != nullptr) {
    pc.ff = rec.Address(ff);
    reads.push_back(rec.Range(ff));
  }
  pc.n = U32(node->NumElements() / 2);
  const uint32_t spec[] = {kElementwiseGroup};
  const AddressRange writes[] = {rec.Range(node)};
  return rec.Dispatch1D("rope", spec, &pc, sizeof(pc), GroupsFor(pc.n, kElementwiseGroup), reads,
                        writes);
}

}  // namespace tg::vulkan
