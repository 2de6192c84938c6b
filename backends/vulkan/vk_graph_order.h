// The order in which a stream records a graph's nodes: ggml's Vulkan graph_optimize idea.
// Kernels that do not depend on each other run between the same two barriers, so nodes are
// pulled forward (within a window) into the current barrier interval when they neither read
// what it writes nor write what it reads or writes, and when moving them ahead of the nodes
// they pass is safe: no source among those nodes and no overlap of their memory (the graph
// allocator may have reused a buffer range between them). Pure logic on address ranges.
#ifndef TENSORGRID_BACKENDS_VULKAN_VK_GRAPH_ORDER_H_
#define TENSORGRID_BACKENDS_VULKAN_VK_GRAPH_ORDER_H_

#include <functional>
#include <vector>

#include "absl/types/span.h"
#include "backends/vulkan/vk_recorder.h"
#include "core/tensor.h"

namespace tg::vulkan {

// How far ahead a node may be pulled: enough for a layer's q/k/v projections and their
// norms and ropes, small enough that the search stays linear in practice.
inline constexpr int kReorderWindow = 24;

// The memory a tensor spans (device addresses).
using RangeOf = std::function<AddressRange(const Tensor*)>;

// A dependency-preserving order of `nodes` with fewer barrier intervals.
std::vector<Tensor*> OrderForFewerBarriers(absl::Span<Tensor* const> nodes,
                                           const RangeOf& range_of);

// How many barriers recording `nodes` in this order needs (each node reading its sources and
// writing itself).
int CountBarriers(absl::Span<Tensor* const> nodes, const RangeOf& range_of);

}  // namespace tg::vulkan

#endif  // TENSORGRID_BACKENDS_VULKAN_VK_GRAPH_ORDER_H_
