#include "core/graph.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace tg {
namespace {

enum class Mark : uint8_t { kVisiting, kDone };

// Pre-sizing for the visit map: a transformer layer is ~30 tensors, so this covers models of
// a few dozen layers without rehashing.
constexpr size_t kTypicalGraphTensors = 1024;

// Iterative DFS (graphs of a big model are deep; no recursion).
absl::Status Visit(Tensor* root, absl::flat_hash_map<Tensor*, Mark>& marks, Graph& g,
                   size_t max_nodes) {
  std::vector<std::pair<Tensor*, int>> stack = {{root, 0}};
  if (marks.contains(root)) return absl::OkStatus();
  marks[root] = Mark::kVisiting;
  while (!stack.empty()) {
    auto& [t, next] = stack.back();
    // Dependencies: sources, then the view base.
    Tensor* dep = nullptr;
    while (next <= kMaxSrc && dep == nullptr) {
      dep = next < kMaxSrc ? t->src[next] : t->view_src;
      ++next;
    }
    if (dep != nullptr) {
      auto it = marks.find(dep);
      if (it == marks.end()) {
        if (marks.size() >= max_nodes) {
          return absl::ResourceExhaustedError(absl::StrCat("graph has over ", max_nodes, " tensors"));
        }
        marks[dep] = Mark::kVisiting;
        stack.emplace_back(dep, 0);
      } else if (it->second == Mark::kVisiting) {
        return absl::InvalidArgumentError(
            absl::StrCat("graph has a cycle through ", DescribeTensor(*dep)));
      }
      continue;
    }
    marks[t] = Mark::kDone;
    (t->op == Op::kNone ? g.leafs : g.nodes).push_back(t);
    stack.pop_back();
  }
  return absl::OkStatus();
}

uint64_t Mix(uint64_t h, uint64_t v) {
  // splitmix64 finalizer over a running hash: cheap, deterministic across processes.
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

}  // namespace

absl::StatusOr<Graph> BuildGraph(absl::Span<Tensor* const> outputs, size_t max_nodes) {
  Graph g;
  absl::flat_hash_map<Tensor*, Mark> marks;
  marks.reserve(kTypicalGraphTensors);
  for (Tensor* out : outputs) {
    if (out == nullptr) return absl::InvalidArgumentError("BuildGraph: null output");
    if (absl::Status s = Visit(out, marks, g, max_nodes); !s.ok()) return s;
    out->flags |= kFlagOutput;
  }
  return g;
}

uint64_t Graph::uid() const {
  if (!uid_valid_) {
    uid_ = TopologyUid(*this);
    uid_valid_ = true;
  }
  return uid_;
}

uint64_t TopologyUid(const Graph& graph) {
  absl::flat_hash_map<const Tensor*, uint64_t> index;
  uint64_t i = 0;
  for (const Tensor* t : graph.leafs) index[t] = ++i;
  for (const Tensor* t : graph.nodes) index[t] = ++i;
  uint64_t h = Mix(graph.leafs.size(), graph.nodes.size());
  auto hash_tensor = [&](const Tensor* t) {
    h = Mix(h, static_cast<uint64_t>(t->op) << 8 | static_cast<uint64_t>(t->type));
    h = Mix(h, t->flags);
    for (int d = 0; d < kMaxDims; ++d) h = Mix(Mix(h, t->ne[d]), t->nb[d]);
    for (int p = 0; p < kMaxOpParams; ++p) h = Mix(h, static_cast<uint32_t>(t->op_params[p]));
    for (int s = 0; s < kMaxSrc; ++s) {
      auto it = index.find(t->src[s]);
      h = Mix(h, it == index.end() ? 0 : it->second);
    }
    auto it = index.find(t->view_src);
    h = Mix(Mix(h, it == index.end() ? 0 : it->second), t->view_offs);
  };
  for (const Tensor* t : graph.leafs) hash_tensor(t);
  for (const Tensor* t : graph.nodes) hash_tensor(t);
  return h;
}

}  // namespace tg
