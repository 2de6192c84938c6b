// Recording of the ops that rank the elements of a row (sort_rows.glsl): ARGSORT and TOP_K
// (argsort.comp, through RecordRowKernel), SAMPLE (sample.comp). One workgroup per row.
// Push-constant structs mirror the shaders' blocks.
#include <vector>

#include "backends/vulkan/vk_ops.h"
#include "core/ops.h"

namespace tg::vulkan {
namespace {

// sample.comp
struct SamplePC {
  uint64_t l, pos, recent, d;
  uint32_t l_nb[3];  // dimensions 1 to 3
  uint32_t ne[4];
  uint32_t n_recent;
  float temperature, top_p, min_p, penalty;
  uint32_t top_k, seed_lo, seed_hi;
};
static_assert(sizeof(SamplePC) <= kPushConstantBytes);

}  // namespace

// argsort.comp's two words: descending, and how many indices a row keeps.
absl::Status RecordArgsort(Recorder& rec, const Tensor* node) {
  if (node->op == Op::kTopK) {
    return RecordRowKernel(rec, node, "argsort", kSortGroup, /*descending=*/1,
                           static_cast<uint32_t>(node->op_params[0]));
  }
  const bool descending = node->op_params[0] == static_cast<int32_t>(SortOrder::kDescending);
  return RecordRowKernel(rec, node, "argsort", kSortGroup, descending ? 1 : 0,
                         U32(node->src[0]->ne[0]));
}

absl::Status RecordSample(Recorder& rec, const Tensor* node) {
  const Tensor* logits = node->src[0];
  const Tensor* pos = node->src[1];
  const Tensor* recent = node->src[2];
  SamplePC pc{};
  pc.l = rec.Address(logits);
  pc.pos = rec.Address(pos);
  pc.d = rec.Address(node);
  PutDims<1>(pc.l_nb, logits->nb);
  PutDims(pc.ne, logits->ne);
  const SampleParams p = SampleParamsOf(*node);
  pc.temperature = p.temperature;
  pc.top_k = static_cast<uint32_t>(p.top_k);
  pc.top_p = p.top_p;
  pc.min_p = p.min_p;
  pc.penalty = p.repeat_penalty;
  pc.seed_lo = static_cast<uint32_t>(p.seed);
  pc.seed_hi = static_cast<uint32_t>(p.seed >> 32);
  std::vector<AddressRange> reads = {rec.Range(logits), rec.Range(pos)};
  if (recent != nullptr && pc.penalty != 1.0f) {  // as the CPU: a penalty of 1 changes nothing.
    pc.recent = rec.Address(recent);
    pc.n_recent = U32(recent->ne[0]);
    reads.push_back(rec.Range(recent));
  }
  const uint32_t spec[] = {kSortGroup};
  const AddressRange writes[] = {rec.Range(node)};
  return rec.Dispatch1D("sample", spec, &pc, sizeof(pc), logits->NumRows(), reads, writes);
}

}  // namespace tg::vulkan
