// Recording of the ops that rank the elements of a row (sort_rows.glsl): ARGSORT and TOP_K
// (argsort.comp). One workgroup per row. Push-constant structs mirror the shaders' blocks.
#include "backends/vulkan/vk_ops.h"
#include "core/ops.h"

namespace tg::vulkan {
namespace {

// argsort.comp
struct ArgsortPC {
  uint64_t a, d;
  uint32_t a_nb[4];
  uint32_t ne[4];
  uint32_t descending, k;
};
static_assert(sizeof(ArgsortPC) <= kPushConstantBytes);

}  // namespace

absl::Status RecordArgsort(Recorder& rec, const Tensor* node) {
  const Tensor* a = node->src[0];
  ArgsortPC pc{};
  pc.a = rec.Address(a);
  pc.d = rec.Address(node);
  for (int i = 0; i < 4; ++i) {
    pc.a_nb[i] = U32(a->nb[i]);
    pc.ne[i] = U32(a->ne[i]);
  }
  if (node->op == Op::kTopK) {
    pc.descending = 1;
    pc.k = static_cast<uint32_t>(node->op_params[0]);
  } else {
    pc.descending = node->op_params[0] == static_cast<int32_t>(SortOrder::kDescending) ? 1 : 0;
    pc.k = pc.ne[0];
  }
  const uint32_t spec[] = {kSortGroup};
  const AddressRange reads[] = {rec.Range(a)};
  const AddressRange writes[] = {rec.Range(node)};
  return rec.Dispatch1D("argsort", spec, &pc, sizeof(pc), a->NumRows(), reads, writes);
}

}  // namespace tg::vulkan
