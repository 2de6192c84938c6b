// Recording of the copying ops: CPY, CONT, GET_ROWS, SET_ROWS.
#include "backends/vulkan/vk_ops.h"

namespace tg::vulkan {
namespace {

// cpy.comp
struct CpyPC {
  uint64_t a, d;
  uint32_t a_ne[4], a_nb[4];
  uint32_t d_ne[4], d_nb[4];
  uint32_t a_type, d_type, n;
};

// cpy_quant.comp
struct CpyQuantPC {
  uint64_t a, d;
  uint32_t a_ne[4], a_nb[4];
  uint32_t d_ne[2];  // dimensions 1 and 2
  uint32_t d_nb[3];  // dimensions 1 to 3
  uint32_t a_type, d_type, n_blocks;
};

// get_rows.comp
struct GetRowsPC {
  uint64_t a, idx, d, err;
  uint32_t a_nb[4];
  uint32_t ne[4];      // of the result
  uint32_t idx_nb[3];  // dimensions 0 to 2
  uint32_t a_ne1;
  uint32_t a_type, tag;
};

// set_rows.comp
struct SetRowsPC {
  uint64_t d, b, idx, err;
  uint32_t d_nb[4];
  uint32_t b_nb[4];
  uint32_t b_ne[4];
  uint32_t idx_nb[3];  // dimensions 0 to 2
  uint32_t idx_ne[2];  // dimensions 1 and 2
  uint32_t d_ne1, d_type, tag;
};
static_assert(sizeof(CpyPC) <= kPushConstantBytes && sizeof(SetRowsPC) <= kPushConstantBytes);

// Quantized kernels run one block per invocation: small groups keep the many private values of
// the Q4_K/Q6_K searches from starving the device of parallelism.
constexpr uint32_t kBlockGroup = 64;

uint64_t Ceil(uint64_t n, uint64_t d) { return (n + d - 1) / d; }

}  // namespace

absl::Status RecordCpy(Recorder& rec, const Tensor* node) {
  const Tensor* a = node->src[0];
  // CPY writes into src[1] through the node (a view of it); CONT into the node itself.
  const Tensor* d = node;
  const AddressRange reads[] = {rec.Range(a)};
  const AddressRange writes[] = {rec.Range(d)};
  if (IsQuantized(d->type)) {
    CpyQuantPC pc{};
    pc.a = rec.Address(a);
    pc.d = rec.Address(d);
    PutDims(pc.a_ne, a->ne);
    PutDims(pc.a_nb, a->nb);
    PutDims<1>(pc.d_ne, d->ne);
    PutDims<1>(pc.d_nb, d->nb);
    pc.a_type = static_cast<uint32_t>(a->type);
    pc.d_type = static_cast<uint32_t>(d->type);
    pc.n_blocks = U32(d->NumElements() / BlockSize(d->type));
    const uint32_t spec[] = {kBlockGroup};
    return rec.Dispatch1D("cpy_quant", spec, &pc, sizeof(pc), Ceil(pc.n_blocks, kBlockGroup), reads,
                          writes);
  }
  CpyPC pc{};
  pc.a = rec.Address(a);
  pc.d = rec.Address(d);
  PutDims(pc.a_ne, a->ne);
  PutDims(pc.a_nb, a->nb);
  PutDims(pc.d_ne, d->ne);
  PutDims(pc.d_nb, d->nb);
  pc.a_type = static_cast<uint32_t>(a->type);
  pc.d_type = static_cast<uint32_t>(d->type);
  pc.n = U32(d->NumElements());
  const uint32_t spec[] = {kElementwiseGroup};
  return rec.Dispatch1D("cpy", spec, &pc, sizeof(pc), Ceil(pc.n, kElementwiseGroup), reads, writes);
}

absl::Status RecordGetRows(Recorder& rec, const Tensor* node) {
  const Tensor* a = node->src[0];
  const Tensor* idx = node->src[1];
  GetRowsPC pc{};
  pc.a = rec.Address(a);
  pc.idx = rec.Address(idx);
  pc.d = rec.Address(node);
  pc.err = rec.error_address();
  PutDims(pc.a_nb, a->nb);
  PutDims(pc.ne, node->ne);
  PutDims(pc.idx_nb, idx->nb);
  pc.a_ne1 = U32(a->ne[1]);
  pc.a_type = static_cast<uint32_t>(a->type);
  pc.tag = rec.ErrorTag(node);
  const uint32_t spec[] = {kRowGroup};
  const AddressRange reads[] = {rec.Range(a), rec.Range(idx)};
  const AddressRange writes[] = {rec.Range(node)};
  return rec.Dispatch1D("get_rows", spec, &pc, sizeof(pc), node->NumRows(), reads, writes);
}

absl::Status RecordSetRows(Recorder& rec, const Tensor* node) {
  const Tensor* dst = node->src[0];
  const Tensor* b = node->src[1];
  const Tensor* idx = node->src[2];
  SetRowsPC pc{};
  pc.d = rec.Address(dst);
  pc.b = rec.Address(b);
  pc.idx = rec.Address(idx);
  pc.err = rec.error_address();
  PutDims(pc.d_nb, dst->nb);
  PutDims(pc.b_nb, b->nb);
  PutDims(pc.b_ne, b->ne);
  PutDims(pc.idx_nb, idx->nb);
  PutDims<1>(pc.idx_ne, idx->ne);
  pc.d_ne1 = U32(dst->ne[1]);
  pc.d_type = static_cast<uint32_t>(dst->type);
  pc.tag = rec.ErrorTag(node);
  // Quantized rows take one invocation per block: fewer invocations do more work each.
  const bool quant = IsQuantized(dst->type);
  const uint32_t spec[] = {quant ? kBlockGroup : kRowGroup};
  const AddressRange reads[] = {rec.Range(b), rec.Range(idx)};
  const AddressRange writes[] = {rec.Range(dst)};
  return rec.Dispatch1D(quant ? "set_rows_quant" : "set_rows", spec, &pc, sizeof(pc), b->NumRows(),
                        reads, writes);
}

}  // namespace tg::vulkan
