// Recording of FLASH_ATTN (flash_attn.comp), one variant per K/V type.
#include "backends/vulkan/vk_ops.h"

namespace tg::vulkan {
namespace {

struct FlashAttnPC {
  uint64_t q, k, v, m, d;
  uint32_t q_nb1, q_nb2, q_nb3, m_nb1;
  uint32_t k_nb1, k_nb2, k_nb3, m_type;
  uint32_t v_nb1, v_nb2, v_nb3, n_kv;
  uint32_t D, Dv, n_q, H;
  uint32_t H_kv;
  float scale;
};
static_assert(sizeof(FlashAttnPC) <= kPushConstantBytes);

// One key per invocation per block; 64 covers a decode step's keys in few blocks while
// leaving room for several workgroups per core.
constexpr uint32_t kAttnGroup = 64;

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
  pc.D = U32(q->ne[0]);
  pc.Dv = U32(v->ne[0]);
  pc.n_q = U32(q->ne[1]);
  pc.H = U32(q->ne[2]);
  pc.H_kv = U32(k->ne[2]);
  pc.scale = node->ParamF32(0);
  std::vector<AddressRange> reads = {rec.Range(q), rec.Range(k), rec.Range(v)};
  if (mask != nullptr) {
    pc.m = rec.Address(mask);
    pc.m_nb1 = U32(mask->nb[1]);
    pc.m_type = static_cast<uint32_t>(mask->type);
    reads.push_back(rec.Range(mask));
  }
  const uint32_t spec[] = {kAttnGroup, k->type == DType::kF16 ? 1u : 0u,
                           v->type == DType::kF16 ? 1u : 0u};
  const AddressRange writes[] = {rec.Range(node)};
  return rec.Dispatch1D("flash_attn", spec, &pc, sizeof(pc),
                        static_cast<uint64_t>(q->ne[1]) * q->ne[2] * q->ne[3], reads, writes);
}

}  // namespace tg::vulkan
