// Kernel fusion: the nodes of a recorded order grouped into what one dispatch computes, to cut
// the number of dispatches of a decode step (each costs lavapipe two thread hand-offs) and
// the reads between them. A group is one node, or
//  - RMS_NORM then MUL by a weight row of the norm's length, and before them the ADD of two
//    like tensors that the norm reads (a residual sum): rms_norm.comp writes them all (and
//    the activations of the MUL_MAT after them, when it multiplies their result);
//  - 2-3 MUL_MATs of the same activations (q, k, v);
//  - MUL_MAT gate, MUL_MAT up of the same activations and the SWIGLU of the two, all three
//    written by one kernel;
//  the two matrix groups only where the device's fused kernel takes that many activation
//  columns (any on CPU-like devices, few on GPUs: decode, whose tiled prompt kernel has no
//  fused mode).
// Every member's result is still written: a graph may be one split of a larger one, whose
// other splits read what this one cannot see. A fused kernel must not write memory it still
// reads: the graph allocator may give the SWIGLU the activations' memory (their last reader
// was the products), or the MUL the norm's input, so those groups need the two apart. Members of a
// group are consecutive in the order, so fusing never moves work across a barrier. Pure logic over
// the graph.
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_FUSION_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_FUSION_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "backends/vulkan/vk_graph_order.h"
#include "core/graph.h"
#include "core/tensor.h"

namespace tg::vulkan {

enum class FusionKind { kSingle, kRmsNormMul, kAddRmsNormMul, kMulMatMulti, kGateUpSwiglu };

struct FusedGroup {
  FusionKind kind = FusionKind::kSingle;
  std::vector<const Tensor*> nodes;  // in order; the last one's result is the group's output.
  // kRmsNormMul, kAddRmsNormMul: the MUL_MAT right after the group when it multiplies the
  // group's output (the kernel may then prepare its activations too); else nullptr.
  const Tensor* product = nullptr;
};

// Groups `order` (a permutation of graph.nodes, views included) whose tensors span
// `range_of`. Products fuse when their activations have at most `max_product_columns`
// columns (FusedProductColumns of the device; 0: never).
std::vector<FusedGroup> PlanFusion(absl::Span<Tensor* const> order, const RangeOf& range_of,
                                   int64_t max_product_columns);

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_FUSION_H_
