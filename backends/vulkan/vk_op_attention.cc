// Recording of FLASH_ATTN. Prompts, and every FLASH_ATTN on CPU-like devices (lavapipe), run
// flash_attn.comp: one query per invocation, a subgroup per SG queries. Few queries (decode) on
// GPUs run flash_attn_decode.comp: one workgroup per head spreads the keys over teams of
// invocations and merges their softmax states. TG_VULKAN_FA_DECODE=1|0 overrides the choice
// (DecodeAttention). One pipeline per K/V type and head size for either, the decode kernel's
// times two (one query row, or up to four).
#include <algorithm>
#include <bit>
#include <vector>

#include "backends/vulkan/vk_device.h"
#include "backends/vulkan/vk_ops.h"

namespace tg::vulkan {
namespace {

// flash_attn_common.glsl
struct FlashAttnPC {
  uint64_t q, k, v, m, d;
  uint32_t q_nb[3], m_nb1;  // q, k and v: dimensions 1 to 3
  uint32_t k_nb[3], m_type;
  uint32_t v_nb[3], n_kv;
  uint32_t n_q, H, H_kv, B;
  float scale;
};
static_assert(sizeof(FlashAttnPC) <= kPushConstantBytes);

// flash_attn_decode.comp: the query rows one workgroup keeps in registers (the ROWS variants:
// one for a single query, the other up to this many).
constexpr int64_t kDecodeMaxQueries = 4;
// Subgroups per workgroup: 128 invocations on 32-wide subgroups, keys of a decode step in
// flight at once, and the cross-subgroup merge stays small (NS * Dv floats of shared memory).
constexpr uint32_t kDecodeSubgroups = 4;
// K/V words each member of a team reads per key: about 4 keeps loads wide and registers
// few (a team of 8 for heads of 64 F16, 16 for 128 F16, capped by the subgroup).
constexpr uint32_t kDecodeWordsPerMember = 4;

// Invocations per key: a power of two, at most the subgroup (the team shares scores by
// shuffles).
uint32_t DecodeTeam(const Tensor& k, const Tensor& v, uint32_t subgroup) {
  auto words = [](const Tensor& t) {
    return static_cast<uint32_t>(t.type == DType::kF16 ? t.ne[0] / 2 : t.ne[0]);
  };
  const uint32_t widest = std::max(words(k), words(v));
  const uint32_t team = std::bit_ceil((widest + kDecodeWordsPerMember - 1) / kDecodeWordsPerMember);
  return std::min(team, subgroup);
}

FlashAttnPC PushConstants(Recorder& rec, const Tensor* node, std::vector<AddressRange>* reads) {
  const Tensor* q = node->src[0];
  const Tensor* k = node->src[1];
  const Tensor* v = node->src[2];
  const Tensor* mask = node->src[3];
  FlashAttnPC pc{};
  pc.q = rec.Address(q);
  pc.k = rec.Address(k);
  pc.v = rec.Address(v);
  pc.d = rec.Address(node);
  PutDims<1>(pc.q_nb, q->nb);
  PutDims<1>(pc.k_nb, k->nb);
  PutDims<1>(pc.v_nb, v->nb);
  pc.n_kv = U32(k->ne[1]);
  pc.n_q = U32(q->ne[1]);
  pc.H = U32(q->ne[2]);
  pc.H_kv = U32(k->ne[2]);
  pc.B = U32(q->ne[3]);
  pc.scale = node->ParamF32(0);
  *reads = {rec.Range(q), rec.Range(k), rec.Range(v)};
  if (mask != nullptr) {
    pc.m = rec.Address(mask);
    pc.m_nb1 = U32(mask->nb[1]);
    pc.m_type = static_cast<uint32_t>(mask->type);
    reads->push_back(rec.Range(mask));
  }
  return pc;
}

}  // namespace

bool UsesDecodeFlashAttn(const VulkanDevice& device, const Tensor& node) {
  return node.op == Op::kFlashAttn && device.decode_attention() &&
         node.src[0]->ne[1] <= kDecodeMaxQueries;
}

absl::Status RecordFlashAttn(Recorder& rec, const Tensor* node) {
  const Tensor* q = node->src[0];
  const Tensor* k = node->src[1];
  const Tensor* v = node->src[2];
  std::vector<AddressRange> reads;
  const FlashAttnPC pc = PushConstants(rec, node, &reads);
  const AddressRange writes[] = {rec.Range(node)};
  const PhysicalInfo& info = rec.device()->info();
  const uint32_t sg = info.subgroup_size;
  const uint32_t k_f16 = k->type == DType::kF16 ? 1u : 0u;
  const uint32_t v_f16 = v->type == DType::kF16 ? 1u : 0u;
  if (UsesDecodeFlashAttn(*rec.device(), *node)) {
    const uint32_t subgroups =
        std::clamp(info.max_workgroup_invocations / sg, 1u, kDecodeSubgroups);
    const uint32_t rows = q->ne[1] == 1 ? 1u : static_cast<uint32_t>(kDecodeMaxQueries);
    const uint32_t team = DecodeTeam(*k, *v, sg);
    const uint32_t spec[] = {subgroups * sg, k_f16, v_f16, U32(q->ne[0]),
                             U32(v->ne[0]),  sg,    team,  rows};
    const uint32_t groups[3] = {1, U32(q->ne[2]), U32(q->ne[3])};
    return rec.Dispatch("flash_attn_decode", spec, &pc, sizeof(pc), groups, reads, writes);
  }
  // One subgroup per workgroup, one query position per invocation (flash_attn.comp).
  const uint32_t spec[] = {sg, k_f16, v_f16, U32(q->ne[0]), U32(v->ne[0]), sg};
  const uint32_t groups[3] = {U32((q->ne[1] + sg - 1) / sg), U32(q->ne[2]), U32(q->ne[3])};
  return rec.Dispatch("flash_attn", spec, &pc, sizeof(pc), groups, reads, writes);
}

}  // namespace tg::vulkan
