// Recording of FLASH_ATTN (flash_attn.comp), one variant per K/V type.
#include "backends/vulkan/vk_device.h"
#include "backends/vulkan/vk_ops.h"

namespace tg::vulkan {
namespace {

struct FlashAttnPC {
  uint64_t q, k, v, m, d;
  uint32_t q_nb1, q_nb2, q_nb3, m_nb1;
  uint32_t k_nb1, k_nb2, k_nb3, m_type;
  uint32_t v_nb1, v_nb2, v_nb3, n_kv;
  uint32_t n_q, H, H_kv, B;
  float scale;
};
static_assert(sizeof(FlashAttnPC) <= kPushConstantBytes);

}  // namespace

absl::Status RecordFlashAttn(Recorder& rec, const Tensor* node) {
  const Tensor* q = node->src[0];
  const Tensor* k = node->src[1];
  const Tensor* v = node->src[2];
  const Tensor* mask = node->src[3];
  FlashAttnPC pc{};
  pc.q = rec.Address(q);
  pc.k = rec.Address(k);
  pc.v = rec.Address(v);
  pc.d = rec.Address(node);
  pc.q_nb1 = U32(q->nb[1]);
  pc.q_nb2 = U32(q->nb[2]);
  pc.q_nb3 = U32(q->nb[3]);
  pc.k_nb1 = U32(k->nb[1]);
  pc.k_nb2 = U32(k->nb[2]);
  pc.k_nb3 = U32(k->nb[3]);
  pc.v_nb1 = U32(v->nb[1]);
  pc.v_nb2 = U32(v->nb[2]);
  pc.v_nb3 = U32(v->nb[3]);
  pc.n_kv = U32(k->ne[1]);
  pc.n_q = U32(q->ne[1]);
  pc.H = U32(q->ne[2]);
  pc.H_kv = U32(k->ne[2]);
  pc.B = U32(q->ne[3]);
  pc.scale = node->ParamF32(0);
  std::vector<AddressRange> reads = {rec.Range(q), rec.Range(k), rec.Range(v)};
  if (mask != nullptr) {
    pc.m = rec.Address(mask);
    pc.m_nb1 = U32(mask->nb[1]);
    pc.m_type = static_cast<uint32_t>(mask->type);
    reads.push_back(rec.Range(mask));
  }
  // One subgroup per workgroup, one query position per invocation (flash_attn.comp).
  const uint32_t sg = rec.device()->info().subgroup_size;
  const uint32_t spec[] = {sg,
                           k->type == DType::kF16 ? 1u : 0u,
                           v->type == DType::kF16 ? 1u : 0u,
                           U32(q->ne[0]),
                           U32(v->ne[0]),
                           sg};
  const AddressRange writes[] = {rec.Range(node)};
  const uint32_t groups[3] = {U32((q->ne[1] + sg - 1) / sg), U32(q->ne[2]), U32(q->ne[3])};
  return rec.Dispatch("flash_attn", spec, &pc, sizeof(pc), groups, reads, writes);
}

}  // namespace tg::vulkan
