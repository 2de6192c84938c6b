#include "backends/vulkan/vk_ops.h"

#include "absl/strings/str_cat.h"
#include "backends/vulkan/vk_buffer.h"
#include "backends/vulkan/vk_device.h"
#include "backends/vulkan/vk_fusion.h"

namespace tg::vulkan {
namespace {

// Sizes, strides and element counts travel as 32-bit push constants.
constexpr uint64_t kMaxU32 = 0xffffffffull;
// FLASH_ATTN keeps q and the output row of an invocation in registers (flash_attn.comp; the
// decode kernel, flash_attn_decode.comp, keeps a team's share of them).
constexpr int64_t kMaxHeadSize = 256;
// A row longer than kSortCap takes up to 9 walks by kSortGroup invocations (8 radix passes and
// the gather, sort_rows.glsl): 2^19 elements keep that near 18k of lavapipe's 65535 loop
// iterations.
constexpr int64_t kMaxSelectRow = int64_t{1} << 19;
// SAMPLE also looks each element up in its penalty table (sample.comp), about doubling that:
// 2^18 (Gemma's 262144-token vocabulary) keeps it below 40k.
constexpr int64_t kMaxSampleRow = int64_t{1} << 18;
// sample.comp's table of penalized ids has 512 slots, at most half of them used.
constexpr int64_t kMaxPenaltyWindow = 256;
// sample.comp's shared memory: the sort keys and radix bins (sort_rows.glsl), the candidates'
// f64 weights, the penalty table. Every desktop GPU has 32 KiB or more; Vulkan's minimum is 16.
constexpr uint32_t kSampleSharedBytes = kSortCap * 8 + 256 * 4 + kSortCap * 8 + 512 * 8 + 16;

bool Fits32(const Tensor& t) {
  if (t.NumBytes() >= kMaxU32 || static_cast<uint64_t>(t.NumElements()) >= kMaxU32) return false;
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.nb[i] >= kMaxU32 || static_cast<uint64_t>(t.ne[i]) >= kMaxU32) return false;
  }
  return true;
}

bool IsPlain(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kI32;
}

bool RowsContiguous(const Tensor& t) { return t.nb[0] == BlockBytes(t.type); }

// Bytes from the start of t's allocation (aligned to at least 64) to t's first element.
size_t ViewOffset(const Tensor& t) {
  size_t offset = 0;
  for (const Tensor* v = &t; v->view_src != nullptr; v = v->view_src) offset += v->view_offs;
  return offset;
}

// The FLASH_ATTN kernels read K and V rows as 32-bit words.
bool WordAligned(const Tensor& t) {
  return ViewOffset(t) % 4 == 0 && t.nb[1] % 4 == 0 && t.nb[2] % 4 == 0 && t.nb[3] % 4 == 0 &&
         (t.type != DType::kF16 || t.ne[0] % 2 == 0);
}

bool SupportsFlashAttn(const Tensor& node) {
  const Tensor* q = node.src[0];
  const Tensor* k = node.src[1];
  const Tensor* v = node.src[2];
  const Tensor* mask = node.src[3];
  if (!RowsContiguous(*q) || !RowsContiguous(*k) || !RowsContiguous(*v)) return false;
  // The FLASH_ATTN kernels read F16 or F32 K and V rows (one variant each).
  for (const Tensor* kv : {k, v}) {
    if (kv->type != DType::kF16 && kv->type != DType::kF32) return false;
  }
  if (!WordAligned(*k) || !WordAligned(*v)) return false;
  if (q->ne[2] > 65535 || q->ne[3] > 65535) return false;  // workgroup grid y and z.
  if (mask != nullptr && (!RowsContiguous(*mask) || mask->ne[2] != 1 || mask->ne[3] != 1)) {
    return false;
  }
  return q->ne[0] <= kMaxHeadSize && v->ne[0] <= kMaxHeadSize;
}

// SAMPLE's kernel draws from at most kSortCap candidates: the top_k, or the whole row when
// top_k is 0 (greedy picks need one). Its weights are f64 (shaderFloat64).
bool SupportsSample(const PhysicalInfo& info, const Tensor& node) {
  const Tensor* logits = node.src[0];
  const Tensor* recent = node.src[2];
  if (!info.float64 || info.max_shared_memory < kSampleSharedBytes) return false;
  if (logits->type != DType::kF32 || logits->ne[0] > kMaxSampleRow) return false;
  if (recent != nullptr && recent->ne[0] > kMaxPenaltyWindow) return false;
  const int64_t top_k = node.op_params[1];
  return node.ParamF32(0) <= 0.0f || (top_k > 0 && top_k <= kSortCap) || logits->ne[0] <= kSortCap;
}

// The types the shaders read: plain ones, and every quantized type (dequant.glsl decodes all
// of them for GET_ROWS, CPY from them and MUL_MAT / MUL_MAT_ID).
bool HasKernels(DType type) { return IsPlain(type) || IsQuantized(type); }

// The quantized types the shaders can write (quantize.glsl ports the CPU's quantizers of these
// only): CPY and SET_ROWS into another quantized type go to another device.
bool CanQuantizeInto(DType type) {
  return type == DType::kQ8_0 || type == DType::kQ4_0 || type == DType::kQ4_K ||
         type == DType::kQ6_K;
}

// Whether the shaders can write `dst` from `src` elements: any plain type, a quantized type
// they quantize into, or the same quantized type (cpy_quant.comp moves the blocks).
bool CanWrite(DType dst, DType src) { return IsPlain(dst) || CanQuantizeInto(dst) || dst == src; }

// The function that records each op with a kernel (vk_op_*.cc); the ops not listed (views and
// leafs) compute nothing.
struct OpRecorder {
  Op op;
  absl::Status (*record)(Recorder& rec, const Tensor* node);
};
constexpr OpRecorder kOpRecorders[] = {
    {Op::kAdd, RecordElementwise},
    {Op::kMul, RecordElementwise},
    {Op::kDiv, RecordElementwise},
    {Op::kScale, RecordElementwise},
    {Op::kSilu, RecordElementwise},
    {Op::kSwiglu, RecordElementwise},
    {Op::kSwigluOai, RecordElementwise},
    {Op::kRmsNorm, RecordRmsNorm},
    {Op::kSoftMax, RecordSoftMax},
    {Op::kRope, RecordRope},
    {Op::kArgmax, RecordArgmax},
    {Op::kSumRows, RecordSumRows},
    {Op::kArgsort, RecordArgsort},
    {Op::kTopK, RecordArgsort},
    {Op::kSample, RecordSample},
    {Op::kCpy, RecordCpy},
    {Op::kCont, RecordCpy},
    {Op::kGetRows, RecordGetRows},
    {Op::kSetRows, RecordSetRows},
    {Op::kMulMat, RecordMulMat},
    {Op::kMulMatId, RecordMulMatId},
    {Op::kFlashAttn, RecordFlashAttn},
};

}  // namespace

bool SupportsNode(const PhysicalInfo& info, const Tensor& node) {
  if (!Fits32(node) || !HasKernels(node.type)) return false;
  for (const Tensor* s : node.src) {
    if (s != nullptr && (!Fits32(*s) || !HasKernels(s->type))) return false;
  }
  const Tensor* a = node.src[0];
  switch (node.op) {
    case Op::kNone:
    case Op::kView:
    case Op::kReshape:
    case Op::kPermute:
    case Op::kTranspose:
      return true;
    case Op::kAdd:
    case Op::kMul:
    case Op::kDiv:
    case Op::kScale:
    case Op::kSilu:
    case Op::kSwiglu:
    case Op::kSwigluOai:
    case Op::kRmsNorm:
    case Op::kArgmax:
    case Op::kSumRows:
      return a->type == DType::kF32;
    case Op::kSoftMax:  // max_bias (ALiBi) has no kernel anywhere; the graph builder refuses it.
      return a->type == DType::kF32 && node.ParamF32(1) == 0.0f;
    case Op::kRope:
      return a->type == DType::kF32 && a->ne[0] % 2 == 0;
    case Op::kGetRows:
      return true;
    case Op::kSetRows:
      return CanWrite(a->type, node.src[1]->type);
    case Op::kCpy:
    case Op::kCont: {
      const Tensor* dst = node.op == Op::kCpy ? node.src[1] : &node;
      if (IsPlain(dst->type)) return true;
      return RowsContiguous(*dst) && CanWrite(dst->type, a->type);
    }
    case Op::kMulMatId:
    case Op::kMulMat:
      return a->type != DType::kI32 && RowsContiguous(*a);
    case Op::kFlashAttn:
      return SupportsFlashAttn(node) && node.ParamF32(1) == 0.0f && node.ParamF32(2) == 0.0f;
    case Op::kArgsort:  // the whole row sorted in shared memory.
      return a->type == DType::kF32 && a->ne[0] <= kSortCap;
    case Op::kTopK:  // the k largest selected, then sorted in shared memory.
      return a->type == DType::kF32 && node.op_params[0] <= kSortCap && a->ne[0] <= kMaxSelectRow;
    case Op::kSample:
      return SupportsSample(info, node);
    case Op::kCount:
      return false;
  }
  return false;
}

absl::Status CheckNodePlacement(const VulkanDevice& device, const Tensor& node) {
  // RecordNode skips what it has no kernel for; such a node must never reach it silently.
  if (!SupportsNode(device.info(), node)) {
    return absl::FailedPreconditionError(absl::StrCat(
        device.name(), " has no kernel for ", OpName(node.op), " ", DescribeTensor(node),
        ": give the graph to a scheduler with a CPU beside this device"));
  }
  auto check = [&](const Tensor* t) -> absl::Status {
    if (t == nullptr || BufferOn(&device, *t) != nullptr) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(device.name(), ": ", DescribeTensor(*t),
                                                      " (of node ", DescribeTensor(node),
                                                      ") is not in this device's memory"));
  };
  if (absl::Status s = check(&node); !s.ok()) return s;
  for (const Tensor* s : node.src) {
    if (absl::Status st = check(s); !st.ok()) return st;
  }
  return absl::OkStatus();
}

uint64_t NodeScratchBytes(const Tensor& node) {
  if (node.op == Op::kMulMat || node.op == Op::kMulMatId) return MulMatScratchBytes(node);
  return 0;
}

absl::Status RecordGroup(Recorder& rec, const FusedGroup& group) {
  const std::vector<const Tensor*>& n = group.nodes;
  switch (group.kind) {
    case FusionKind::kRmsNormMul:
      return RecordNormGroup(rec, {.norm = n[0], .mul = n[1], .product = group.product});
    case FusionKind::kAddRmsNormMul:
      return RecordNormGroup(rec,
                             {.add = n[0], .norm = n[1], .mul = n[2], .product = group.product});
    case FusionKind::kMulMatMulti:
      return RecordMulMatMulti(rec, n);
    case FusionKind::kGateUpSwiglu:
      return RecordGateUpSwiglu(rec, n[0], n[1], n[2]);
    case FusionKind::kSingle:
      break;
  }
  return RecordNode(rec, n[0]);
}

absl::Status RecordNode(Recorder& rec, const Tensor* node) {
  for (const OpRecorder& entry : kOpRecorders) {
    if (entry.op == node->op) return entry.record(rec, node);
  }
  return absl::OkStatus();  // views and leafs compute nothing.
}

}  // namespace tg::vulkan
